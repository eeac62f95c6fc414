"""Rendering summaries: a Markdown table for experiments/*/README.md, or CSV."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from .grouping import NOT_SET
from .stats import WelchResult, lower_is_better

BEST = "★"
FORMATS = ("md", "csv")


def format_number(x: float) -> str:
    """Four significant digits; whole numbers for large values (params, tokens/s)."""
    return f"{x:.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def _cell(row: dict[str, Any], metric: str) -> str:
    mean, std, n = row[f"{metric}_mean"], row[f"{metric}_std"], row[f"{metric}_n"]
    if mean is None:
        return NOT_SET
    text = f"{format_number(mean)} ± {format_number(std) if std is not None else NOT_SET}"
    if n != row["n"] - row["failed"]:
        text += f" (n={n})"  # some completed runs did not report this metric
    return text


def format_table(
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    metrics: Sequence[str],
    fmt: str = "md",
) -> str:
    """``rows`` from :func:`summarize` as a Markdown table (with a legend) or as CSV."""
    if fmt == "csv":
        return _csv(rows, keys, metrics)
    show_diverged = any(r["diverged"] for r in rows)
    header = [*(keys or ["group"]), "n", "failed", *(["diverged"] if show_diverged else [])]
    align = ["---"] * len(keys or ["group"]) + ["---:"] * (len(header) - len(keys or ["group"]))
    header += list(metrics)
    align += ["---"] * len(metrics)
    lines = [_md_line(header), _md_line(align)]
    for row in rows:
        cells = [str(row[k]) for k in keys] if keys else [row["group"]]
        cells += [str(row["n"]), str(row["failed"])]
        cells += [str(row["diverged"])] if show_diverged else []
        cells += [_cell(row, m) for m in metrics]
        if row["best"]:
            cells[len(cells) - len(metrics)] += f" {BEST}"
        lines.append(_md_line(cells))
    legend = "mean ± std (sample std, ddof=1) over completed runs; failed counts every run "
    legend += "that did not complete (diverged included)."
    if metrics and any(r["best"] for r in rows):
        direction = "lower" if lower_is_better(metrics[0]) else "higher"
        legend += f" {BEST} best {metrics[0]} ({direction} is better)."
    return "\n".join(lines) + "\n\n" + legend


def _md_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _csv(rows: Sequence[dict[str, Any]], keys: Sequence[str], metrics: Sequence[str]) -> str:
    columns = ["group", *keys, "n", "failed", "diverged"]
    columns += [f"{m}_{s}" for m in metrics for s in ("mean", "std", "n")] + ["best"]
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
