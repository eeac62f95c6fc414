"""attnlab.compat's shims against the installed Lightning and Hydra.

Each shim reaches one private thing of a release named in ``CHECKED_AGAINST``; a test
here fails, naming that shim, when the installed release no longer behaves as the shim
expects. To lift the caps in pyproject.toml (``lightning<2.7``, ``hydra-core<1.4``):
install the new release, run this file, mend what fails in ``src/attnlab/compat.py`` and
name the new release in ``CHECKED_AGAINST``.
"""

from __future__ import annotations

import csv
import re
import signal
from importlib.metadata import version
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import Logger
from packaging.requirements import Requirement
from packaging.version import Version
from torch.utils.data import DataLoader, TensorDataset

from attnlab.compat import (
    CHECKED_AGAINST,
    AdjustableLearningRateMonitor,
    ContinuingExperimentWriter,
    handlers_lightning_restores,
    logs_this_step,
    started_wandb_run,
)

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def series(release: str) -> tuple[int, int]:
    """A release's (major, minor): what the caps in pyproject.toml bound."""
    parsed = Version(release)
    return parsed.major, parsed.minor


@pytest.mark.parametrize("package", sorted(CHECKED_AGAINST))
def test_the_shims_were_checked_against_the_installed_release_series(package: str) -> None:
    installed = version(package)
    assert series(installed) == series(CHECKED_AGAINST[package]), (
        f"{package} {installed} is installed; attnlab.compat was checked against "
        f"{CHECKED_AGAINST[package]}: run tests/test_compat.py, mend the shims it names and "
        "update CHECKED_AGAINST"
    )  # fmt: skip


@pytest.mark.parametrize("package", sorted(CHECKED_AGAINST))
def test_pyproject_admits_the_checked_release(package: str) -> None:
    quoted = re.findall(r'^\s*"([^"]+)"', PYPROJECT.read_text(), flags=re.M)  # (no tomllib: 3.10)
    requirement = next(Requirement(q) for q in quoted if re.match(rf"{package}\s*[<>=]", q))
    assert requirement.specifier.contains(CHECKED_AGAINST[package]), str(requirement)


class Linear(L.LightningModule):
    """One weight, six batches of one example; ``seen``: what each training step saw."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.seen: list[tuple[int, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append((self.trainer.global_step, logs_this_step(self.trainer)))
        self.log("step_seen", float(self.trainer.global_step))
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.1})
        return optimizer

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(6, 2)), batch_size=1)


class Recording(Logger):
    """A logger that keeps every ``log_metrics`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append(dict(metrics))


def fit(tmp_path: Path, callbacks: list[L.Callback], steps: int = 6) -> tuple[Linear, Recording]:
    module, logger = Linear(), Recording()
    trainer = L.Trainer(max_steps=steps, log_every_n_steps=2, logger=logger, callbacks=callbacks,
                        default_root_dir=tmp_path, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module)
    return module, logger


def test_logs_this_step_is_true_exactly_on_the_steps_whose_values_reach_the_loggers(
    tmp_path: Path,
) -> None:
    module, logger = fit(tmp_path, [])
    reached = {int(m["step_seen"]) for m in logger.logged if "step_seen" in m}
    assert {step for step, logs in module.seen if logs} == reached == {1, 3, 5}


def test_adjust_changes_what_the_learning_rate_monitor_logs(tmp_path: Path) -> None:
    class Renamed(AdjustableLearningRateMonitor):
        def adjust(self, trainer: Any, stats: dict[str, float]) -> dict[str, float]:
            return {f"{key}/adjusted": value for key, value in stats.items()}

    _, logger = fit(tmp_path, [Renamed(logging_interval="step")], steps=2)
    keys = {key for metrics in logger.logged for key in metrics if key.startswith("lr-")}
    assert keys == {"lr-SGD/pg1/adjusted", "lr-SGD/pg2/adjusted"}


def test_continuing_experiment_writer_keeps_metrics_csv_and_appends(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("step,val/loss\n3,1.5\n")
    writer = ContinuingExperimentWriter(str(tmp_path))
    assert writer.metrics_keys == ["step", "val/loss"]
    writer.log_metrics({"val/loss": 1.25}, step=5)
    writer.save()
    with metrics.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows == [{"step": "3", "val/loss": "1.5"}, {"step": "5", "val/loss": "1.25"}]


def test_handlers_lightning_restores_are_put_back_when_a_fit_ends(tmp_path: Path) -> None:
    def before(signum: int, frame: Any) -> None:
        pass

    def replacement(signum: int, frame: Any) -> None:
        pass

    class Redirect(L.Callback):
        def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
            restores = handlers_lightning_restores(trainer)
            assert restores is not None and signal.SIGTERM in restores
            restores[signal.SIGTERM] = replacement

    saved = signal.signal(signal.SIGTERM, before)
    try:
        fit(tmp_path, [Redirect()], steps=1)
        assert signal.getsignal(signal.SIGTERM) is replacement
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_started_wandb_run_is_none_until_the_logger_starts_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "disabled")
    logger = WandbLogger(save_dir=str(tmp_path))
    assert started_wandb_run(logger) is None
    run = logger.experiment
    assert started_wandb_run(logger) is run
    run.finish()
