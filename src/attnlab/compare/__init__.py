"""Compare runs: a mean ± std table per group, Welch's t-test and validation curves.

Reads run directories only (``summary.json``, ``metrics.csv``; see DESIGN.md)
and never imports torch, so ``attnlab-compare`` starts in a blink. The same
functions serve notebooks::

    from attnlab.compare import load_runs, group_runs, summarize, format_table
    runs = load_runs(["logs/copy/multiruns/2025-01-01_12-00-00"])
    groups = group_runs(runs)                       # or by=["model.norm", "model"]
    rows = summarize(groups, ["val/loss", "val/exact_match"])
    print(format_table(rows, list(groups[0].settings), ["val/loss", "val/exact_match"]))
"""

from .cli import build_parser, main
from .grouping import Group, group_runs, varying_keys
from .plot import align_curves, plot_curves
from .report import format_table, format_welch
from .runs import Run, find_run_dirs, load_runs, read_run
from .stats import (
    WelchResult,
    available_metrics,
    choose_metrics,
    default_metrics,
    infer_task,
    lower_is_better,
    metric_values,
    resolve_group,
    summarize,
    welch,
)

__all__ = [
    "Group",
    "Run",
    "WelchResult",
    "align_curves",
    "available_metrics",
    "build_parser",
    "choose_metrics",
    "default_metrics",
    "find_run_dirs",
    "format_table",
    "format_welch",
    "group_runs",
    "infer_task",
    "load_runs",
    "lower_is_better",
    "main",
    "metric_values",
    "plot_curves",
    "read_run",
    "resolve_group",
    "summarize",
    "varying_keys",
    "welch",
]
