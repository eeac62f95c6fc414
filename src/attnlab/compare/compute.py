"""Equal compute: curves against tokens, FLOPs or time, and metrics read at one point of them.

Runs of different architectures take different numbers of tokens and FLOPs per step,
so "after 600 steps" is not an equal budget. Training logs, at every logging step,
``perf/tokens`` (tokens seen so far), ``perf/flops`` (training FLOPs so far) and
``perf/train_s`` (training seconds so far; see ``attnlab.callbacks.throughput``).
A validation curve, logged against steps, is put on another axis by interpolating
that run's own step → tokens (FLOPs, seconds) mapping; ``--at tokens=N`` then reads
each run's curve at N by linear interpolation between its two nearest validations
(T5's Table 2 compares architectures this way, at equal FLOPs; Raffel et al. 2020
§3.2.2). A run whose validations do not span N (N before its first validation or after its
last) lacks the value: nothing is extrapolated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from attnlab.errors import UserError

from .runs import Curve, Run
from .stats import lower_is_better

AXES = {"step": None, "tokens": "perf/tokens", "flops": "perf/flops", "wall": "perf/train_s"}
AXIS_LABELS = {"step": "step", "tokens": "tokens seen", "flops": "training FLOPs",
               "wall": "training seconds"}  # fmt: skip


def parse_at(text: str) -> tuple[str, float]:
    """``tokens=1e6`` → ("tokens", 1e6); a one-line UserError naming the fix otherwise."""
    axis, sep, number = text.partition("=")
    if not sep or axis not in AXES:
        raise UserError(f"--at {text}: give AXIS=N with AXIS one of {', '.join(AXES)} "
                        "(e.g. --at tokens=2e6)")  # fmt: skip
    try:
        point = float(number)
    except ValueError:
        point = math.nan
    if not math.isfinite(point) or point <= 0:
        raise UserError(f"--at {text}: N must be a positive number (e.g. --at {axis}=2e6)")
    return axis, point


def to_axis(steps: np.ndarray, mapping: Curve) -> np.ndarray:
    """``steps`` on the axis of ``mapping`` (steps → cumulative tokens, FLOPs or seconds).

    Linear between the logged points; before the first and after the last (a
    validation off the logging grid) at the rate of the nearest interval, which is
    exact when every step costs the same. A single logged point: proportional to the
    steps done (Lightning's step s is logged after s + 1 optimiser steps).
    """
    s, x = (np.asarray(a, dtype=float) for a in mapping)
    if len(s) == 1:
        return x[0] * (steps + 1) / (s[0] + 1)
    out = np.interp(steps, s, x)
    for side, (a, b) in ((steps < s[0], (0, 1)), (steps > s[-1], (-2, -1))):
        if side.any():
            rate = (x[b] - x[a]) / (s[b] - s[a]) if s[b] > s[a] else 0.0
            anchor = a if b == 1 else b
            out[side] = x[anchor] + (steps[side] - s[anchor]) * rate
    return out


def axis_curve(run: Run, metric: str, axis: str) -> Curve | None:
    """``metric``'s curve with x on ``axis``; None when the run lacks it or the mapping."""
    curve = run.curve(metric)
    if curve is None or AXES[axis] is None:
        return curve
    mapping = run.curve(AXES[axis])
    if mapping is None or len(mapping[0]) == 0:
        return None
    return to_axis(curve[0], mapping), curve[1]


def check_axis_logged(runs: Sequence[Run], axis: str, option: str, fix: str) -> None:
    """A one-line UserError when no run logged the cumulative column ``axis`` reads."""
    if AXES[axis] is not None and not any(r.curve(AXES[axis]) is not None for r in runs):
        raise UserError(
            f"{option}: the runs did not log {AXES[axis]} (runs from before attnlab logged "
            f"it, or without the throughput callback); {fix}"
        )


def value_at(curve: Curve | None, point: float) -> float | None:
    """The curve's value at x = ``point``, interpolated; None when the curve ends before it
    (not reached) or starts after it (before the first validation)."""
    if curve is None:
        return None
    x, y = curve
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    if len(x) == 0 or point > x[-1] or point < x[0]:
        return None
    return float(np.interp(point, x, y))


def at_label(metric: str, axis: str, point: float) -> str:
    return f"{metric} @ {axis}={point:g}"


def runs_at(
    runs: Sequence[Run], metrics: Sequence[str], axis: str, point: float
) -> tuple[list[Run], list[str], list[str]]:
    """Runs whose metrics are their curves read at ``axis`` = ``point``, the new metric
    names (``val/loss @ tokens=2e+06``), and the metrics left out (test metrics, measured
    once at the end, and numbers without a curve such as params). A run that did not
    reach the point lacks the metric, so the table's n counts the runs that reached it."""
    kept = [m for m in metrics
            if not m.startswith("test/") and any(r.curve(m) is not None for r in runs)]  # fmt: skip
    dropped = [m for m in metrics if m not in kept]
    if not kept:
        raise UserError(
            f"--at {axis}={point:g}: none of {', '.join(metrics)} has a curve in metrics.csv; "
            "choose validation metrics with --metric (e.g. --metric val/loss)"
        )
    check_axis_logged(runs, axis, f"--at {axis}={point:g}", "use --at step=N")
    names = [at_label(m, axis, point) for m in kept]
    moved = []
    for run in runs:
        values = {
            name: v
            for m, name in zip(kept, names, strict=True)
            if (v := value_at(axis_curve(run, m, axis), point)) is not None
        }
        moved.append(dataclasses.replace(run, metrics=values))
    return moved, names, dropped


def parse_reach(text: str) -> float:
    """``--reach 1.88`` → 1.88; a one-line UserError naming the fix otherwise."""
    try:
        target = float(text)
    except ValueError:
        target = math.nan
    if not math.isfinite(target):
        raise UserError(f"--reach {text}: give the target value of --curve-metric as a number "
                        "(e.g. --reach 1.88)")  # fmt: skip
    return target


def reach_label(metric: str, axis: str, target: float) -> str:
    """``step to val/loss ≤ 1.88``: the name of the time-to-target metric (a cost: lower is
    better, whichever way the curve's own metric goes)."""
    return f"{axis} to {metric} {'≤' if lower_is_better(metric) else '≥'} {target:g}"


def first_reach(curve: Curve | None, target: float, lower: bool) -> float | None:
    """The first x at which the curve reaches ``target`` (falls to it when ``lower``, rises
    to it otherwise), interpolated linearly between the two validations around the crossing;
    the first validation's x when it already meets the target (the crossing lies before it),
    None when no validation meets it."""
    if curve is None:
        return None
    x, y = curve
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    met = np.flatnonzero(y <= target if lower else y >= target)
    if met.size == 0:
        return None
    i = int(met[0])
    if i == 0 or y[i] == target:
        return float(x[i])
    return float(x[i - 1] + (x[i] - x[i - 1]) * (y[i - 1] - target) / (y[i - 1] - y[i]))


def runs_reaching(
    runs: Sequence[Run], metric: str, axis: str, target: float
) -> tuple[list[Run], list[str]]:
    """``--reach``: each run's time to target (modded-nanogpt's speedrun measure, Jordan et
    al. 2024) as its one metric, on ``axis``: the first point at which its ``metric`` curve
    reaches ``target``. A run that never reaches it lacks the value, so the table's n counts
    the runs that did."""
    if not any(r.curve(metric) is not None for r in runs):
        raise UserError(f"--reach: no run has a {metric} curve in metrics.csv; choose the "
                        "curve with --curve-metric (e.g. --curve-metric val/loss)")  # fmt: skip
    check_axis_logged(runs, axis, "--reach", "use --x step")
    name = reach_label(metric, axis, target)
    lower = lower_is_better(metric)
    moved = []
    for run in runs:
        hit = first_reach(axis_curve(run, metric, axis), target, lower)
        moved.append(dataclasses.replace(run, metrics={} if hit is None else {name: hit}))
    return moved, [name]


def monitor_of(run: Run) -> tuple[str, str]:
    """(metric, "min" | "max") that picked the run's best checkpoint (ModelCheckpoint's
    monitor and mode in its config; val/loss, min when not recorded)."""
    callbacks = run.config.get("callbacks") or {}
    checkpoint = callbacks.get("model_checkpoint") if isinstance(callbacks, dict) else None
    if isinstance(checkpoint, dict) and checkpoint.get("monitor"):
        return str(checkpoint["monitor"]), str(checkpoint.get("mode", "min"))
    return "val/loss", "min"


def runs_at_best(runs: Sequence[Run], metrics: Sequence[str]) -> tuple[list[Run], list[str], str]:
    """``--select best``: each run's val/* metrics read at its best validation by the
    checkpoint's monitor — the validation of the checkpoint its test/* metrics come
    from — instead of the last one. Returns the runs, the metric names (``val/acc @ best
    val/loss``) and the monitor's description; other metrics are kept as they are."""
    monitors = {monitor_of(r) for r in runs}
    if len(monitors) > 1:
        named = ", ".join(f"{m} ({mode})" for m, mode in sorted(monitors))
        raise UserError(f"--select best: the runs pick their best checkpoint by different "
                        f"metrics ({named}); compare them with --select final")  # fmt: skip
    monitor, mode = monitors.pop() if monitors else ("val/loss", "min")
    suffix = f" @ best {monitor}"
    names = [f"{m}{suffix}" if m.startswith("val/") else m for m in metrics]
    moved = []
    for run in runs:
        values = {n: run.metrics[m] for m, n in zip(metrics, names, strict=True)
                  if not m.startswith("val/") and m in run.metrics}  # fmt: skip
        chosen = run.curve(monitor)
        if chosen is not None and np.isfinite(chosen[1]).any():
            scores = np.where(
                np.isfinite(chosen[1]), chosen[1], np.inf if mode == "min" else -np.inf
            )
            step = chosen[0][int(np.argmin(scores) if mode == "min" else np.argmax(scores))]
            for m, n in zip(metrics, names, strict=True):
                curve = run.curve(m) if m.startswith("val/") else None
                if curve is not None and (hit := np.flatnonzero(curve[0] == step)).size:
                    values[n] = float(curve[1][hit[-1]])
        moved.append(dataclasses.replace(run, metrics=values))
    return moved, names, f"{monitor} ({mode})"
