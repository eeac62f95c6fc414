"""``attnlab-train [overrides] [-m]``: train (fit, then test on the best checkpoint).

attnlab-train model=decoder_only model.norm=post data=copy seed=1
attnlab-train -m model=decoder_only,encoder_decoder model.norm=pre,post
attnlab-train --options      # every value of every registry-backed key, with its reference
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from attnlab.cli.common import (
    config_dir,
    fail,
    hydra_errors,
    quiet_environment,
    register_resolvers,
    torchrun_run_dir,
    user_errors,
)

HYDRA_FLAGS_WITHOUT_CHECK = (
    "--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--shell-completion",
)  # fmt: skip

# exit codes of a run that did not complete (a sweep with such a job exits 1)
EXIT_CODES = {"failed": 1, "diverged": 1, "interrupted": 130, "preempted": 143}

# Jobs of a joblib or submitit sweep run in other processes, which import this module to
# unpickle run_job; the config's resolvers must exist there before Hydra resolves it.
register_resolvers()


def run_job(cfg: Any) -> float | None:
    """One training run inside Hydra: always leaves summary.json in the run directory."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from attnlab.cli.console import log_to_file
    from attnlab.cli.rundir import is_primary_process

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    overrides = list(hydra_cfg.overrides.task)
    started = time.perf_counter()
    result: dict[str, Any] = {"status": "failed", "error": None, "metrics": {}}
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an unresolvable value is reported by the build below
        config = OmegaConf.to_container(cfg, resolve=False)
    # Lightning's console handler must bind to the real stderr, not to this run's tee
    import lightning.pytorch  # noqa: F401

    with log_to_file(run_dir) if is_primary_process() else contextlib.nullcontext():
        return _run_logged(cfg, run_dir, hydra_cfg, multirun, overrides, config, started, result)


def _run_logged(cfg: Any, run_dir: Path, hydra_cfg: Any, multirun: bool, overrides: list[str],
                config: Any, started: float, result: dict[str, Any]) -> float | None:  # fmt: skip
    from omegaconf import open_dict

    from attnlab.callbacks.stop import GracefulStop
    from attnlab.callbacks.summary import write_summary
    from attnlab.cli.console import job_line, parallel_launcher, print_config_tree
    from attnlab.cli.resume_sweep import decide, recorded_value
    from attnlab.cli.rundir import is_primary_process
    from attnlab.cli.wandb_setup import sync_hint

    # a job that SLURM requeued (submitit, after a preemption or its time limit) continues
    requeued = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0
    if multirun and (cfg.get("resume") or requeued):
        action = decide(run_dir, bool(cfg.get("retry_failed")))
        if action == "skip":
            print(job_line(hydra_cfg.job.num, overrides, f"kept from earlier ({run_dir})"))
            return recorded_value(run_dir, str(cfg.get("optimized_metric", "val/loss")))
        if action == "resume":
            print(job_line(hydra_cfg.job.num, overrides, "continues from its last.ckpt"))
            with open_dict(cfg):
                cfg.ckpt_path = "last"  # this job's own checkpoints/last.ckpt
    quiet = multirun and parallel_launcher(hydra_cfg)
    if quiet:  # side-by-side jobs: one line each instead of bars overwriting each other
        with open_dict(cfg):
            cfg.trainer.enable_progress_bar = False
        print(job_line(hydra_cfg.job.num, overrides, f"started in {run_dir}"), flush=True)
    elif not multirun and is_primary_process():
        print_config_tree(config)
        print(f"run directory: {run_dir}", flush=True)
    try:
        result.update(train(cfg, run_dir, banner=not quiet))
    except (KeyboardInterrupt, SystemExit) as exc:
        if isinstance(exc, SystemExit) and exc.code == 2:
            raise  # a one-line error already printed
        if GracefulStop.handed_over:  # the cluster's handler requeued the job and exits
            result.update(status="preempted", error="preempted; requeued from last.ckpt")
            _finish(write_summary, run_dir, result, overrides, config, started)
            raise
        result.update(status="interrupted", error="interrupted (a second Ctrl-C) mid-step")
        _finish(write_summary, run_dir, result, overrides, config, started)
        raise SystemExit(EXIT_CODES["interrupted"]) from None
    except Exception as exc:
        user = as_user_error(exc, run_dir)
        if user is not None:  # the user's to fix: one line (a sweep goes on)
            result["error"] = str(user)
            if not multirun:
                _finish(write_summary, run_dir, result, overrides, config, started)
                fail(str(user))
            print(f"error: job {hydra_cfg.job.num}: {' '.join(str(user).split())}",
                  file=sys.stderr)  # fmt: skip
        else:  # a crash (OOM, bug) is recorded, not hidden
            result["error"] = f"{type(exc).__name__}: {exc}"
            if not multirun:
                _finish(write_summary, run_dir, result, overrides, config, started)
                raise
            traceback.print_exc()
    unwritten = _finish(write_summary, run_dir, result, overrides, config, started)
    if unwritten is not None:  # the run's record could not be written: say so, exit 2
        if not multirun:
            fail(unwritten)
        print(f"error: job {hydra_cfg.job.num}: {unwritten}", file=sys.stderr)
    if quiet:
        shown = " ".join(f"{k}={v:.4g}" for k, v in sorted(result["metrics"].items())
                         if k.startswith("val/"))  # fmt: skip
        print(job_line(hydra_cfg.job.num, overrides, f"{result['status']} {shown}"), flush=True)
    if not multirun:
        metrics = result["metrics"]
        shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items())
                          if "/" in k and not k.startswith("train/"))  # fmt: skip
        print(f"run directory: {run_dir}")
        print(f"checkpoint:    {result.get('best_ckpt') or run_dir / 'checkpoints' / 'last.ckpt'}")
        print(f"summary:       {run_dir / 'summary.json'}  [{result['status']}] {shown}")
        hint = sync_hint(run_dir)
        if hint:
            print(f"W&B (offline): {hint}")
    if result["status"] in ("interrupted", "preempted"):  # the whole command stops, sweeps too
        print(f"{result['status']}: {result.get('error')}; {run_dir}", file=sys.stderr)
        raise SystemExit(EXIT_CODES[result["status"]])
    if not multirun and result["status"] != "completed":
        raise SystemExit(EXIT_CODES[result["status"]])
    # For search sweepers (Optuna); None marks a failed trial, and the study goes on.
    value = result["metrics"].get(str(cfg.get("optimized_metric", "val/loss")))
    if result["status"] != "completed" or value is None or value != value:
        return None
    return float(value)


def as_user_error(exc: Exception, run_dir: Path | None = None) -> Exception | None:
    """``exc`` as a UserError when the user can fix it, else None (a crash).

    Besides attnlab's own UserErrors: a write that failed for want of space or
    permission, and a setting that Lightning itself refused (raised in its own code).
    """
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from attnlab.cli.rundir import disk_error
    from attnlab.errors import ConfigError, UserError

    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, OSError):
        message = disk_error(exc, run_dir)
        return ConfigError(message) if message else None
    frames = traceback.extract_tb(exc.__traceback__)
    in_lightning = bool(frames) and "/lightning/" in frames[-1].filename
    if isinstance(exc, MisconfigurationException) or (isinstance(exc, ValueError) and in_lightning):
        reason = " ".join(str(exc).split())
        return ConfigError(
            f"Lightning refused a setting: {reason}; fix that override (trainer.*, logger.*)"
        )
    return None


def _finish(write_summary: Any, run_dir: Path, result: dict[str, Any], overrides: list[str],
            config: Any, started: float) -> str | None:  # fmt: skip
    """Write summary.json; the one-line error when a full or read-only disk prevents it (a
    caller that is already reporting another error keeps that one)."""
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from attnlab.cli.rundir import disk_error

    if rank_zero_only.rank != 0:
        return None
    try:
        write_summary(
            run_dir,
            status=result["status"], error=result["error"], overrides=overrides, config=config,
            metrics=result["metrics"], task=result.get("task"), params=result.get("params"),
            tokens_per_sec=result.get("tokens_per_sec"), tokens=result.get("tokens"),
            flops=result.get("flops"), wall_s=round(time.perf_counter() - started, 3),
            **{k: result[k] for k in ("stopped_at_step", "bleu_signature") if k in result},
        )  # fmt: skip
    except OSError as exc:  # a full or read-only disk: say so, keep the original error
        print(f"warning: summary.json not written: {exc}", file=sys.stderr)
        return disk_error(exc, run_dir) or f"summary.json not written: {exc}"
    return None


def train(cfg: Any, run_dir: Path, banner: bool = False) -> dict[str, Any]:
    """Build everything from the config, fit, test; return status and metrics."""
    import lightning as L

    from attnlab.cli import pipeline
    from attnlab.cli.wandb_setup import ModelSizeInConfig, finish_wandb, uses_wandb

    pipeline.check_config(cfg)
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    datamodule = pipeline.build_data(cfg)
    task = pipeline.build_task(cfg, datamodule)
    resume_from = pipeline.checkpoint_to_resume(cfg, run_dir)
    resume_step = None  # None: a fresh metrics.csv; a step: keep the rows up to it
    if resume_from:
        step = pipeline.check_resumable(task, resume_from)
        resume_step = sys.maxsize if step is None else step
    callbacks = pipeline.build_callbacks(cfg)
    loggers = pipeline.build_loggers(cfg, run_dir, resume_step)
    if uses_wandb(loggers):
        callbacks.append(ModelSizeInConfig())
    out: dict[str, Any] = {"status": "failed"}
    try:
        trainer = pipeline.build_trainer(cfg, run_dir, callbacks, loggers)
        if banner and trainer.is_global_zero:
            print(f"parameters:    {task.model.num_params():,}\n"
                  f"device:        {trainer.strategy.root_device} × {trainer.world_size} "
                  f"({trainer.precision} precision)", flush=True)  # fmt: skip
        if trainer.is_global_zero:
            datamodule.save_tokenizer(run_dir)
        out = _fit_and_test(cfg, trainer, task, datamodule, resume_from)
        out.update(task=datamodule.task, params=task.model.num_params())
        return out
    finally:
        finish_wandb(loggers, out["status"])


def _fit_and_test(cfg: Any, trainer: Any, task: Any, datamodule: Any, resume_from: str | None
                  ) -> dict[str, Any]:  # fmt: skip
    from attnlab.callbacks.throughput import TokenThroughput
    from attnlab.cli import pipeline

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        trainer.fit(task, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
        if resume_from:  # a fit with nothing left to do logs nothing: keep what was logged
            metrics.update(pipeline.last_logged(trainer))
        metrics.update(pipeline.scalar_metrics(trainer.callback_metrics))
    status = getattr(trainer, "attnlab_status", None) or "completed"
    best = pipeline.best_checkpoint(trainer)
    if cfg.get("test", True) and status == "completed":
        pipeline.test_without_repeats(datamodule)
        trainer.test(task, datamodule=datamodule, ckpt_path=best, weights_only=True)
        metrics.update(pipeline.scalar_metrics(trainer.callback_metrics))
    throughput = next((c for c in trainer.callbacks if isinstance(c, TokenThroughput)), None)
    counted = throughput is not None and throughput.counts_flops
    out = {"status": status, "metrics": metrics, "best_ckpt": best,
           "tokens_per_sec": throughput.tokens_per_sec if throughput else None,
           "tokens": throughput.seen_tokens if throughput else None,
           "flops": throughput.seen_flops if counted else None}  # fmt: skip
    from attnlab.tasks.seq2seq import bleu_signature, reports_bleu

    if reports_bleu(metrics):
        out["bleu_signature"] = bleu_signature()
    if status != "completed":
        out["error"] = getattr(trainer, "attnlab_error", None)
        out["stopped_at_step"] = trainer.global_step
    return out


def _split(argv: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun?, has other Hydra flags?)."""
    multirun = any(a in ("-m", "--multirun") for a in argv)
    flags = any(a.split("=")[0] in HYDRA_FLAGS_WITHOUT_CHECK for a in argv)
    overrides = [a for a in argv if not a.startswith("-")]
    return overrides, multirun, flags


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the process exit code."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    from attnlab.cli.compose import quote_non_ascii, resume_overrides, validate_overrides
    from attnlab.cli.resume_sweep import plan_sweep
    from attnlab.cli.rundir import check_run_dirs, explicit_dir, release_all
    from attnlab.cli.sweep import SweepStatus

    quiet_environment()
    register_resolvers()
    argv = quote_non_ascii(list(sys.argv[1:] if argv is None else argv))
    if "--options" in argv:
        from attnlab.cli.listing import print_options

        print_options()
        return 0
    with user_errors():
        argv = torchrun_run_dir(argv)
    overrides, multirun, flags = _split(argv)
    if "--help" in argv or "-h" in argv:
        from attnlab.cli.help import help_text

        with user_errors():
            print(help_text(config_dir(), overrides))
        return 0
    log_dir = None  # where the run's files go, named when a full disk's error names no file
    with user_errors():
        conf = str(config_dir())
        if not flags:
            cfg = validate_overrides(overrides, multirun)
            if not multirun:
                overrides = resume_overrides(cfg, overrides)
                argv = [a for a in argv if a.startswith("-")] + overrides
            resuming = cfg.get("ckpt_path") not in (None, "") or bool(cfg.get("resume"))
            if cfg.get("resume"):
                plan_sweep(overrides, multirun)
            key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
            log_dir = explicit_dir(overrides, key) or Path(str(cfg.paths.log_dir)).absolute()
            check_run_dirs(overrides, multirun, resuming, bool(cfg.get("overwrite")),
                           str(cfg.paths.log_dir))  # fmt: skip
    SweepStatus.failed = []
    app = hydra.main(config_path=conf, config_name="config", version_base="1.3")(run_job)
    saved_argv = sys.argv
    sys.argv = [saved_argv[0] if saved_argv else "attnlab-train", *argv]
    try:
        with hydra_errors(log_dir):
            app()
    finally:
        sys.argv = saved_argv
        GlobalHydra.instance().clear()  # so main() can be called again in one process
        release_all()
    return 1 if SweepStatus.failed else 0


if __name__ == "__main__":
    # Run the importable attnlab.train, not this __main__ copy, so that run_job pickles by
    # reference into joblib/submitit workers (which then import the module and its resolvers).
    from attnlab.train import main as entry_point

    sys.exit(entry_point())
