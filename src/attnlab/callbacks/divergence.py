"""Stop a run whose training loss diverges, keeping the last good weights.

A non-finite training loss (or, when ``max_ratio`` is set, a loss above
``max_ratio`` × its running minimum once ``warmup_steps`` have passed) ends the
run with status ``diverged`` in summary.json.

Why ``on_before_optimizer_step``: Lightning 2.6 runs, per optimizer step,
training_step → ``on_before_backward(loss)`` → backward → ``on_before_optimizer_step``
→ gradient clipping → ``optimizer.step()`` → ``on_train_batch_end``. Deciding
before the step lets the guard drop the bad gradients (``grad = None``: torch
optimizers skip such parameters, moments and weight decay included), so the
weights stay those of the last good step. ``trainer.should_stop`` then makes
Lightning run validation once more and stop; the checkpoint it saves (last.ckpt)
holds those finite weights.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from torch import Tensor

from attnlab.callbacks.outcome import Outcome


class DivergenceGuard(L.Callback):
    """Mark the run ``diverged`` and stop at the first non-finite (or exploding) loss.

    Reports ``diverged`` and why (e.g. ``"non-finite loss at step 3"``, the 0-based
    optimizer step) to the run's ``Outcome``, which the run's record writes into
    summary.json; that step's update is skipped.
    """

    run_inputs = ("outcome",)  # what the run hands it (attnlab.cli.components)

    def __init__(self, max_ratio: float | None = None, warmup_steps: int = 100,
                 outcome: Outcome | None = None) -> None:  # fmt: skip
        self.outcome = outcome if outcome is not None else Outcome()
        if max_ratio is not None and max_ratio <= 1:
            raise ValueError(f"max_ratio={max_ratio} must be > 1 (or null: finiteness only)")
        self.max_ratio = max_ratio
        self.warmup_steps = int(warmup_steps)
        self.running_min = math.inf
        self.reason: str | None = None
        self._losses: list[Tensor] = []  # this optimizer step's (micro-batch) losses

    def check(self, loss: float, step: int) -> str | None:
        """Why ``loss`` at optimizer step ``step`` counts as divergence, or None."""
        if not math.isfinite(loss):
            return f"non-finite loss at step {step} ({loss})"
        if (
            self.max_ratio is not None
            and step >= self.warmup_steps
            and loss > self.max_ratio * self.running_min > 0
        ):
            return (
                f"loss exploded at step {step}: {loss:.4g} > {self.max_ratio:g} × its running "
                f"minimum {self.running_min:.4g}"
            )
        self.running_min = min(self.running_min, loss)
        return None

    def on_before_backward(self, trainer: L.Trainer, pl_module: Any, loss: Tensor) -> None:
        # with gradient accumulation Lightning hands over loss / accumulate_grad_batches
        self._losses.append(loss.detach().float())

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: Any, optimizer: Any) -> None:
        losses, self._losses = self._losses, []
        if not losses:
            return
        step = trainer.global_step
        reason = self.reason or self.check(float(torch.stack(losses).sum()), step)
        if trainer.world_size > 1:  # one rank's NaN must stop every rank at the same step
            if trainer.strategy.reduce_boolean_decision(reason is not None, all=False):
                reason = reason or f"non-finite loss at step {step} on another rank"
        if reason is None:
            return
        for param in pl_module.parameters():
            param.grad = None  # the optimizer skips this update; weights stay the last good ones
        if self.reason is None:
            self.reason = reason
            self.outcome.stop(
                "diverged", f"{reason}; lower optim.lr, raise optim.warmup_steps or clip gradients"
            )
        trainer.should_stop = True

    def state_dict(self) -> dict[str, Any]:
        return {"running_min": self.running_min}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.running_min = float(state_dict.get("running_min", math.inf))
