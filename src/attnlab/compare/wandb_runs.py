"""Reading the same run information from the W&B public API instead of the disk.

wandb is imported only here and only when ``--wandb`` is given: it is slow to
import and needs the network, which the local comparison never does.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from attnlab.errors import UserError

from .runs import SUMMARY_NUMBERS, Curve, Run

OFFLINE_MODES = ("offline", "disabled", "dryrun")
# W&B run states, mapped onto summary.json's status vocabulary.
_STATES = {"finished": "completed", "crashed": "failed", "failed": "failed", "killed": "failed"}
_STEP_KEY = "trainer/global_step"  # what Lightning's WandbLogger logs as x
_STEP_KEYS = (_STEP_KEY, "epoch")  # counters in the summary, not results


def load_wandb_runs(project: str, group: str | None = None) -> list[Run]:
    """Runs of W&B ``project`` ("entity/project"), filtered to one run ``group``."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in OFFLINE_MODES:
        raise UserError(
            f"--wandb needs the W&B API but WANDB_MODE={mode}; unset WANDB_MODE and run "
            "`wandb login`, or compare the local run directories instead"
        )
    if project.count("/") != 1:
        raise UserError(f"--wandb wants ENTITY/PROJECT (e.g. my-team/attnlab), got '{project}'")
    try:
        import wandb
    except ImportError:
        raise UserError("--wandb needs the wandb package; pip install wandb") from None
    try:
        api = wandb.Api(timeout=30)
        runs = [_to_run(r) for r in api.runs(project, filters={"group": group} if group else {})]
    except Exception as e:  # no key, no network, no such project: all fixable by the user
        raise UserError(
            f"cannot read W&B runs of {project}: {_first_line(e)}; check `wandb login`, "
            "the project name and the network"
        ) from None
    if not runs:
        raise UserError(f"W&B project {project} has no runs in group '{group}'; check --group")
    return runs


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"model.norm": "pre"}`` -> ``{"model": {"norm": "pre"}}`` (nested values kept)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        node = nested
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[last] = value
            continue
        nested[key] = value  # a clash with a scalar parent: keep the flat key
    return nested


def _to_run(wandb_run: Any) -> Run:
    config = _unflatten({k: v for k, v in wandb_run.config.items() if not k.startswith("_")})
    summary = {k: wandb_run.summary.get(k) for k in wandb_run.summary.keys()}
    metrics, summarised = {}, {}
    for name, value in summary.items():
        if hasattr(value, "keys"):  # define_metric(summary="min"): {"min": 0.41}, a SummarySubDict
            if len(value.keys()) != 1:
                continue
            kind = next(iter(value.keys()))
            summarised[name], value = kind, value[kind]
        number = _finite(value)
        if number is not None and not name.startswith("_") and name not in _STEP_KEYS:
            metrics[name] = number
    for name in SUMMARY_NUMBERS:  # params is in the config, as summary.json has it on top
        if _finite(config.get(name)) is not None:
            metrics[name] = float(config[name])
    status = summary.get("status")
    if status not in ("completed", "failed", "diverged"):
        status = _STATES.get(wandb_run.state, wandb_run.state)
    overrides = config.get("overrides")
    return Run(
        path="/".join(wandb_run.path),  # entity/project/id, as wandb.Api().run() takes it
        status=str(status),
        overrides=[str(o) for o in overrides] if isinstance(overrides, list) else [],
        config=config,
        metrics=metrics,
        task=next(
            (t for t in (config.get("task"), summary.get("task")) if isinstance(t, str)), None
        ),  # fmt: skip
        curves=WandbCurves(wandb_run, sorted(metrics)),
        summarised={k: v for k, v in summarised.items() if k in metrics},
    )


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        return None
    return float(value)


class WandbCurves:
    """Curves from a W&B run's history, fetched per metric on first use."""

    def __init__(self, wandb_run: Any, names: list[str]) -> None:
        self._run = wandb_run
        self._names = names
        self._cache: dict[str, Curve | None] = {}

    def names(self) -> list[str]:
        return self._names

    def curve(self, metric: str) -> Curve | None:
        if metric not in self._cache:
            self._cache[metric] = self._fetch(metric)
        return self._cache[metric]

    def _fetch(self, metric: str) -> Curve | None:
        try:
            rows = self._run.history(keys=[metric, _STEP_KEY], samples=10_000, pandas=False)
            if not rows:
                rows = self._run.history(keys=[metric], samples=10_000, pandas=False)
        except Exception as e:  # the network can drop between listing runs and reading one
            raise UserError(
                f"cannot read the W&B history of {'/'.join(self._run.path)}: {_first_line(e)}"
            ) from None
        points = sorted(
            (float(row.get(_STEP_KEY, row.get("_step"))), float(row[metric]))
            for row in rows
            if row.get(metric) is not None
        )
        if not points:
            return None
        steps, values = zip(*points, strict=True)
        return np.array(steps), np.array(values)
