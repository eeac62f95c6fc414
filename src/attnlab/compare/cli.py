"""``attnlab-compare``: one table (mean ± std, CI over seeds), pairwise tests and curves."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from attnlab.errors import UserError

from .compute import AXES, monitor_of, parse_at, parse_reach, runs_at, runs_at_best, runs_reaching
from .grouping import Group, filter_runs, group_runs, parse_filters
from .pairwise import compare_pairs
from .plot import PLOT_FORMATS, plot_curves, plot_format
from .report import FORMATS, comparison_legend, format_comparison, format_table, metric_labels
from .runs import Run, load_runs
from .stats import (
    choose_metrics,
    lower_is_better,
    metric_values,
    pooled_seeds_warning,
    resolve_group,
    summarize,
)

EPILOG = """\
examples:
  attnlab-compare logs/train/multiruns/2025-01-01_12-00-00_3f2a9c1e
  attnlab-compare 'logs/*/multiruns/*' --by model.norm --metric val/loss val/acc
  attnlab-compare logs/train/multiruns/* --vs post pre --plot norm.png
  attnlab-compare logs/train/multiruns/* --by model --vs-best
  attnlab-compare logs/train/multiruns/* --all-pairs
  attnlab-compare logs/train/multiruns/* logs/train/runs/* --format latex --plot curves.pdf
  attnlab-compare logs/train/multiruns/* --at tokens=2e6 --plot loss.png --x tokens
  attnlab-compare --wandb my-team/attnlab --filter data.kind=copy

attnlab-train writes a sweep's runs to logs/<task_name>/multiruns/<stamp>/<job> and a
single run to logs/<task_name>/runs/<stamp> (task_name: train, unless a preset or
task_name=... sets another; debug=... runs go to logs/debug/).
Runs are grouped by the overrides that vary across them (seed excluded), or by
--by config keys; --filter KEY=VALUE keeps the runs with that setting. W&B runs
(--wandb) are grouped the same way; a metric W&B summarises (val/loss: the
minimum over validations) says so in its header. Means, sample stds, 95%
Student-t CIs of the mean (and, from 5 runs, median and IQM) use completed runs
only. With exactly two groups, with --vs, --vs-best (the best group against
each other one) or --all-pairs, each pair gets a line below the table (on
stderr with --format csv, latex or json, so stdout is one table to paste or
parse) for the first metric: Welch's t-test, Holm-adjusted p when several tests
are made, Hedges' g, the probability of improvement and, when not significant
at 0.05, the seeds per group that would detect the difference.
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one ``error:`` line like every other mistake."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message}; see attnlab-compare --help")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``attnlab-compare``."""
    p = _Parser(
        prog="attnlab-compare",
        description="Compare runs: mean ± std and CI per group, pairwise tests, curves.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="run directory, sweep directory (searched at any depth) or glob",
    )
    p.add_argument(
        "--metric",
        nargs="+",
        action="extend",
        metavar="M",
        help="metrics to tabulate; the first ranks groups (default: the task's)",
    )
    p.add_argument(
        "--by",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="group by dotted config keys; 'model' means model.name",
    )
    p.add_argument(
        "--vs",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        help="Welch t-test between two groups (labels or unique parts of them); repeat it "
        "for planned comparisons, Holm-corrected over the pairs given",
    )
    p.add_argument(
        "--vs-best",
        action="store_true",
        help="Welch t-test of the best group (★) against every other group",
    )
    p.add_argument(
        "--all-pairs",
        action="store_true",
        help="Welch t-test of every pair of groups (Holm-corrected)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="write validation curves per group; the suffix picks the format ("
        + ", ".join(f".{f}" for f in PLOT_FORMATS)
        + ")",
    )
    p.add_argument(
        "--curve-metric",
        default="val/loss",
        metavar="M",
        help="metrics.csv column to plot (default: val/loss)",
    )
    p.add_argument(
        "--x",
        choices=list(AXES),
        default="step",
        help="x-axis of --plot and --reach: step, tokens (seen), flops (training FLOPs) or "
        "wall (training seconds) (default: step)",
    )
    p.add_argument(
        "--reach",
        metavar="L",
        help="time to target: tabulate, instead of the metrics, where each run's "
        "--curve-metric first reaches L on the --x axis (interpolated between validations; "
        "runs that never reach L are left out of n and counted)",
    )
    p.add_argument(
        "--at",
        metavar="AXIS=N",
        help="read every run's validation curves at equal compute instead of the final "
        "values: tokens=N, flops=N, step=N or wall=N (interpolated; runs that did not "
        "reach N are left out and counted)",
    )
    p.add_argument(
        "--select",
        choices=("final", "best"),
        default="final",
        help="val/* values: the last validation (final, default) or the validation of the "
        "best checkpoint by its monitor (best), which test/* metrics always come from",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="md",
        help="table: md, csv, latex (booktabs tabular) or json (default: md)",
    )
    p.add_argument(
        "--fit",
        nargs="?",
        const="frontier",
        choices=("frontier", "final", "nd"),
        help="scaling fit per group of the first metric: frontier (default; L(C) = E + "
        "A·C^-α on the lower envelope of the curves against FLOPs), final (the same law on "
        "each run's final value against its training FLOPs) or nd (L(N, D) = E + "
        "A/N^α + B/D^β on final values of a size × tokens grid); bootstrap CIs; with "
        "--plot, the log-log plot of the fits",
    )
    p.add_argument(
        "--multiplier",
        nargs=2,
        metavar=("A", "B"),
        help="with --fit: the compute multiplier of group B against group A (> 1: B needs "
        "less compute for the same loss), with its CI",
    )
    p.add_argument(
        "--target-loss",
        type=float,
        metavar="L",
        help="with --multiplier: the loss at which to compare (default: the higher of the "
        "two fitted losses at the largest FLOPs both groups measured, which both reach)",
    )
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read runs from W&B instead")
    p.add_argument("--group", metavar="G", help="W&B run group to read (with --wandb)")
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep only runs whose config has KEY=VALUE (repeatable; e.g. data=copy)",
    )
    return p


def _check_fit_options(args: argparse.Namespace) -> None:
    """The options that do not combine with --fit (or need it), refused before any run is read."""
    if (args.multiplier or args.target_loss is not None) and not args.fit:
        raise UserError("--multiplier and --target-loss read scaling fits; add --fit")
    if args.target_loss is not None and not (math.isfinite(args.target_loss)
                                             and args.target_loss > 0):  # fmt: skip
        raise UserError(f"--target-loss {args.target_loss} must be a positive finite loss")
    if not args.fit:
        return
    reads = [f"--at {args.at} reads them at one budget"] if args.at else []
    if args.select == "best":
        reads.append("--select best reads each at its best validation")
    if reads:
        raise UserError(f"--fit {args.fit} fits whole runs (curves against FLOPs, or "
                        f"final values) and {reads[0]}: they do not combine; give one")  # fmt: skip


def _check_plot_path(plot: str) -> None:
    target = Path(plot)
    if target.is_dir():
        raise UserError(f"--plot {plot} is a directory; give a file name such as {plot}/curves.png")
    plot_format(plot)
    parent = target.parent
    if not parent.is_dir():
        raise UserError(
            f"--plot {plot}: directory {parent} does not exist; create it or choose another path"
        )


def _load(args: argparse.Namespace) -> list[Run]:
    if args.group and not args.wandb:
        raise UserError("--group selects a W&B run group; use it together with --wandb")
    if not args.paths and not args.wandb:
        raise UserError(
            "no runs given; pass a run or sweep directory (or a glob) as PATH, before "
            "--metric/--by (they take several values), or --wandb ENTITY/PROJECT --group G"
        )
    runs = load_runs(args.paths) if args.paths else []
    if args.wandb:
        from .wandb_runs import load_wandb_runs

        runs += load_wandb_runs(args.wandb, args.group)
    return runs


def _test_pairs(
    groups: Sequence[Group], rows: Sequence[dict[str, Any]], metric: str, args: argparse.Namespace
) -> list[tuple[Group, Group]]:
    """The pairs to test: --vs, --vs-best, --all-pairs, or the pair when there are two groups."""
    if args.vs:
        pairs = []
        for queries in args.vs:
            a, b = (resolve_group(groups, q) for q in queries)
            if a is b:
                raise UserError(f"--vs {' '.join(queries)} names the same group ({a.label}) twice")
            pairs.append((a, b))
        return pairs
    if args.vs_best:
        best = [g for g, row in zip(groups, rows, strict=True) if row["best"]]
        if not best:
            raise UserError(f"--vs-best needs two groups with a value of {metric}; check the runs")
        return [(best[0], g) for g in groups if g is not best[0]]
    if args.all_pairs:
        return [(a, b) for i, a in enumerate(groups) for b in groups[i + 1 :]]
    return [(groups[0], groups[1])] if len(groups) == 2 else []


def _welch_lines(pairs: Sequence[tuple[Group, Group]], metric: str) -> list[str]:
    """Each pair's test line and the legend below them."""
    values = [
        (a.label, metric_values(a, metric), b.label, metric_values(b, metric)) for a, b in pairs
    ]
    comparisons = compare_pairs(values, metric, lower_is_better(metric))
    if not comparisons:
        return []
    return [*(format_comparison(c) for c in comparisons), comparison_legend(comparisons)]


def _few_runs_warning(groups: Sequence[Group], metric: str) -> str | None:
    """One line naming the groups with fewer than 3 values of ``metric``, or None."""
    few = [(g.label, len(metric_values(g, metric))) for g in groups]
    few = [(label, n) for label, n in few if n < 3]
    if not few:
        return None
    named = "; ".join(f"{label}: n={n}" for label, n in few)
    return (
        f"warning: {len(few)} group(s) with fewer than 3 completed runs of {metric} "
        f"({named}); CIs and tests are unreliable, add seeds"
    )


def run(argv: Sequence[str] | None = None) -> None:
    """The command itself; user mistakes surface as :class:`UserError`."""
    args = build_parser().parse_args(argv)
    _check_fit_options(args)
    if args.plot:
        _check_plot_path(args.plot)
    at = parse_at(args.at) if args.at else None
    filters = parse_filters(args.filter)
    runs = filter_runs(_load(args), filters)
    metrics = choose_metrics(runs, args.metric)
    note = None
    if args.reach is not None:
        given = (("--at", args.at), ("--fit", args.fit), ("--metric", args.metric),
                 ("--select best", args.select == "best"))  # fmt: skip
        clash = [flag for flag, on in given if on]
        if clash:
            raise UserError(f"--reach tabulates the time to a target, not metrics; drop "
                            f"{' and '.join(clash)}")  # fmt: skip
        target = parse_reach(args.reach)
        runs, metrics = runs_reaching(runs, args.curve_metric, args.x, target)
        note = (
            f"{metrics[0]}: where each run's {args.curve_metric} curve first reaches "
            f"{target:g} (linear interpolation between validations); (n=k) after a value: "
            "only k runs reached it"
        )
    elif at is not None and args.select == "best":
        raise UserError("--at reads the curves at one budget and --select best at the best "
                        "validation; give one of them")  # fmt: skip
    if args.select == "best":
        runs, metrics, monitor = runs_at_best(runs, metrics)
        note = (
            f"@ best {monitor.split(' ')[0]}: each run's validation at which {monitor} "
            "was best, the checkpoint its test/* metrics come from"
        )
    elif at is None and args.reach is None and any(m.startswith("val/") for m in metrics):
        monitor = " ".join(sorted({"{} ({})".format(*monitor_of(r)) for r in runs}))
        where = " (W&B's summary where the header says min or max)" if any(
            r.summarised for r in runs
        ) else ""  # fmt: skip
        note = (
            f"val/*: the last validation of each run{where} (--select best: at its best "
            f"{monitor}); test/*: the best checkpoint by {monitor}"
        )
    if at is not None:
        runs, metrics, dropped = runs_at(runs, metrics, *at)
        note = (
            f"@ {at[0]}={at[1]:g}: each run's curve read at that point (linear "
            "interpolation between validations); (n=k) counts the runs whose validations span it"
        )
        if dropped:
            note += f"; left out, no curve: {', '.join(dropped)}"
    groups = group_runs(runs, args.by)
    chosen = [
        flag
        for flag, on in (
            ("--vs", args.vs),
            ("--vs-best", args.vs_best),
            ("--all-pairs", args.all_pairs),
        )
        if on
    ]
    if len(chosen) > 1:
        raise UserError(f"{' and '.join(chosen)} each choose the groups to test; give one of them")
    if chosen and not metrics:
        raise UserError(
            f"{chosen[0]} needs a metric but no run reports one; check the runs' status"
        )
    rows = summarize(groups, metrics)
    labels = metric_labels(runs, metrics)
    table = format_table(rows, list(groups[0].settings), metrics, args.format, labels)
    pairs = _test_pairs(groups, rows, metrics[0], args) if metrics else []
    lines = _welch_lines(pairs, metrics[0]) if pairs else []
    if args.fit:  # before printing, so a mistake never leaves half an answer
        from .scaling import report as scaling_report

        if not metrics:
            raise UserError("--fit needs a metric but no run reports one; check the runs")
        fitted = scaling_report(groups, metrics[0], args.fit, args.multiplier,
                                args.target_loss, args.plot)  # fmt: skip
        lines = [*lines, *([""] if lines else []), *fitted]
    elif args.plot:
        plot_curves(groups, args.curve_metric, args.plot, args.x)
    warnings = [_few_runs_warning(groups, metrics[0]) if metrics else None]
    warnings.append(pooled_seeds_warning(pairs) if lines else None)
    for warning in filter(None, warnings):
        print(warning, file=sys.stderr)
    if any("bleu" in m for m in metrics):
        signatures = sorted({r.bleu_signature for r in runs if r.bleu_signature})
        bleu = (
            "BLEU: sacreBLEU " + "; ".join(signatures)
            if signatures
            else "BLEU: no sacreBLEU signature recorded (runs from before attnlab kept it)"
        )
        note = f"{note}.\n{bleu}" if note else bleu
    if note and args.format == "md":
        table += f"\n{note}."
    elif note:
        print(note, file=sys.stderr)
    print(table)
    if lines:
        # only Markdown keeps the tests on stdout: CSV, LaTeX and JSON stay one clean table
        text = "\n".join(lines)
        print(
            f"\n{text}" if args.format == "md" else text,
            file=sys.stdout if args.format == "md" else sys.stderr,
        )
    if args.plot:
        print(f"wrote {args.plot}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point: 0 on success, 2 with one ``error:`` line on bad input."""
    try:
        run(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    return 0
