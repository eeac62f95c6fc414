"""Validation curves per group: the mean over the group's runs and a min–max band.

Runs that logged at different steps are aligned on the union of their steps:
each run is linearly interpolated onto that grid inside its own first..last
step and is left out (not extrapolated) beyond it, so a run that stopped early
narrows the band instead of inventing values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from attnlab.errors import UserError

from .grouping import Group
from .runs import Curve

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def align_curves(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, min, max) of ``curves`` on the union of their steps."""
    steps = np.unique(np.concatenate([s for s, _ in curves]))
    grid = np.full((len(curves), len(steps)), np.nan)
    for i, (s, v) in enumerate(curves):
        inside = (steps >= s[0]) & (steps <= s[-1])
        grid[i, inside] = np.interp(steps[inside], s, v)
    return steps, np.nanmean(grid, 0), np.nanmin(grid, 0), np.nanmax(grid, 0)


def group_curves(group: Group, metric: str) -> list[Curve]:
    """The finite part of ``metric``'s curve for each completed run of ``group`` that has one."""
    curves = []
    for run in group.completed:
        curve = run.curve(metric)
        if curve is None:
            continue
        finite = np.isfinite(curve[1])
        if finite.any():
            curves.append((curve[0][finite], curve[1][finite]))
    return curves


def plot_curves(
    groups: Sequence[Group], metric: str, path: str | os.PathLike[str] | None = None
) -> Figure:
    """Plot ``metric`` against step for each group; save a PNG to ``path`` when given.

    Uses matplotlib's object API with the Agg canvas, so the global backend
    (a notebook's inline backend, say) is left alone.
    """
    from matplotlib.figure import Figure  # imported here: only --plot pays for matplotlib

    per_group = [(g, group_curves(g, metric)) for g in groups]
    per_group = [(g, c) for g, c in per_group if c]
    if not per_group:
        runs = [r for g in groups for r in g.completed if r.curves is not None]
        logged = sorted({name for r in runs for name in r.curves.names()})
        raise UserError(
            f"no completed run logged '{metric}' in metrics.csv; pick one with --curve-metric "
            f"from: {', '.join(logged) or 'nothing (no metrics.csv found)'}"
        )
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for group, curves in per_group:
        steps, mean, low, high = align_curves(curves)
        (line,) = ax.plot(steps, mean, label=f"{group.label} (n={len(curves)})")
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean over runs, band = min–max")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if path is not None:
        fig.savefig(path, dpi=120, format="png")
    return fig
