"""Which metrics to report, mean ± std per group, and Welch's t-test between two groups."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnlab.errors import UserError

from .grouping import Group
from .runs import Run

# The main metrics of each task (DESIGN.md, "Metric names"); the first one ranks the groups.
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "seq2seq": ("val/loss", "val/exact_match", "val/bleu", "test/bleu"),
    "lm": ("val/loss", "val/ppl"),
    "classification": ("val/loss", "val/acc"),
}
_LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wall_s", "params")


def lower_is_better(metric: str) -> bool:
    """Losses, perplexities and costs go down; accuracies, exact match and BLEU go up."""
    name = metric.rsplit("/", 1)[-1]
    return any(word in name for word in _LOWER_IS_BETTER)


def available_metrics(runs: Sequence[Run]) -> list[str]:
    """Every metric name any run reports, sorted."""
    return sorted({m for r in runs for m in r.metrics})


def infer_task(runs: Sequence[Run]) -> str | None:
    """The runs' task from summary.json, or guessed from their metric names (old runs)."""
    tasks = Counter(r.task for r in runs if r.task in TASK_METRICS)
    if tasks:
        return tasks.most_common(1)[0][0]
    names = " ".join(available_metrics(runs))
    for task, marker in (("seq2seq", "exact_match"), ("seq2seq", "bleu"), ("lm", "ppl")):
        if marker in names:
            return task
    return "classification" if "/acc" in names else None


def default_metrics(runs: Sequence[Run]) -> list[str]:
    """The task's main metrics that the runs actually report."""
    available = available_metrics(runs)
    task = infer_task(runs)
    chosen = [m for m in TASK_METRICS.get(task or "", ()) if m in available]
    if chosen or not available:
        return chosen
    val = [m for m in available if m.startswith("val/")]
    return ["val/loss"] if "val/loss" in available else (val or available)[:1]


def choose_metrics(runs: Sequence[Run], requested: Sequence[str] | None) -> list[str]:
    """``requested`` checked against what the runs report, or the task's defaults."""
    if not requested:
        return default_metrics(runs)
    available = available_metrics(runs)
    for metric in requested:
        if metric not in available:
            raise UserError(
                f"unknown --metric '{metric}'; the runs report: "
                f"{', '.join(available) or 'no metrics at all'}"
            )
    return list(dict.fromkeys(requested))


def metric_values(group: Group, metric: str) -> list[float]:
    """``metric`` of the group's completed runs (failed and diverged runs are left out)."""
    return [r.metrics[metric] for r in group.completed if metric in r.metrics]


def summarize(groups: Sequence[Group], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One flat row per group: settings, run counts and ``<metric>_mean/_std/_n``.

    Means and sample standard deviations (ddof=1; None below two runs) are taken
    over completed runs only. ``best`` marks the group ranked first on
    ``metrics[0]`` when at least two groups have a value for it.
    """
    rows = []
    for group in groups:
        row: dict[str, Any] = {"group": group.label, **group.settings}
        row["n"] = len(group.runs)
        row["failed"] = sum(not r.completed for r in group.runs)
        row["diverged"] = sum(r.status == "diverged" for r in group.runs)
        for metric in metrics:
            values = np.array(metric_values(group, metric))
            row[f"{metric}_mean"] = float(values.mean()) if len(values) else None
            row[f"{metric}_std"] = float(values.std(ddof=1)) if len(values) > 1 else None
            row[f"{metric}_n"] = len(values)
        row["best"] = False
        rows.append(row)
    if metrics:
        ranked = [r for r in rows if r[f"{metrics[0]}_mean"] is not None]
        if len(ranked) > 1:
            pick = min if lower_is_better(metrics[0]) else max
            pick(ranked, key=lambda r: r[f"{metrics[0]}_mean"])["best"] = True
    return rows


@dataclass
class WelchResult:
    """Welch's unequal-variance t-test of group A against group B."""

    t: float
    p: float
    n_a: int
    n_b: int


def welch(a: Sequence[float], b: Sequence[float]) -> WelchResult:
    """Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``); NaN below two per side."""
    if len(a) < 2 or len(b) < 2:
        return WelchResult(math.nan, math.nan, len(a), len(b))
    from scipy import stats  # imported here: scipy.stats costs a noticeable fraction of startup

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero variance -> NaN, said in the output
        result = stats.ttest_ind(a, b, equal_var=False)
    return WelchResult(float(result.statistic), float(result.pvalue), len(a), len(b))


def resolve_group(groups: Sequence[Group], query: str) -> Group:
    """The group named by ``query``: its label, one ``key=value`` or value, or a substring."""
    tests = (
        lambda g: g.label == query,
        lambda g: query in g.label.split(" ") or query in g.settings.values(),
        lambda g: query in g.label,
    )
    for test in tests:
        matches = [g for g in groups if test(g)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UserError(
                f"--vs '{query}' matches {len(matches)} groups "
                f"({'; '.join(g.label for g in matches)}); give a longer part of one label"
            )
    raise UserError(
        f"--vs '{query}' matches no group; the groups are: {'; '.join(g.label for g in groups)}"
    )
