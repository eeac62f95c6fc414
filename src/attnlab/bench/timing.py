"""Interleaved timing: contenders take turns (A B A B …), medians are compared.

On a shared or thermally throttled machine, speed drifts over seconds; timing
A for a minute and then B for a minute would put that drift into the ratio.
Taking turns exposes both contenders to the same conditions, and the median
over rounds ignores the rounds that another process disturbed.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

Step = Callable[[], object]


@dataclass
class Timing:
    """Seconds per call of each contender, one entry per round."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def ratio(self, numerator: str, denominator: str) -> float:
        """median(numerator) / median(denominator)."""
        return self.median(numerator) / self.median(denominator)

    def summary(self) -> dict[str, dict[str, float]]:
        return {
            name: {
                "median_s": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "rounds": len(times),
            }
            for name, times in self.samples.items()
        }


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a timer measures work done rather than work queued."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS: dict[str, Callable[[], float]] = {
    "wall": time.perf_counter,
    # CPU seconds of this process: on a shared machine, time other processes take from
    # a single-threaded run does not count (with several threads, spinning does)
    "cpu": time.process_time,
}


def interleave(
    contenders: dict[str, Step],
    rounds: int,
    calls_per_round: int = 1,
    warmup: int = 1,
    device: torch.device | None = None,
    clock: str = "wall",
) -> Timing:
    """Time every contender ``rounds`` times, taking turns; each turn makes ``calls_per_round``
    calls and records seconds per call. ``warmup`` untimed calls first (allocation, caches)."""
    device, now = device or torch.device("cpu"), CLOCKS[clock]
    for step in contenders.values():
        for _ in range(warmup):
            step()
    synchronize(device)
    timing = Timing({name: [] for name in contenders})
    names = list(contenders)
    for i in range(rounds):
        # A B, B A, A B, …: neither contender always runs right after the other
        for name in names if i % 2 == 0 else reversed(names):
            step = contenders[name]
            start = now()
            for _ in range(calls_per_round):
                step()
            synchronize(device)
            timing.samples[name].append((now() - start) / calls_per_round)
    return timing


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Hide what native code writes to file descriptor 2 (the profiler logs every start and
    stop there), so the benchmark's table stays readable; Python's own stderr is untouched."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# the matrix products of a training step (linear layers, attention scores, their gradients)
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
# the fused attention kernels and their backward (on a CPU: the flash kernel for the CPU)
ATTENTION_OP_PREFIX = "aten::_scaled_dot_product"


def kernel_shares(step: Step, calls: int = 2) -> dict[str, float]:
    """Fractions of ``step``'s CPU operator time in matrix products (``matmul``) and in the
    fused attention kernels (``attention``), from torch.profiler.

    Self CPU time of those operators over the self CPU time of every operator, over
    ``calls`` calls after one untimed call. The profiler's own overhead is per operator and
    small next to the products it is used on (d_model ≥ 128); the shares are estimates.
    """
    from torch.profiler import ProfilerActivity, profile

    step()
    with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            step()
    total = matmul = attention = 0.0
    for event in prof.key_averages():
        total += event.self_cpu_time_total
        if event.key in MATMUL_OPS:
            matmul += event.self_cpu_time_total
        elif event.key.startswith(ATTENTION_OP_PREFIX):
            attention += event.self_cpu_time_total
    if not total:
        return {"matmul": 0.0, "attention": 0.0}
    return {"matmul": matmul / total, "attention": attention / total}


def matmul_share(step: Step, calls: int = 2) -> float:
    """Fraction of ``step``'s CPU operator time spent in matrix products (torch.profiler)."""
    return kernel_shares(step, calls)["matmul"]
