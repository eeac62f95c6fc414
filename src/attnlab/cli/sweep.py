"""A Hydra callback that tells the sweep's caller whether any job failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepStatus(Callback):
    """After a multirun, count the jobs whose summary.json is not ``completed``."""

    failed: list[str] = []  # read by attnlab.train.main to set the exit code

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        bad = []
        for summary in sorted(sweep_dir.glob("**/summary.json")):
            try:
                status = json.loads(summary.read_text()).get("status")
            except (OSError, ValueError):
                status = "unreadable"
            if status != "completed":
                bad.append(f"{summary.parent} ({status})")
        SweepStatus.failed = bad
        n_jobs = len(list(sweep_dir.glob("**/summary.json")))
        print(f"sweep: {n_jobs - len(bad)}/{n_jobs} jobs completed in {sweep_dir}")
        for line in bad:
            print(f"  not completed: {line}")
