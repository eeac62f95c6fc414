"""attnlab-train's Hydra callbacks: before a run or a sweep, its checks (:class:`PreFlight`);
after a sweep, whether any job failed (:class:`SweepStatus`).

They run in the process that launched the run or the sweep, whatever the launcher (basic,
joblib, submitit); the status reads only what the jobs wrote: their summary.json.
"""

from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Iterator
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


class PreFlight(Callback):
    """Before Hydra makes a run's directory (``on_run_start``) or starts a sweep's sweeper
    (``on_multirun_start``): the config checked (:mod:`attnlab.cli.preflight`), the run
    directories claimed; a refusal is one ``error:`` line, exit code 2. A sweep composes
    and checks every swept value (:func:`attnlab.cli.compose.validate_overrides`)."""

    checked: Any = None  # the single run's checked ModelConfig: read by attnlab.train.run_job
    log_dir: Path | None = None  # where the files go: named by a full disk's error

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from attnlab.cli.compose import check_values

        with _ends_the_command():
            PreFlight.checked = check_values(config, this_machine=True)
            PreFlight.log_dir = claim_run_dirs(config, _overrides(config), multirun=False)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from attnlab.cli.compose import validate_overrides

        overrides = _overrides(config)
        # a sweep launched to a cluster runs elsewhere: its jobs check their machine
        local = not any(o.startswith("hydra/launcher=") and ("slurm" in o or "submitit" in o)
                        for o in overrides)  # fmt: skip
        with _ends_the_command():
            cfg = validate_overrides(overrides, multirun=True, this_machine=local)
            PreFlight.log_dir = claim_run_dirs(cfg, overrides, multirun=True)


@contextlib.contextmanager
def _ends_the_command() -> Iterator[None]:
    """Hydra turns a callback's exception into a warning and goes on: here a refusal ends the
    command in one line (exit code 2), any other error with its traceback (exit code 1)."""
    from attnlab.cli.common import user_errors

    try:
        with user_errors():
            yield
    except Exception:
        traceback.print_exc()
        raise SystemExit(1) from None


def _overrides(config: DictConfig) -> list[str]:
    """The command line's overrides, Hydra's own (``hydra.run.dir=…``) among them."""
    return [*config.hydra.overrides.hydra, *config.hydra.overrides.task]


def claim_run_dirs(cfg: Any, overrides: list[str], multirun: bool) -> Path:
    """Refuse run directories the run may not write (a finished run, a resume that does not
    match, a sweep to plan); return where the run's files go."""
    from attnlab.cli.resume_sweep import plan_sweep
    from attnlab.cli.rundir import check_run_dirs

    resuming = cfg.get("ckpt_path") not in (None, "") or bool(cfg.get("resume"))
    if cfg.get("resume"):
        plan_sweep(overrides, multirun)
    return check_run_dirs(overrides, multirun, resuming, bool(cfg.get("overwrite")),
                          str(cfg.paths.log_dir))  # fmt: skip


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
