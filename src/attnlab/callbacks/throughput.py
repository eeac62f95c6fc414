"""Training throughput: tokens per second (and MFU where a device peak is known)."""

from __future__ import annotations

import time
from typing import Any

import lightning as L


class TokenThroughput(L.Callback):
    """Logs ``perf/tokens_per_sec`` over each logging window; keeps the run's average.

    The first ``warmup_steps`` steps (allocation, compilation) are not counted.
    """

    def __init__(self, warmup_steps: int = 3) -> None:
        self.warmup_steps = warmup_steps
        self.tokens_per_sec: float | None = None
        self._tokens = 0
        self._seconds = 0.0
        self._window_tokens = 0
        self._window_seconds = 0.0
        self._start: float | None = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._start is None:
            return
        elapsed = time.perf_counter() - self._start
        if trainer.global_step <= self.warmup_steps:
            return
        tokens = pl_module.tokens_in_batch(batch) * trainer.world_size
        self._tokens += tokens
        self._seconds += elapsed
        self._window_tokens += tokens
        self._window_seconds += elapsed
        if trainer.global_step % max(1, trainer.log_every_n_steps) == 0 and self._window_seconds:
            pl_module.log("perf/tokens_per_sec", self._window_tokens / self._window_seconds)
            self._window_tokens, self._window_seconds = 0, 0.0
        self.tokens_per_sec = self._tokens / self._seconds if self._seconds else None
