"""Rendering summaries: Markdown for experiments/*/README.md, CSV, LaTeX (booktabs) or JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from .grouping import NOT_SET
from .pairwise import ALPHA, MAX_SEEDS, POWER, Comparison, WelchResult
from .runs import Run
from .stats import CONFIDENCE, ROBUST_FROM, is_reach, lower_is_better

BEST = "★"
CI_LABEL = f"{CONFIDENCE * 100:.0f} % t CI"  # the header of each metric's interval column
FORMATS = ("md", "csv", "latex", "json")


def format_number(x: float) -> str:
    """Four significant digits; whole numbers for large values (params, tokens/s)."""
    return f"{x:.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def _cell(row: dict[str, Any], metric: str) -> str:
    mean, std, n = row[f"{metric}_mean"], row[f"{metric}_std"], row[f"{metric}_n"]
    if mean is None:
        if " @ " in metric:
            return "out of range"  # --at: no run spans the point
        return "not reached" if is_reach(metric) else NOT_SET
    text = f"{format_number(mean)} ± {format_number(std) if std is not None else NOT_SET}"
    if n != row["n"] - row["failed"]:
        text += f" (n={n})"  # some completed runs did not report this metric
    return text


def _ci_cell(row: dict[str, Any], metric: str) -> str:
    low, high = row[f"{metric}_ci_low"], row[f"{metric}_ci_high"]
    return NOT_SET if low is None else f"[{format_number(low)}, {format_number(high)}]"


def _optional_cell(row: dict[str, Any], key: str) -> str:
    return NOT_SET if row[key] is None else format_number(row[key])


def _metric_columns(
    rows: Sequence[dict[str, Any]], metric: str, label: str
) -> list[tuple[str, Any]]:
    """(header, cell function) per column of ``metric``: mean ± std, CI, median and IQM."""
    ci = f"{label} {CI_LABEL}"
    columns = [(label, lambda r: _cell(r, metric)), (ci, lambda r: _ci_cell(r, metric))]
    if any(r[f"{metric}_median"] is not None for r in rows):  # some group has ROBUST_FROM runs
        columns += [
            (f"{label} median", lambda r: _optional_cell(r, f"{metric}_median")),
            (f"{label} IQM", lambda r: _optional_cell(r, f"{metric}_iqm")),
        ]
    return columns


def metric_labels(runs: Sequence[Run], metrics: Sequence[str]) -> dict[str, str]:
    """``{"val/loss": "val/loss (min)"}`` for each metric that some run reports not as its
    final value but as a W&B summary (the minimum over validations, …)."""
    labels = {}
    for metric in metrics:
        kinds = sorted({r.summarised.get(metric, "final") for r in runs if metric in r.metrics})
        if kinds and kinds != ["final"]:
            labels[metric] = f"{metric} ({' or '.join(kinds)})"
    return labels


def format_table(
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    metrics: Sequence[str],
    fmt: str = "md",
    labels: Mapping[str, str] | None = None,
) -> str:
    """``rows`` from :func:`summarize` as Markdown (with a legend), CSV, LaTeX or JSON.

    ``labels``: headers of metrics that are not the runs' final values (:func:`metric_labels`).
    """
    if fmt == "csv":
        return _csv(rows, keys, metrics)
    if fmt == "json":
        return _json(rows, keys, metrics)
    labels = labels or {}
    header, body = _cells(rows, keys, metrics, labels)
    legend = _legend(rows, metrics, header)
    if labels:
        legend += (f" {', '.join(labels.values())}: the W&B run summary declared for the metric"
                   " (min: the lowest over validations), not its final value.")  # fmt: skip
    # settings left, run counts right, metric cells (mean ± std, CI) left
    n_text, n_counts = len(keys) or 1, 2 + any(r["diverged"] for r in rows)
    n_metric = len(header) - n_text - n_counts
    if fmt == "latex":
        return _latex(header, "l" * n_text + "r" * n_counts + "l" * n_metric, body, legend)
    align = ["---"] * n_text + ["---:"] * n_counts + ["---"] * n_metric
    lines = [_md_line(header), _md_line(align), *(_md_line(cells) for cells in body)]
    return "\n".join(lines) + "\n\n" + legend


def _cells(
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    metrics: Sequence[str],
    labels: Mapping[str, str],
) -> tuple[list[str], list[list[str]]]:
    """(header, cells per row) of the Markdown and LaTeX tables."""
    show_diverged = any(r["diverged"] for r in rows)
    header = [*(keys or ["group"]), "n", "failed", *(["diverged"] if show_diverged else [])]
    columns = [c for m in metrics for c in _metric_columns(rows, m, labels.get(m, m))]
    header += [name for name, _ in columns]
    body = []
    for row in rows:
        cells = [str(row[k]) for k in keys] if keys else [row["group"]]
        cells += [str(row["n"]), str(row["failed"])]
        cells += [str(row["diverged"])] if show_diverged else []
        first_metric = len(cells)
        cells += [cell(row) for _, cell in columns]
        if row["best"]:
            cells[first_metric] += f" {BEST}"
        body.append(cells)
    return header, body


def _legend(rows: Sequence[dict[str, Any]], metrics: Sequence[str], header: Sequence[str]) -> str:
    legend = "mean ± std (sample std, ddof=1) over completed runs; failed counts every run "
    legend += "that did not complete (diverged included). "
    legend += f"{CI_LABEL}: Student-t interval of the mean, mean ± t_{{0.975, n−1}}·std/√n."
    if any(name.endswith(" IQM") for name in header):
        legend += f" Median and IQM (mean of the middle 50 %): groups of ≥ {ROBUST_FROM} runs."
    if metrics and any(r["best"] for r in rows):
        direction = "lower" if lower_is_better(metrics[0]) else "higher"
        legend += f" {BEST} best {metrics[0]} ({direction} is better)."
    return legend


def _md_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


# LaTeX's special characters, then the table's symbols in math mode
_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    BEST: r"$\star$",
    NOT_SET: "---",
}


def latex_escape(text: str) -> str:
    """``text`` safe inside a LaTeX table cell; ± and ★ become ``$\\pm$`` and ``$\\star$``."""
    return "".join(_LATEX.get(char, char) for char in text)


def _latex(header: Sequence[str], spec: str, body: Sequence[Sequence[str]], legend: str) -> str:
    """A booktabs ``tabular`` (``\\usepackage{booktabs}``), the legend as comments above it."""

    def line(cells: Sequence[str]) -> str:
        return " & ".join(latex_escape(c) for c in cells) + r" \\"

    return "\n".join(
        [
            *textwrap.wrap(legend, 98, initial_indent="% ", subsequent_indent="% "),
            rf"\begin{{tabular}}{{{spec}}}",
            r"\toprule",
            line(header),
            r"\midrule",
            *(line(cells) for cells in body),
            r"\bottomrule",
            r"\end{tabular}",
        ]
    )


def _json(rows: Sequence[dict[str, Any]], keys: Sequence[str], metrics: Sequence[str]) -> str:
    """A list of row objects: numbers stay numbers, a missing (or non-finite) value is ``null``."""

    def number(x: Any) -> Any:
        return None if isinstance(x, float) and not math.isfinite(x) else x

    stats = ("mean", "std", "n", "ci_low", "ci_high", "median", "iqm")
    objects = [
        {
            "group": row["group"],
            "settings": {k: row[k] for k in keys},
            "n": row["n"],
            "failed": row["failed"],
            "diverged": row["diverged"],
            "best": row["best"],
            "metrics": {m: {s: number(row[f"{m}_{s}"]) for s in stats} for m in metrics},
        }
        for row in rows
    ]
    return json.dumps(objects, indent=2, ensure_ascii=False)


def _csv(rows: Sequence[dict[str, Any]], keys: Sequence[str], metrics: Sequence[str]) -> str:
    columns = ["group", *keys, "n", "failed", "diverged"]
    stats = ("mean", "std", "n", "ci_low", "ci_high", "median", "iqm")
    columns += [f"{m}_{s}" for m in metrics for s in stats] + ["best"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(row[c]) for c in columns])
    return out.getvalue().rstrip("\n")


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else value


def format_welch(metric: str, label_a: str, label_b: str, result: WelchResult) -> str:
    """One line: ``Welch t-test on val/loss: A vs B: t=-3.1, p=0.012 (n=5 vs 5)``."""
    counts = f"n={result.n_a} vs {result.n_b}"
    if min(result.n_a, result.n_b) < 2:
        counts += "; needs at least 2 completed runs per group"
    elif math.isnan(result.p):
        counts += "; no variance within the groups"
    return (
        f"Welch t-test on {metric}: {label_a} vs {label_b}: "
        f"t={result.t:.3g}, p={result.p:.3g} ({counts})"
    )


def format_comparison(comparison: Comparison) -> str:
    """:func:`format_welch`, then Holm's p (when several tests), Hedges' g, P(A better), seeds.

    ``Welch t-test on val/loss: A vs B: t=-3.1, p=0.012, Holm p=0.024 (n=5 vs 5);
    Hedges' g=-1.8, P(A better)=0.92`` and, when not significant at α = 0.05,
    ``; not significant: ~12 seeds per group would detect this difference (power 0.8)``.
    """
    c = comparison
    line = format_welch(c.metric, c.label_a, c.label_b, c.welch)
    if c.p_holm is not None and not math.isnan(c.p_holm):
        line = line.replace(" (n=", f", Holm p={c.p_holm:.3g} (n=", 1)
    if not math.isnan(c.p_better):
        if not math.isnan(c.hedges_g):
            line += f"; Hedges' g={c.hedges_g:.3g}"
        line += f"; P(A better)={c.p_better:.2g}"
    if not math.isnan(c.welch.ci[0]):
        low, high = c.welch.ci
        line += f"; A − B = {c.welch.diff:.3g}, 95% CI [{low:.3g}, {high:.3g}]"
    if not math.isnan(c.welch.p) and not c.significant:
        seeds = f"~{c.seeds_needed}" if c.seeds_needed is not None else f"> {MAX_SEEDS}"
        line += (
            f"; not significant at α={ALPHA:g}: {seeds} seeds per group would detect "
            f"this difference (power {POWER:g})"
        )
    return line


def comparison_legend(comparisons: Sequence[Comparison]) -> str:
    """What the numbers after p mean, said once below the test lines."""
    legend = "In each line A vs B: "
    if any(c.p_holm is not None for c in comparisons):
        legend += f"Holm p: Holm–Bonferroni-adjusted over the {len(comparisons)} tests; "
    legend += (
        "Hedges' g: (mean A − mean B) / pooled SD, small-sample corrected; "
        "P(A better): share of run pairs where A's run is better, ties ½; "
        "A − B: the difference of the means, with its Welch t 95% CI "
        "(Welch–Satterthwaite df, as the test; not Holm-adjusted); "
        "seeds: runs per group for which Welch's test would reach power "
        f"{POWER:g} at α={ALPHA:g} if the observed means and SDs held."
    )
    return legend
