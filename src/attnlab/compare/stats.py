"""Which metrics to report, and per group: mean ± std, a t CI of the mean, median and IQM.

scipy.stats is imported inside the functions: it costs a noticeable fraction of
``attnlab-compare``'s start-up.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnlab.errors import UserError

from .grouping import Group
from .runs import Run

# The main metrics of each task (docs/design.md, "Metric names"); the first one ranks the groups.
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "seq2seq": ("val/loss", "val/exact_match", "val/bleu", "test/bleu"),
    "lm": ("val/loss", "val/ppl"),
    "classification": ("val/loss", "val/acc"),
}
_LOWER_IS_BETTER = ("loss", "ppl", "perplexity", "error", "wall_s", "params")


def is_reach(metric: str) -> bool:
    """A time to a target from ``--reach`` (``step to val/loss ≤ 1.88``)."""
    return any(metric.startswith(f"{axis} to ") for axis in ("step", "tokens", "flops", "wall"))


def lower_is_better(metric: str) -> bool:
    """Losses, perplexities and costs go down; accuracies, exact match and BLEU go up. The
    time to a target (``step to val/acc ≥ 0.9``, from ``--reach``) is a cost."""
    if is_reach(metric):
        return True
    name = metric.split(" @ ", 1)[0].rsplit("/", 1)[-1]  # "val/loss @ tokens=2e+06": loss
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


def repeated_seeds(group: Group) -> dict[str, int]:
    """Seed → the number of the group's completed runs with it, for each seed used more than
    once: the group pools runs of settings outside its grouping keys that share seeds."""
    counts = Counter(str(r.config["seed"]) for r in group.completed if "seed" in r.config)
    return {seed: n for seed, n in sorted(counts.items()) if n > 1}


def pooled_seeds_warning(pairs: Sequence[tuple[Group, Group]]) -> str | None:
    """One line naming the tested groups that hold several runs of one seed, or None: such a
    group pools settings outside the grouping that share their seeds, and a test treats its
    runs as independent repeats (pseudo-replication)."""
    tested = {id(g): g for pair in pairs for g in pair}.values()
    pooled = [(g.label, repeats) for g in tested if (repeats := repeated_seeds(g))]
    if not pooled:
        return None
    named = "; ".join(
        f"{label}: " + ", ".join(f"{n} runs of seed {seed}" for seed, n in repeats.items())
        for label, repeats in pooled
    )
    return (
        f"warning: a test pools runs that share a seed ({named}); they differ in settings "
        "outside the grouping and are not independent repeats: test within one setting "
        "(add its keys to --by)"
    )


def metric_values(group: Group, metric: str) -> list[float]:
    """``metric`` of the group's completed runs (failed and diverged runs are left out)."""
    return [r.metrics[metric] for r in group.completed if metric in r.metrics]


CONFIDENCE = 0.95
ROBUST_FROM = 5  # runs per group from which median and IQM are shown


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """95 % Student-t CI of the mean: x̄ ± t_{0.975, n−1} · s/√n (s with ddof=1).

    The interval every table shows. With the 3 to 5 seeds a study affords it covers the
    true mean 95 % of the time for normally distributed runs, where a bootstrap of the
    mean cannot: its resamples never leave the runs' own range (BCa over 3 runs covers
    ~75 %). ``scipy.stats.t.interval``; None below two runs; a point when all are equal.
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None
    mean, sem = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(len(x))
    if sem == 0:
        return mean, mean
    from scipy import stats

    low, high = stats.t.interval(CONFIDENCE, len(x) - 1, loc=mean, scale=sem)
    return float(low), float(high)


def bootstrap_ci(values: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
    """95 % bootstrap CI of the mean (Efron 1987 BCa; percentile where BCa degenerates).

    Not what the tables show (:func:`t_interval`): a bootstrap interval of the mean is
    too narrow below some twenty runs. It remains for statistics with no closed-form
    interval over many runs.

    ``scipy.stats.bootstrap`` with 9999 resamples drawn from ``seed``, so a table is
    reproducible. BCa needs a jackknife with some spread: below three runs, with all
    values equal, or when it returns NaN, the percentile interval is used. None below
    two runs.
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    from scipy import stats

    methods = ("BCa", "percentile") if len(x) >= 3 else ("percentile",)
    for method in methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DegenerateDataWarning: handled by the fallback
            ci = stats.bootstrap(
                (x,), np.mean, confidence_level=CONFIDENCE, method=method, rng=seed
            ).confidence_interval
        if not (math.isnan(ci.low) or math.isnan(ci.high)):
            break
    return float(ci.low), float(ci.high)


def interquartile_mean(values: Sequence[float]) -> float:
    """IQM, the mean of the middle 50 % (Agarwal et al. 2021): ``trim_mean(x, 0.25)``."""
    from scipy import stats

    return float(stats.trim_mean(np.asarray(values, dtype=float), 0.25))


def summarize(groups: Sequence[Group], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One flat row per group: settings, run counts and ``<metric>_mean/_std/_n`` and more.

    Means and sample standard deviations (ddof=1; None below two runs) are taken
    over completed runs only; ``_ci_low/_ci_high`` is the 95 % t CI of the mean
    (:func:`t_interval`), ``_median`` and ``_iqm`` are None below five runs.
    ``best`` marks the group ranked first on ``metrics[0]`` when at least two groups
    have a value for it.
    """
    rows = []
    for group in groups:
        row: dict[str, Any] = {"group": group.label, **group.settings}
        row["n"] = len(group.runs)
        row["failed"] = sum(not r.completed for r in group.runs)
        row["diverged"] = sum(r.status == "diverged" for r in group.runs)
        for metric in metrics:
            values = np.array(metric_values(group, metric))
            robust = len(values) >= ROBUST_FROM
            ci = t_interval(values)
            row[f"{metric}_mean"] = float(values.mean()) if len(values) else None
            row[f"{metric}_std"] = float(values.std(ddof=1)) if len(values) > 1 else None
            row[f"{metric}_n"] = len(values)
            row[f"{metric}_ci_low"], row[f"{metric}_ci_high"] = ci or (None, None)
            row[f"{metric}_median"] = float(np.median(values)) if robust else None
            row[f"{metric}_iqm"] = interquartile_mean(values) if robust else None
        row["best"] = False
        rows.append(row)
    if metrics:
        ranked = [r for r in rows if r[f"{metrics[0]}_mean"] is not None]
        if len(ranked) > 1:
            pick = min if lower_is_better(metrics[0]) else max
            pick(ranked, key=lambda r: r[f"{metrics[0]}_mean"])["best"] = True
    return rows


def resolve_group(groups: Sequence[Group], query: str, option: str = "--vs") -> Group:
    """The group named by ``query``: its label, one ``key=value`` or value, or a substring;
    ``option`` names the command-line option that gave it, for the error."""
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
                f"{option} '{query}' matches {len(matches)} groups "
                f"({'; '.join(g.label for g in matches)}); give a longer part of one label"
            )
    raise UserError(
        f"{option} '{query}' matches no group; the groups are: "
        f"{'; '.join(g.label for g in groups)}"
    )
