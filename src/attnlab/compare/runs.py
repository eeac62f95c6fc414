"""Finding run directories and reading what a run left on disk.

A run directory is any directory that holds ``summary.json`` (see docs/design.md,
"Runs on disk"). Its learning curves come from Lightning's ``metrics.csv``,
whose rows are sparse: a metric is empty on the rows where it was not logged.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from attnlab.errors import UserError

SUMMARY = "summary.json"
METRICS_CSV = "metrics.csv"
# Top-level summary.json numbers that are worth tabulating next to the metrics.
SUMMARY_NUMBERS = ("params", "tokens_per_sec", "tokens", "flops", "flops_per_token", "wall_s")

Curve = tuple[np.ndarray, np.ndarray]  # (steps, values), sorted by step


class CurveSource(Protocol):
    """Where a run's learning curves come from (a metrics.csv, a W&B history)."""

    def names(self) -> list[str]:
        """Metric names this source has curves for (may be empty if unknown)."""
        ...

    def curve(self, metric: str) -> Curve | None:
        """The (steps, values) of ``metric``, or None when it was never logged."""
        ...


@dataclass
class Run:
    """One training run: its outcome, the overrides that made it and its final metrics."""

    path: str
    status: str
    overrides: list[str]
    config: dict[str, Any]
    metrics: dict[str, float]
    task: str | None = None
    error: str | None = None
    curves: CurveSource | None = field(default=None, repr=False)
    bleu_signature: str | None = None  # sacreBLEU's, for runs that report BLEU
    # metrics that are not the run's final value, and what they are instead: a W&B
    # summary declared with define_metric, e.g. {"val/loss": "min"}
    summarised: dict[str, str] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def curve(self, metric: str) -> Curve | None:
        """The learning curve of ``metric`` (x = step), or None if the run has none."""
        return self.curves.curve(metric) if self.curves is not None else None


class CsvCurves:
    """Curves read lazily from a Lightning CSVLogger ``metrics.csv``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._columns: dict[str, Curve] | None = None

    def _load(self) -> dict[str, Curve]:
        if self._columns is not None:
            return self._columns
        points: dict[str, dict[float, float]] = {}
        try:
            with open(self.path, newline="") as f:
                for row in csv.DictReader(f):
                    step = _to_float(row.get("step"))
                    if step is None:
                        continue
                    for name, cell in row.items():
                        value = _to_float(cell)
                        if name in (None, "step", "epoch") or value is None:
                            continue
                        points.setdefault(name, {})[step] = value  # last write per step wins
        except (OSError, csv.Error, UnicodeDecodeError):
            points = {}  # a damaged metrics.csv costs the plot this run, not the table
        self._columns = {
            name: (np.array(sorted(pts)), np.array([pts[s] for s in sorted(pts)]))
            for name, pts in points.items()
        }
        return self._columns

    def names(self) -> list[str]:
        return sorted(self._load())

    def curve(self, metric: str) -> Curve | None:
        return self._load().get(metric)


def _to_float(cell: Any) -> float | None:
    if cell is None or isinstance(cell, bool) or cell == "":
        return None
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def _finite_numbers(mapping: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name, value in mapping.items():
        number = _to_float(value)
        if number is not None and math.isfinite(number):
            out[name] = number
    return out


def read_run(run_dir: str | os.PathLike[str]) -> Run:
    """Read one run directory; a missing or corrupt ``summary.json`` is a UserError."""
    run_dir = Path(run_dir)
    summary_path = run_dir / SUMMARY
    try:
        data = json.loads(summary_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(
            f"{summary_path} cannot be read ({e}); fix or delete the file, "
            "or leave that run out of PATH"
        ) from None
    if not isinstance(data, dict):
        raise UserError(
            f"{summary_path} is not a JSON object; fix or delete the file, "
            "or leave that run out of PATH"
        )
    for key, kind in (("metrics", dict), ("config", dict), ("overrides", list), ("status", str)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise UserError(
                f"{summary_path}: '{key}' is a {type(data[key]).__name__}, not a "
                f"{kind.__name__}; it was not written by attnlab-train, fix or delete it"
            )
    metrics = _finite_numbers(data.get("metrics") or {})
    metrics.update(_finite_numbers({k: data.get(k) for k in SUMMARY_NUMBERS}))
    overrides = data.get("overrides") or []
    csv_path = _find_metrics_csv(run_dir)
    return Run(
        path=str(run_dir),
        status=str(data.get("status", "completed")),
        overrides=[str(o) for o in overrides] if isinstance(overrides, list) else [],
        config=data.get("config") if isinstance(data.get("config"), dict) else {},
        metrics=metrics,
        task=data.get("task"),
        error=data.get("error"),
        curves=CsvCurves(csv_path) if csv_path else None,
        bleu_signature=data.get("bleu_signature") if isinstance(data.get("bleu_signature"), str)
        else None,
    )  # fmt: skip


def _find_metrics_csv(run_dir: Path) -> Path | None:
    """``metrics.csv`` at the run root, else the newest one a CSVLogger nested below it."""
    direct = run_dir / METRICS_CSV
    if direct.is_file():
        return direct
    nested = [p for p in run_dir.glob(f"*/**/{METRICS_CSV}") if p.is_file()]
    return max(nested, key=lambda p: p.stat().st_mtime) if nested else None


def find_run_dirs(paths: Iterable[str]) -> list[Path]:
    """Run directories named by ``paths``: run dirs, sweep dirs (any depth) or globs."""
    found: dict[Path, None] = {}  # ordered set
    for arg in paths:
        matches = sorted(glob.glob(arg, recursive=True)) if glob.has_magic(arg) else [arg]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise UserError(f"no such file or directory: {arg}; check the path or the glob")
        before = len(found)
        for match in matches:
            for run_dir in _walk_run_dirs(Path(match)):
                found[run_dir] = None
        if len(found) == before:
            raise UserError(
                f"no {SUMMARY} under {arg}; point at a run directory or a sweep directory "
                "such as logs/<task_name>/multiruns/<stamp>"
            )
    return list(found)


def _walk_run_dirs(path: Path) -> Iterator[Path]:
    if path.is_file():
        if path.name == SUMMARY:
            yield path.parent
        return
    for root, dirs, files in os.walk(path):
        if SUMMARY in files:
            dirs.clear()  # a run directory holds checkpoints, not further runs
            yield Path(root)
        else:
            dirs.sort()
            dirs[:] = [d for d in dirs if not d.startswith(".")]


def load_runs(paths: Iterable[str]) -> list[Run]:
    """Every run under ``paths`` (run dirs, sweep dirs or globs), in path order.

    A run whose summary.json is unreadable or of the wrong shape is skipped with a
    warning naming the file; when no run is left that is a UserError.
    """
    import sys

    runs, skipped = [], []
    for run_dir in find_run_dirs(paths):
        try:
            runs.append(read_run(run_dir))
        except UserError as exc:
            skipped.append(str(exc))
    if not runs:
        raise UserError(
            skipped[0]
            if len(skipped) == 1
            else f"none of the {len(skipped)} runs could be read; {skipped[0]}"
        )
    for reason in skipped:
        print(f"warning: skipped: {reason}", file=sys.stderr)
    return runs
