"""Stop a run whose training loss is no longer a finite number.

A diverged run (NaN or inf loss, e.g. Post-LN without warmup at a high learning
rate) is an outcome of the experiment, not a crash: training stops at once, and
summary.json records ``"status": "diverged"`` with the step, so a sweep goes on and
``attnlab-compare`` can count it.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L


class StopOnDivergence(L.Callback):
    """Sets ``trainer.should_stop`` when the training loss is NaN or infinite."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        value = float(loss)
        if math.isfinite(value):
            return
        trainer.attnlab_status = "diverged"  # type: ignore[attr-defined]
        trainer.attnlab_error = (  # type: ignore[attr-defined]
            f"train/loss became {value} at step {trainer.global_step}; "
            "lower optim.lr, raise optim.warmup_steps or keep trainer.gradient_clip_val"
        )
        trainer.should_stop = True
