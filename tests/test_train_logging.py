"""``train/loss`` is logged only on the steps Lightning writes, with the same logged series."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor

from attnlab.data.synthetic import SyntheticDataModule
from attnlab.tasks import Seq2SeqTask

TINY = dict(d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.0)


class LogsEveryStep(Seq2SeqTask):
    """The task as it would be if it called ``self.log`` on every training step."""

    def log_train_loss(self, loss: Tensor, batch_size: int) -> None:
        self.log("train/loss", loss, prog_bar=True, batch_size=batch_size)


def logged_losses(task_class: type, run_dir: Path, accumulate: int) -> tuple[list, L.Trainer]:
    L.seed_everything(0, verbose=False)
    data = SyntheticDataModule(kind="reverse", max_len=6, train_size=256, batch_size=8)
    task = task_class(model={"name": "encoder_decoder", "vocab_size": data.vocab_size, **TINY})
    trainer = L.Trainer(
        max_steps=7, accelerator="cpu", devices=1, logger=CSVLogger(run_dir, name="", version=""),
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, log_every_n_steps=3, limit_val_batches=0,
        accumulate_grad_batches=accumulate,
    )  # fmt: skip
    trainer.fit(task, datamodule=data)
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [(r["step"], r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    return rows, trainer


@pytest.mark.parametrize("accumulate", [1, 2])
def test_train_loss_series_is_the_same_as_logging_every_step(tmp_path: Path, accumulate: int):
    ours, trainer = logged_losses(Seq2SeqTask, tmp_path / "ours", accumulate)
    every, _ = logged_losses(LogsEveryStep, tmp_path / "every", accumulate)
    assert ours == every
    assert [step for step, _ in ours] == ["2", "5"]  # steps 3 and 6 of 7, 0-based
    assert "train/loss" in trainer.progress_bar_metrics


def test_parameter_groups_at_one_rate_are_logged_as_one_learning_rate_series(tmp_path: Path):
    from attnlab.callbacks.lr_monitor import LearningRateMonitor

    data = SyntheticDataModule(kind="reverse", max_len=6, train_size=64, batch_size=8)
    task = Seq2SeqTask(model={"name": "encoder_decoder", "vocab_size": data.vocab_size, **TINY})
    trainer = L.Trainer(
        max_steps=2, accelerator="cpu", devices=1, logger=CSVLogger(tmp_path, name="", version=""),
        callbacks=[LearningRateMonitor(logging_interval="step")], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        log_every_n_steps=1, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(task, datamodule=data)
    assert len(task.optimizers().param_groups) == 2  # with and without weight decay
    with open(tmp_path / "metrics.csv", newline="") as f:
        columns = csv.DictReader(f).fieldnames or []
    assert [c for c in columns if c.startswith("lr-")] == ["lr-AdamW"]
    assert [k for k in trainer.callback_metrics if k.startswith("lr-")] == ["lr-AdamW"]
