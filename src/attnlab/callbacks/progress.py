"""Progress the way a step-budgeted run is read: against ``trainer.max_steps`` when that is the
limit, and a last validation at the final step, so the weights that end a run are scored.

* :class:`StepProgressBar` — Lightning's rich bar; with a step limit its total
  is ``max_steps`` and it counts optimizer steps across epochs, instead of
  restarting at every epoch.
* :class:`ValidateAtMaxSteps` — a run that stops on ``max_steps`` mid-epoch
  would end with no validation since its last epoch (or none at all: no best
  checkpoint to test). Asking the loop to stop at that step makes Lightning
  validate there (``Trainer.should_stop`` triggers a last validation).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


def step_limited(trainer: L.Trainer) -> bool:
    """Whether ``max_steps`` ends the run before ``max_epochs`` would."""
    if trainer.max_steps is None or trainer.max_steps < 0:
        return False
    if trainer.max_epochs in (None, -1):
        return True
    per_epoch = trainer.num_training_batches / max(trainer.accumulate_grad_batches, 1)
    return per_epoch == float("inf") or trainer.max_steps < trainer.max_epochs * per_epoch


class StepProgressBar(RichProgressBar):
    """RichProgressBar counting optimizer steps against ``max_steps`` when that is the limit."""

    @property
    def total_train_batches(self) -> int | float:
        trainer = self.trainer
        return trainer.max_steps if step_limited(trainer) else super().total_train_batches

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._show_steps(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # fmt: skip
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._show_steps(trainer)

    def _show_steps(self, trainer: L.Trainer) -> None:
        """With a step limit, the training bar shows optimizer steps: its count and its label."""
        bar = self.train_progress_bar_id
        if self.progress is None or not self.is_enabled or bar is None or not step_limited(trainer):
            return
        self.progress.update(bar, completed=trainer.global_step,
                             description=f"Steps (epoch {trainer.current_epoch})")  # fmt: skip
        self.refresh()


class ValidateAtMaxSteps(L.Callback):
    """Stop (and so validate) at the batch whose optimizer step reaches ``max_steps``."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if step_limited(trainer) and trainer.global_step >= trainer.max_steps:
            trainer.should_stop = True
