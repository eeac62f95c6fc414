"""``attnlab-bench --only long_context``: one training step's time and peak memory against T.

Batch 1, d_model 256, 4 heads, 2 encoder layers (bidirectional, so every kind applies,
Linformer included), T = 512 … 8192. Contenders: full attention on the explicit path
(``attn_impl=math``: the T×T scores are materialised), full attention through SDPA,
and the efficient kinds: sliding_window (w = 256, query blocks of 256), bigbird
(blocks of 64, 2 random), linformer (k = 256) and linear.

Every point runs in a fresh subprocess, so peak memory is that point's alone: on a
CPU the peak resident set (``ru_maxrss``), on CUDA the allocator's peak, each reported
as what a step at T adds above the peak of a step at T = 64 (weights, gradients and
libraries included there), so the figure is the memory that grows with T. Two steps
run at T; the second is timed. The log-log slope of memory against T is fitted
over the points (≈ 2 for a T×T matrix, ≈ 1 for memory linear in T).
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time
from typing import Any

LENGTHS = (512, 1024, 2048, 4096, 8192)
QUICK_LENGTHS = (512, 1024, 2048)
CONTENDERS: dict[str, dict[str, Any]] = {
    "full (math)": {"attention": "full", "attn_impl": "math"},
    "full (sdpa)": {"attention": "full", "attn_impl": "sdpa"},
    "sliding_window w=256": {"attention": "sliding_window", "window": 256, "attn_block": 256},
    "bigbird": {"attention": "bigbird", "attn_block": 64, "n_random": 2},
    "linformer k=256": {"attention": "linformer", "linformer_k": 256},
    "linear": {"attention": "linear"},
}
EFFICIENT = ("sliding_window w=256", "linformer k=256", "linear")  # the targets' kinds
REFERENCE = "full (math)"


def training_step(model: Any, tokens: Any, device: str) -> float:
    """Seconds of one forward + backward pass of the token-level cross-entropy."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    logits = model(tokens)
    vocab = logits.size(-1)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab).float(), tokens.view(-1))
    loss.backward()
    model.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def peak_bytes(device: str) -> int:
    import torch

    if device == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


BENCH_SHAPE: dict[str, Any] = dict(
    name="encoder_only", vocab_size=256, d_model=256, n_heads=4, n_layers=2, dropout=0.0,
    pos="rope", tie_embeddings=True,
)  # fmt: skip


def measure_point(
    name: str, length: int, device: str, shape: dict[str, Any] | None = None, batch: int = 1
) -> dict[str, float]:
    """One point, in this process: seconds of a training step at ``length`` and the peak
    memory it adds. ``shape``: model settings in place of ``BENCH_SHAPE`` (a study's own);
    ``name``: a contender of ``CONTENDERS`` or, with ``shape``, a label only.

    The model first takes a step at T = 64, which allocates its weights and gradients
    and loads every kernel library; the peak after it is the floor, and ``peak_bytes`` is
    how far the step at ``length`` (timed on its second run) raises the peak above it:
    the memory that depends on the sequence length.
    """
    import torch

    from attnlab.models import ModelConfig, build_model

    torch.manual_seed(0)
    settings = {**BENCH_SHAPE, **(CONTENDERS[name] if shape is None else shape)}
    settings["max_len"] = max(length, 64)
    model = build_model(ModelConfig.from_dict(settings), "lm").to(device)
    vocab = settings["vocab_size"]
    training_step(model, torch.randint(6, vocab, (batch, 64), device=device), device)
    floor = peak_bytes(device)
    tokens = torch.randint(6, vocab, (batch, length), device=device)
    training_step(model, tokens, device)
    seconds = training_step(model, tokens, device)
    return {
        "seconds": seconds,
        "peak_bytes": float(peak_bytes(device) - floor),
        "floor_bytes": float(floor),
    }


def run_point(
    name: str,
    length: int,
    device: str,
    threads: int | None,
    shape: dict[str, Any] | None = None,
    batch: int = 1,
) -> dict[str, Any]:
    """``measure_point`` in a fresh interpreter; {"error": …} when it fails (out of memory)."""
    set_threads = f"torch.set_num_threads({threads})" if threads else ""
    code = (
        "import json, sys, torch\n"
        f"{set_threads}\n"
        "from attnlab.bench.long_context import measure_point\n"
        f"print(json.dumps(measure_point({name!r}, {length}, {device!r}, {shape!r}, {batch})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["killed"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def loglog_slope(lengths: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(T); None with fewer than 2 points."""
    points = [(math.log(t), math.log(v)) for t, v in zip(lengths, values, strict=True) if v > 0]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def run_long_context(device: str, quick: bool, threads: int | None) -> dict[str, Any]:
    """Every contender at every length; prints the table as it goes and returns it all."""
    lengths = list(QUICK_LENGTHS if quick else LENGTHS)
    print(f"long_context: batch 1, d_model 256, 4 heads, 2 layers, {device}; one training step")
    print(f"{'contender':<22} {'T':>6} {'step s':>9} {'peak MiB':>10}")
    points: dict[str, dict[int, dict[str, Any]]] = {}
    for length in lengths:  # contenders take turns at each length
        for name in CONTENDERS:
            result = run_point(name, length, device, threads)
            points.setdefault(name, {})[length] = result
            if "error" in result:
                print(f"{name:<22} {length:>6} {'failed':>9}  {result['error']}", flush=True)
            else:
                mib = result["peak_bytes"] / 2**20
                print(f"{name:<22} {length:>6} {result['seconds']:>9.3f} {mib:>10.1f}", flush=True)
    summary: dict[str, Any] = {}
    longest = lengths[-1]
    reference = points[REFERENCE].get(longest, {})
    ratio_header = f"memory / full(math) at T={longest}"
    print(f"\n{'contender':<22} {'memory slope':>12} {'time slope':>10} "
          f"{ratio_header:>30} {'time / full(math)':>18}")  # fmt: skip
    for name, by_length in points.items():
        good = [t for t in lengths if "error" not in by_length[t]]
        memory = loglog_slope(good, [by_length[t]["peak_bytes"] for t in good])
        timing = loglog_slope(good, [by_length[t]["seconds"] for t in good])
        at = by_length.get(longest, {})
        mem_ratio = time_ratio = None
        if "error" not in at and "error" not in reference and reference:
            mem_ratio = at["peak_bytes"] / reference["peak_bytes"]
            time_ratio = at["seconds"] / reference["seconds"]
        summary[name] = {"memory_slope": memory, "time_slope": timing,
                         "memory_ratio": mem_ratio, "time_ratio": time_ratio}  # fmt: skip

        def shown(x: float | None, digits: int = 2) -> str:
            return "–" if x is None else f"{x:.{digits}f}"

        print(f"{name:<22} {shown(memory):>12} {shown(timing):>10} {shown(mem_ratio, 3):>30} "
              f"{shown(time_ratio, 3):>18}")  # fmt: skip
    met = [
        (summary[n]["memory_ratio"] or 1) <= 1 / 8 and (summary[n]["memory_slope"] or 9) <= 1.2
        for n in EFFICIENT
    ]
    print(f"targets at T={longest} (≤ 1/8 of full-math memory, slope ≤ 1.2) for "
          f"{', '.join(EFFICIENT)}: {'met' if all(met) else 'NOT met'}")  # fmt: skip
    return {"lengths": lengths, "points": points, "summary": summary, "targets_met": all(met)}
