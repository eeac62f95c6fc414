"""Compare runs: a mean ± std (and CI) table per group, pairwise tests and curves.

Reads run directories only (``summary.json``, ``metrics.csv``; see docs/design.md)
and never imports torch, so ``attnlab-compare`` starts in a blink. The same
functions serve notebooks::

    from attnlab.compare import load_runs, group_runs, summarize, format_table
    runs = load_runs(["logs/train/multiruns/2025-01-01_12-00-00_3f2a9c1e"])
    groups = group_runs(runs)                       # or by=["model.norm", "model"]
    rows = summarize(groups, ["val/loss", "val/exact_match"])
    print(format_table(rows, list(groups[0].settings), ["val/loss", "val/exact_match"]))
"""

from .cli import build_parser, main
from .grouping import Group, group_runs, varying_keys
from .pairwise import (
    Comparison,
    WelchResult,
    compare_pairs,
    hedges_g,
    holm,
    probability_of_improvement,
    seeds_for_power,
    welch,
    welch_power,
)
from .plot import PLOT_FORMATS, align_curves, group_style, plot_curves, plot_format
from .report import format_comparison, format_table, format_welch
from .runs import Run, find_run_dirs, load_runs, read_run
from .stats import (
    available_metrics,
    bootstrap_ci,
    choose_metrics,
    default_metrics,
    infer_task,
    interquartile_mean,
    lower_is_better,
    metric_values,
    resolve_group,
    summarize,
    t_interval,
)

__all__ = [
    "PLOT_FORMATS",
    "Comparison",
    "Group",
    "Run",
    "WelchResult",
    "align_curves",
    "available_metrics",
    "bootstrap_ci",
    "build_parser",
    "compare_pairs",
    "choose_metrics",
    "default_metrics",
    "find_run_dirs",
    "format_comparison",
    "format_table",
    "format_welch",
    "group_runs",
    "group_style",
    "hedges_g",
    "holm",
    "infer_task",
    "interquartile_mean",
    "load_runs",
    "lower_is_better",
    "main",
    "metric_values",
    "plot_curves",
    "plot_format",
    "probability_of_improvement",
    "read_run",
    "resolve_group",
    "seeds_for_power",
    "summarize",
    "t_interval",
    "varying_keys",
    "welch",
    "welch_power",
]
