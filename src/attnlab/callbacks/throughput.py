"""Training throughput: tokens per second (and MFU where a device peak is known)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from attnlab.callbacks.mfu import peak_flops


def process_age() -> float | None:
    """Seconds since this process started (Linux: ``/proc``, to 1/100 s), or None where
    the system does not say."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        stat = Path("/proc/self/stat").read_text()
        started = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start, in clock ticks
        return uptime - started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class TokenThroughput(L.Callback):
    """Logs ``perf/tokens_per_sec`` over each logging window, and ``perf/mfu`` where the
    device's peak FLOP/s is known (GPUs in the table of :mod:`attnlab.callbacks.mfu`;
    none is claimed for CPUs); keeps the run's average tokens per second.

    Also logs ``perf/train_s``: the training time so far, global step × the mean
    measured step time (validation excluded), so curves can be read against time
    (for example the time a run takes to reach a BLEU).

    ``startup_s`` is the time from the process's start to its first training step
    (imports, composing and checking the config, building the model and data; None
    where the system does not report a process's start).

    The first ``warmup_steps`` steps (allocation, compilation) are not counted in the
    rates. ``perf/tokens`` and ``perf/flops`` count every step, warm-up included: the
    tokens seen and the training FLOPs spent so far (3 × the forward FLOPs of
    ``flops_in_batch``, Kaplan et al. 2020 §2.1), all devices together. They are kept in
    checkpoints, so a resumed run counts on, and are what ``attnlab-compare --x`` and
    ``--at`` put curves on (equal compute).
    """

    def __init__(self, warmup_steps: int = 3, peak_flops: float | None = None) -> None:
        """``peak_flops``: the device's peak FLOP/s, for a device the table does not know
        (a CPU whose peak you measured); None looks the GPU up by name."""
        self.warmup_steps = warmup_steps
        self.given_peak = peak_flops
        self.tokens_per_sec: float | None = None
        self._tokens = 0
        self._seconds = 0.0
        self._steps = 0
        self._window_tokens = 0
        self._window_seconds = 0.0
        self._start: float | None = None
        self._window_flops = 0.0
        self.peak: float | None = None
        self.seen_tokens = 0  # every step, warm-up included, all devices
        self.seen_flops = 0.0
        self.counts_flops = True  # False for an architecture without a FLOP count
        self.startup_s: float | None = None
        self._flops_shape: tuple | None = None  # the last batch's shapes and its FLOPs
        self._batch_flops = 0.0

    def _flops(self, pl_module: Any, batch: Any) -> float:
        """``flops_in_batch``, or 0 once the architecture turns out to have no ``flops``
        (an architecture added without one still trains; perf/flops and MFU are left out)."""
        if self.counts_flops:
            shape = tuple((k, tuple(v.shape)) for k, v in batch.items() if hasattr(v, "shape"))
            if shape != self._flops_shape:  # a batch's FLOPs depend only on its shapes
                try:
                    self._batch_flops = pl_module.flops_in_batch(batch)
                except NotImplementedError:
                    self.counts_flops = False
                    return 0.0
                self._flops_shape = shape
            return self._batch_flops
        return 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"seen_tokens": self.seen_tokens, "seen_flops": self.seen_flops}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seen_tokens = int(state_dict.get("seen_tokens", 0))
        self.seen_flops = float(state_dict.get("seen_flops", 0.0))

    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        device = pl_module.device
        self.peak = self.given_peak
        if self.peak is None and device.type == "cuda":
            self.peak = peak_flops(torch.cuda.get_device_name(device), str(trainer.precision))

    def on_train_batch_start(self, *args: Any) -> None:
        if self.startup_s is None:  # the first step this process takes
            self.startup_s = process_age()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # a whole step, data loading included: from the previous step's end to this one's
        now, previous, self._start = time.perf_counter(), self._start, time.perf_counter()
        tokens = pl_module.tokens_in_batch(batch) * trainer.world_size
        flops = self._flops(pl_module, batch) * trainer.world_size
        self.seen_tokens += tokens
        self.seen_flops += flops
        logging_step = trainer.global_step % max(1, trainer.log_every_n_steps) == 0
        if logging_step:
            pl_module.log("perf/tokens", float(self.seen_tokens))
            if self.counts_flops:
                pl_module.log("perf/flops", self.seen_flops)
        if previous is None or trainer.global_step <= self.warmup_steps:
            return
        elapsed = now - previous
        self._tokens += tokens
        self._seconds += elapsed
        self._steps += 1
        self._window_tokens += tokens
        self._window_seconds += elapsed
        self._window_flops += flops / trainer.world_size  # per device, for MFU
        if logging_step and self._window_seconds:
            pl_module.log("perf/tokens_per_sec", self._window_tokens / self._window_seconds)
            pl_module.log("perf/train_s", trainer.global_step * self._seconds / self._steps)
            if self.peak and self.counts_flops:  # per device: each rank's FLOPs over its own peak
                pl_module.log("perf/mfu", self._window_flops / self._window_seconds / self.peak)
            self._window_tokens, self._window_seconds, self._window_flops = 0, 0.0, 0.0

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._start = None  # the step that follows validation is not counted
        self.tokens_per_sec = self._tokens / self._seconds if self._seconds else None
