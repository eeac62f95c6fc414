"""A Hydra callback that tells the sweep's caller whether any job failed.

It runs in the process that launched the sweep, whatever the launcher (basic,
joblib, submitit), and reads only what the jobs wrote: their summary.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def job_outcomes(sweep_dir: Path) -> list[tuple[Path, str, str | None]]:
    """(job directory, status, error) for every job of a sweep that wrote summary.json."""
    outcomes = []
    for summary in sorted(sweep_dir.glob("**/summary.json")):
        try:
            data = json.loads(summary.read_text())
            status, error = str(data.get("status")), data.get("error")
        except (OSError, ValueError) as exc:
            status, error = "unreadable", str(exc)
        outcomes.append((summary.parent, status, error))
    return outcomes


class SweepStatus(Callback):
    """After a multirun, report the jobs whose summary.json is not ``completed``."""

    failed: list[str] = []  # read by attnlab.train.main to set the exit code

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        outcomes = job_outcomes(sweep_dir)
        bad = [(d, s, e) for d, s, e in outcomes if s != "completed"]
        SweepStatus.failed = [str(d) for d, _, _ in bad]
        print(f"sweep: {len(outcomes) - len(bad)}/{len(outcomes)} jobs completed in {sweep_dir}")
        for job_dir, status, error in bad:
            reason = " ".join(str(error).split())[:200] if error else "no error recorded"
            print(f"  {status}: {job_dir.name}: {reason}")
        if any(sweep_dir.glob("*/wandb/offline-run-*")):
            print(f"W&B (offline): wandb sync {sweep_dir}/*/wandb/offline-run-*")
