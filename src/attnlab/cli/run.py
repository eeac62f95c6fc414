"""One training run: build, fit and test it, and keep its record.

:class:`RunRecord` owns what a run leaves behind and tells: its status and error (the
callbacks that end a run early report to its :class:`~attnlab.callbacks.outcome.Outcome`),
``summary.json``, the lines it prints and the exit code. :func:`train` builds the data,
task, callbacks, loggers and trainer from the composed config and fits and tests. Whether
an error is the user's to fix is decided by its type (:func:`as_user_error`). Nothing
heavy is imported until a run starts, so ``attnlab-train --help`` stays fast.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

from attnlab.callbacks.outcome import Outcome
from attnlab.cli.common import fail
from attnlab.errors import ConfigError, LightningRefusal, UserError
from attnlab.model_config import ModelConfig

# exit codes of a run that did not complete (a sweep with such a job exits 1)
EXIT_CODES = {"failed": 1, "diverged": 1, "interrupted": 130, "preempted": 143}


def lightning_refusal(exc: BaseException) -> LightningRefusal | None:
    """``exc`` as a setting Lightning refused: its MisconfigurationException, the type it
    raises for a setting it cannot use (a Trainer it cannot build is refused where it is
    built, :func:`attnlab.cli.pipeline.build`; a fit, by :func:`fit_refusal`)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    if isinstance(exc, MisconfigurationException):
        reason = " ".join(str(exc).split())
        return LightningRefusal(
            f"Lightning refused a setting: {reason}; fix that override (trainer.*, logger.*)"
        )
    return None


def fit_refusal(trainer: Any) -> LightningRefusal | None:
    """The setting a fit refused with a ValueError, read from the trainer: an integer
    ``trainer.val_check_interval`` past an epoch's training batches (Lightning's fit loop
    checks it once it knows the batches). None: the settings do not explain the error."""
    interval, batches = trainer.val_check_interval, trainer.num_training_batches
    if (isinstance(interval, int) and trainer.check_val_every_n_epoch is not None
            and trainer.limit_val_batches > 0 and interval > batches):  # fmt: skip
        return LightningRefusal(
            f"trainer.val_check_interval={interval} is more than the {batches} training "
            "batches of an epoch; lower it, or set trainer.check_val_every_n_epoch=null to "
            "count batches across epochs"
        )
    return None


def as_user_error(exc: BaseException, run_dir: Path | None = None) -> UserError | None:
    """``exc`` as a UserError when the user can fix it, else None (a crash): attnlab's own
    UserErrors, a write that failed for want of space or permission, a setting Lightning
    refused."""
    from attnlab.cli.rundir import disk_error

    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, OSError):
        message = disk_error(exc, run_dir)
        return ConfigError(message) if message else None
    return lightning_refusal(exc)



def torch_threads() -> int | None:
    """The run's intra-op threads (recorded in summary.json), None before torch is loaded."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


class RunRecord:
    """What one run (a Hydra job) records and says: status, summary.json, lines, exit code."""

    def __init__(self, cfg: Any, hydra_cfg: Any, checked: ModelConfig | None = None) -> None:
        """``checked``: the ModelConfig the pre-flight check of this config returned (a
        single run); a sweep's job checks its own composition when it starts."""
        from hydra.types import RunMode

        from attnlab.callbacks.summary import git_sha

        self.hydra_cfg = hydra_cfg
        self.run_dir = Path(hydra_cfg.runtime.output_dir)
        self.multirun = hydra_cfg.mode == RunMode.MULTIRUN
        self.overrides = list(hydra_cfg.overrides.task)
        self.started = time.perf_counter()
        self.git_sha = git_sha()  # the code that runs, not the checkout when it ends
        self.result: dict[str, Any] = {"status": "failed", "error": None, "metrics": {}}
        self.outcome = Outcome()  # the callbacks that end a run early report here
        self.quiet = False  # side-by-side sweep jobs: one line each
        if checked is not None:
            use_model(cfg, checked)
        self.config = plain(cfg)

    @property
    def job(self) -> Any:
        """The job's number in its sweep (a single run has none)."""
        return self.hydra_cfg.job.num

    # the lines it prints
    def say_job(self, what: str) -> None:
        # side-by-side jobs share one pipe: what this process has buffered goes first, then the
        # line goes in one write, which a pipe keeps whole (up to PIPE_BUF bytes), so another
        # job's output cannot cut it; print() writes the text and its newline separately
        sys.stdout.flush()
        sys.stdout.write(f"job {self.job} [{' '.join(self.overrides)}] {what}\n")
        sys.stdout.flush()

    def say_job_error(self, text: str) -> None:
        print(f"error: job {self.job}: {text}", file=sys.stderr)

    def say_start(self) -> None:
        from attnlab.cli.console import print_config_tree
        from attnlab.cli.rundir import is_primary_process

        if self.quiet:
            self.say_job(f"started in {self.run_dir}")
        elif not self.multirun and is_primary_process():
            print_config_tree(self.config)
            print(f"run directory: {self.run_dir}", flush=True)

    def say_end(self) -> None:
        from attnlab.cli.wandb_setup import sync_hint

        result = self.result
        if self.quiet:
            shown = " ".join(f"{k}={v:.4g}" for k, v in sorted(result["metrics"].items())
                             if k.startswith("val/"))  # fmt: skip
            self.say_job(f"{result['status']} {shown}")
        if not self.multirun:
            shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(result["metrics"].items())
                              if "/" in k and not k.startswith("train/"))  # fmt: skip
            best = result.get("best_ckpt") or self.run_dir / "checkpoints" / "last.ckpt"
            print(f"run directory: {self.run_dir}")
            print(f"checkpoint:    {best}")
            print(f"summary:       {self.run_dir / 'summary.json'}  [{result['status']}] {shown}")
            hint = sync_hint(self.run_dir)
            if hint:
                print(f"W&B (offline): {hint}")

    # the file it leaves
    def write_summary(self) -> str | None:
        """Write summary.json (rank 0); the one-line error when a full or read-only disk
        prevents it (a caller that is already reporting another error keeps that one)."""
        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        from attnlab.callbacks.summary import write_summary
        from attnlab.cli.rundir import disk_error

        if rank_zero_only.rank != 0:
            return None
        result = self.result
        try:
            write_summary(
                self.run_dir, status=result["status"], error=result["error"],
                overrides=self.overrides, config=self.config, metrics=result["metrics"],
                task=result.get("task"), params=result.get("params"),
                active_params=result.get("active_params"),
                tokens_per_sec=result.get("tokens_per_sec"), tokens=result.get("tokens"),
                flops=result.get("flops"), startup_s=result.get("startup_s"),
                wall_s=round(time.perf_counter() - self.started, 3), git_sha=self.git_sha,
                torch_threads=torch_threads(),
                **{k: result[k] for k in ("stopped_at_step", "bleu_signature") if k in result},
            )  # fmt: skip
        except OSError as exc:  # a full or read-only disk: say so, keep the original error
            print(f"warning: summary.json not written: {exc}", file=sys.stderr)
            return disk_error(exc, self.run_dir) or f"summary.json not written: {exc}"
        return None

    # the run
    def run(self, cfg: Any, checked: ModelConfig | None = None) -> float | None:
        """Train (or skip or continue a sweep's job), record it, and end as its status says:
        the value a search sweeper optimises, or SystemExit with the run's exit code.
        ``checked``: the ModelConfig a pre-flight check of this config returned."""
        import os

        from omegaconf import open_dict

        from attnlab.cli.resume_sweep import decide, recorded_value

        metric = str(cfg.get("optimized_metric", "val/loss"))
        # a job that SLURM requeued (submitit, after a preemption or its time limit) continues
        requeued = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0
        if self.multirun and (cfg.get("resume") or requeued):
            action = decide(self.run_dir, bool(cfg.get("retry_failed")))
            if action == "skip":
                self.say_job(f"kept from earlier ({self.run_dir})")
                return recorded_value(self.run_dir, metric)
            if action == "resume":
                self.say_job("continues from its last.ckpt")
                with open_dict(cfg):
                    cfg.ckpt_path = "last"  # this job's own checkpoints/last.ckpt
        # jobs side by side in one terminal (joblib): one line each, not bars overwriting each other
        launcher = str((self.hydra_cfg.get("launcher") or {}).get("_target_", ""))
        self.quiet = self.multirun and "joblib" in launcher.lower()
        if self.quiet:
            with open_dict(cfg):
                cfg.trainer.enable_progress_bar = False
        self.say_start()
        self._train(cfg, checked)
        unwritten = self.write_summary()
        if unwritten is not None:  # the run's record could not be written: say so, exit 2
            if not self.multirun:
                fail(unwritten)
            self.say_job_error(unwritten)
        self.say_end()
        return self.exit_value(metric)

    def _train(self, cfg: Any, checked: ModelConfig | None) -> None:
        """``train``, with every way it can end recorded: a stop, a user's error, a crash."""
        result = self.result
        from attnlab.callbacks.stop import Stopped

        try:
            if checked is None:  # a sweep's job: its own composition, a key only its sweep
                from attnlab.cli.pipeline import check_config  # reads may be dropped

                checked = check_config(cfg, strict=not self.multirun)
                use_model(cfg, checked)
                self.config = plain(cfg)
            result.update(train(cfg, self.run_dir, not self.quiet, self.outcome, checked))
        except Stopped as stop:  # at a step's end, or where there was no step to finish
            result.update(status=stop.status, error=f"{stop} with no step left to finish "
                          "(set-up, test, or a second signal); continue with ckpt_path=last")
            self.write_summary()
            if stop.handover is not None:  # the cluster's handler requeues the job and exits
                stop.handover(stop.signum, None)
            raise SystemExit(EXIT_CODES[stop.status]) from None
        except (KeyboardInterrupt, SystemExit) as exc:
            if isinstance(exc, SystemExit) and exc.code == 2:
                raise  # a one-line error already printed
            if self.outcome.handed_over:  # the cluster's handler requeued the job and exits
                result.update(status="preempted", error="preempted; requeued from last.ckpt")
                self.write_summary()
                raise
            result.update(status="interrupted", error="interrupted (a second Ctrl-C) mid-step")
            self.write_summary()
            raise SystemExit(EXIT_CODES["interrupted"]) from None
        except Exception as exc:
            user = as_user_error(exc, self.run_dir)
            if user is not None:  # the user's to fix: one line (a sweep goes on)
                result["error"] = str(user)
                if not self.multirun:
                    self.write_summary()
                    fail(str(user))
                self.say_job_error(" ".join(str(user).split()))
            else:  # a crash (OOM, bug) is recorded, not hidden
                result["error"] = f"{type(exc).__name__}: {exc}"
                if not self.multirun:
                    self.write_summary()
                    raise
                traceback.print_exc()

    def exit_value(self, metric: str) -> float | None:
        """SystemExit for a run that did not complete (a stop ends a whole sweep); else the
        optimised metric for search sweepers (Optuna), None for a failed trial."""
        status = self.result["status"]
        if status in ("interrupted", "preempted"):  # the whole command stops, sweeps too
            print(f"{status}: {self.result.get('error')}; {self.run_dir}", file=sys.stderr)
            raise SystemExit(EXIT_CODES[status])
        if not self.multirun and status != "completed":
            raise SystemExit(EXIT_CODES[status])
        value = self.result["metrics"].get(metric)
        if status != "completed" or value is None or value != value:
            return None
        return float(value)


def parameters(model: Any) -> str:
    """The banner's count: all parameters, and those one token uses when fewer (an MoE)."""
    total, active = model.num_params(), model.num_active_params()
    return f"{total:,}" if active == total else f"{total:,} ({active:,} active per token)"


def use_model(cfg: Any, model: ModelConfig) -> None:
    """Put the checked model's keys in place of the composed ``model`` node, in which a key
    not set is ``???``: what the run prints, logs (W&B, MLflow) and records in summary.json
    are the keys its model reads, with the values it uses."""
    from omegaconf import OmegaConf, open_dict

    from attnlab.components.architectures import FROM_DATA

    values = {k: v for k, v in model.to_dict().items() if k not in FROM_DATA}
    with open_dict(cfg):
        cfg.model = OmegaConf.create(values)


def plain(cfg: Any) -> dict[str, Any]:
    """The config as plain containers, resolved where it can be (an unresolvable value is
    reported by the build)."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001
        return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def train(
    cfg: Any,
    run_dir: Path,
    banner: bool = False,
    outcome: Outcome | None = None,
    checked: ModelConfig | None = None,
) -> dict[str, Any]:
    """Build everything from the config, fit, test; return status and metrics. ``outcome``:
    where the callbacks that end a run early report (the run record's); ``checked``: the
    ModelConfig a check of this same config returned (else the config is checked here)."""
    import lightning as L

    from attnlab.callbacks.stop import Stopped, stop_at_once
    from attnlab.cli import pipeline
    from attnlab.cli.mlflow_setup import finish_mlflow
    from attnlab.cli.wandb_setup import ModelSizeInConfig, finish_wandb, uses_wandb

    model_cfg = checked if checked is not None else pipeline.check_config(cfg)
    with stop_at_once():  # set-up (tokenizer training, caching, building): a signal ends it
        L.seed_everything(int(cfg.seed), workers=True, verbose=False)
        datamodule = pipeline.build_data(cfg)
        task = pipeline.build_task(cfg, datamodule, model_cfg)
        resume_from = pipeline.checkpoint_to_resume(cfg, run_dir)
        resume_step = None  # None: a fresh metrics.csv; a step: keep the rows up to it
        if resume_from:
            step = pipeline.check_resumable(task, resume_from)
            resume_step = sys.maxsize if step is None else step
        outcome = outcome if outcome is not None else Outcome()
        callbacks = pipeline.build_callbacks(cfg, outcome)
        loggers = pipeline.build_loggers(cfg, run_dir, resume_step)
    if uses_wandb(loggers):
        callbacks.append(ModelSizeInConfig())
    out: dict[str, Any] = {"status": "failed"}
    try:
        with stop_at_once():
            trainer = pipeline.build_trainer(cfg, run_dir, callbacks, loggers)
            if banner and trainer.is_global_zero:
                print(f"parameters:    {parameters(task.model)}\n"
                      f"device:        {trainer.strategy.root_device} × {trainer.world_size} "
                      f"({trainer.precision} precision)", flush=True)  # fmt: skip
            if trainer.is_global_zero:
                datamodule.save_tokenizer(run_dir)
        out = _fit_and_test(cfg, trainer, task, datamodule, resume_from, outcome)
        out.update(task=datamodule.task, params=task.model.num_params(),
                   active_params=task.model.num_active_params())
        return out
    except Stopped as stop:
        out = {"status": stop.status}
        raise
    finally:
        finish_wandb(loggers, out["status"])
        finish_mlflow(loggers, out["status"])


def _fit_and_test(cfg: Any, trainer: Any, task: Any, datamodule: Any, resume_from: str | None,
                  outcome: Outcome) -> dict[str, Any]:  # fmt: skip
    from attnlab.callbacks.throughput import TokenThroughput
    from attnlab.cli import pipeline

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        try:
            trainer.fit(task, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
        except ValueError as exc:
            refusal = fit_refusal(trainer)
            if refusal is None:
                raise
            raise refusal from exc
        if resume_from:  # a fit with nothing left to do logs nothing: keep what was logged
            metrics.update(pipeline.last_logged(trainer))
        metrics.update(pipeline.scalar_metrics(trainer.callback_metrics))
    status = outcome.status or "completed"
    best = pipeline.best_checkpoint(trainer)
    if cfg.get("test", True) and status == "completed":
        from attnlab.callbacks.stop import stop_at_once

        with stop_at_once():  # no step to finish: a signal ends the test at once
            trainer.test(task, datamodule=datamodule, ckpt_path=best, weights_only=True)
        metrics.update(pipeline.scalar_metrics(trainer.callback_metrics))
    throughput = next((c for c in trainer.callbacks if isinstance(c, TokenThroughput)), None)
    counted = throughput is not None and throughput.counts_flops
    out = {"status": status, "metrics": metrics, "best_ckpt": best,
           "tokens_per_sec": throughput.tokens_per_sec if throughput else None,
           "tokens": throughput.seen_tokens if throughput else None,
           "startup_s": throughput.startup_s if throughput else None,
           "flops": throughput.seen_flops if counted else None}  # fmt: skip
    from attnlab.tasks.seq2seq import bleu_signature, reports_bleu

    if reports_bleu(metrics):
        out["bleu_signature"] = bleu_signature()
    if status != "completed":
        out["error"] = outcome.error
        out["stopped_at_step"] = trainer.global_step
    return out
