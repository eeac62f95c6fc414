"""Validation curves per group: the mean over the group's runs and a min–max band.

Runs that logged at different steps are aligned on the union of their steps:
each run is linearly interpolated onto that grid inside its own first..last
step and is left out (not extrapolated) beyond it, so a run that stopped early
narrows the band instead of inventing values.

Each group gets a (colour, line style) pair that no other of the first
:data:`DISTINCT_GROUPS` groups shares, so curves stay apart in print and in
greyscale: colours from matplotlib's qualitative ``tab10`` and four line styles
cycle together, and since lcm(10, 4) = 20 the pairs repeat only after 20 groups.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from attnlab.errors import UserError

from .compute import AXES, AXIS_LABELS, axis_curve
from .grouping import Group
from .runs import Curve

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_FORMATS = ("png", "pdf", "svg")  # --plot FILE writes the format its suffix names
LINE_STYLES = ("-", "--", ":", "-.")
DISTINCT_GROUPS = 20  # lcm(len(tab10), len(LINE_STYLES))
LEGEND_INSIDE_UP_TO = 6  # more groups than this and the legend goes below the axes
LEGEND_HALF_WIDTH_CHARS = 46  # the longest label that fits one of two columns at x-small
LOG_SCALE_DECADES = 3  # curves spanning more than this many powers of ten get a log y axis


def plot_format(path: str | os.PathLike[str]) -> str:
    """The file format named by ``path``'s suffix, one of :data:`PLOT_FORMATS`."""
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        supported = ", ".join(f".{f}" for f in PLOT_FORMATS)
        named = f"unknown format '.{suffix}'" if suffix else "no file suffix"
        raise UserError(f"--plot {os.fspath(path)}: {named}; end the name with {supported}")
    return suffix


def group_style(index: int) -> dict[str, str]:
    """Colour and line style of the ``index``-th group; distinct for the first 20 groups."""
    from matplotlib import colormaps

    colours = colormaps["tab10"].colors
    return {
        "color": colours[index % len(colours)],
        "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
    }


def spans_decades(values: Sequence[np.ndarray], decades: float = LOG_SCALE_DECADES) -> bool:
    """Whether the values are all positive and their max/min exceeds 10**decades: the y
    axis is then logarithmic, so that the small curves do not lie flat on zero."""
    every = np.concatenate([np.ravel(v) for v in values])
    return bool(every.size and every.min() > 0 and every.max() / every.min() > 10**decades)


def align_curves(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, min, max) of ``curves`` on the union of their steps."""
    steps = np.unique(np.concatenate([s for s, _ in curves]))
    grid = np.full((len(curves), len(steps)), np.nan)
    for i, (s, v) in enumerate(curves):
        inside = (steps >= s[0]) & (steps <= s[-1])
        grid[i, inside] = np.interp(steps[inside], s, v)
    return steps, np.nanmean(grid, 0), np.nanmin(grid, 0), np.nanmax(grid, 0)


def group_curves(group: Group, metric: str, axis: str = "step") -> list[Curve]:
    """The finite part of ``metric``'s curve, x on ``axis`` (step, tokens, flops, wall), for
    each completed run of ``group`` that has one."""
    curves = []
    for run in group.completed:
        curve = axis_curve(run, metric, axis)
        if curve is None:
            continue
        finite = np.isfinite(curve[1])
        if finite.any():
            curves.append((curve[0][finite], curve[1][finite]))
    return curves


def plot_curves(
    groups: Sequence[Group], metric: str, path: str | os.PathLike[str] | None = None,
    axis: str = "step",
) -> Figure:  # fmt: skip
    """Plot ``metric`` against ``axis`` (step, or tokens, FLOPs or seconds of training:
    :mod:`attnlab.compare.compute`) for each group; save to ``path`` when given.

    The file format follows the suffix of ``path`` (:data:`PLOT_FORMATS`). Uses
    matplotlib's object API, so the global backend (a notebook's inline backend,
    say) is left alone. Returns the figure; its lines are ``fig.axes[0].lines``.
    """
    from matplotlib.figure import Figure  # imported here: only --plot pays for matplotlib

    per_group = [(g, group_curves(g, metric, axis)) for g in groups]
    per_group = [(g, c) for g, c in per_group if c]
    if not per_group and axis != "step" and any(group_curves(g, metric) for g in groups):
        raise UserError(
            f"--x {axis}: the runs did not log {AXES[axis]} (runs from before attnlab logged "
            "it, or without the throughput callback); plot against --x step"
        )
    if not per_group:
        runs = [r for g in groups for r in g.completed if r.curves is not None]
        logged = sorted({name for r in runs for name in r.curves.names()})
        raise UserError(
            f"no completed run logged '{metric}' in metrics.csv; pick one with --curve-metric "
            f"from: {', '.join(logged) or 'nothing (no metrics.csv found)'}"
        )
    fmt = plot_format(path) if path is not None else None
    many = len(per_group) > LEGEND_INSIDE_UP_TO
    labels = [f"{group.label} (n={len(curves)})" for group, curves in per_group]
    # two legend columns below the axes, one when a label would not fit in half the width
    ncols = 2 if max(len(label) for label in labels) <= LEGEND_HALF_WIDTH_CHARS else 1
    rows = -(-len(per_group) // ncols)
    # 5.5 in: legible at a paper's text width, and still at a column's when scaled
    fig = Figure(figsize=(5.5, 3.6 + (0.18 * rows if many else 0)), layout="constrained")
    ax = fig.add_subplot()
    for i, ((_, curves), label) in enumerate(zip(per_group, labels, strict=True)):
        steps, mean, low, high = align_curves(curves)
        style = group_style(i)
        ax.plot(steps, mean, label=label, linewidth=1.4, **style)
        ax.fill_between(steps, low, high, color=style["color"], alpha=0.15, linewidth=0)
    ax.set_xlabel(AXIS_LABELS[axis])
    ax.set_ylabel(metric)
    if spans_decades([v for _, curves in per_group for _, v in curves]):
        ax.set_yscale("log")  # a quantity that grows by orders of magnitude (gradient ratios)
    ax.set_title(f"{metric}: mean over runs, band = min–max", fontsize="medium")
    ax.grid(alpha=0.3)
    if many:  # below the axes, so the curves keep the whole plot
        fig.legend(loc="outside lower center", ncols=ncols, fontsize="x-small", frameon=False)
    else:
        ax.legend(fontsize="small")
    if path is not None:
        fig.savefig(path, dpi=150, format=fmt)
    return fig
