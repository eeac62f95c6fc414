"""``summary.json``: one file per run with its outcome, settings and final metrics.

Written at the end of every run, failed ones included, so sweeps can be
compared without parsing logs (``attnlab-compare`` reads it).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

STATUSES = ("completed", "failed", "diverged", "interrupted", "preempted")


def git_sha() -> str | None:
    """The commit of the attnlab checkout, when it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
            text=True, timeout=5, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _ratio(numerator: Any, denominator: Any) -> float | None:
    top, bottom = _number(numerator), _number(denominator)
    return top / bottom if top is not None and bottom else None


def write_summary(run_dir: str | Path, **fields: Any) -> Path:
    """Write ``summary.json`` atomically (temporary file, then rename)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = {k: _number(v) for k, v in (fields.get("metrics") or {}).items()}
    summary = {
        "status": fields.get("status", "failed"),
        "error": fields.get("error"),
        "overrides": list(fields.get("overrides") or []),
        "config": fields.get("config") or {},
        "metrics": {k: v for k, v in metrics.items() if v is not None},
        "task": fields.get("task"),
        "params": fields.get("params"),
        "active_params": fields.get("active_params"),  # per token (a mixture of experts: fewer)
        "tokens_per_sec": fields.get("tokens_per_sec"),
        "tokens": fields.get("tokens"),  # tokens seen in training (perf/tokens at the end)
        "flops": fields.get("flops"),  # training FLOPs spent (perf/flops at the end)
        "flops_per_token": _ratio(fields.get("flops"), fields.get("tokens")),
        "wall_s": fields.get("wall_s"),
        "startup_s": _number(fields.get("startup_s")),  # process start to first training step
        "torch_threads": fields.get("torch_threads"),  # the run's intra-op threads
        "git_sha": fields.get("git_sha", git_sha()),
    }
    for key in ("stopped_at_step", "command", "bleu_signature"):
        if key in fields:
            summary[key] = fields[key]
    path = run_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(summary, indent=2, default=str))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc  # a full disk: which file
    return path
