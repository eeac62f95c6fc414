"""The measurements of the GPU suite that need a process of their own.

    python -m attnlab.bench.gpu.probes env                       # torch, device, bf16
    python -m attnlab.bench.gpu.probes sdpa-kernels [--tiny]     # which SDPA kernel runs
    python -m attnlab.bench.gpu.probes peak-memory --checkpointing on [--tiny] [--batch 16]

Each prints one JSON object as its last line. A fresh process per measurement keeps
one probe's allocations, compiled graphs and peak memory out of the next.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import re
import resource
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from attnlab.models import ModelConfig, build_model

# GPT-2 (124M) as in attnlab.bench.gpu.check; the SDPA probe needs only two of its layers
GPT2_124M = dict(n_layers=12, n_heads=12, d_model=768, max_len=1024, vocab_size=50304)
TINY = dict(n_layers=2, n_heads=2, d_model=64, max_len=64, vocab_size=512)
# SDPA's fused backends, as they appear in profiler event names (aten ops and CUDA kernels):
# FlashAttention-2 (Dao 2023), the memory-efficient xFormers/cutlass kernel (Rabe & Staats
# 2021), cuDNN's fused attention, and the CPU's flash-style kernel
FUSED = re.compile(r"flash|efficient_attention|fmha|cudnn_attention", re.IGNORECASE)
MATH = "aten::_scaled_dot_product_attention_math"


def gpt2_config(shape: dict[str, Any], **overrides: Any) -> ModelConfig:
    """GPT-2's block: Pre-LN, GELU (tanh), learned positions, tied embeddings, no dropout."""
    values = dict(
        name="decoder_only", norm="pre", ffn="gelu_tanh", pos="learned", tie_embeddings=True,
        dropout=0.0, init="gpt2", scale_embeddings=False, **shape,
    )  # fmt: skip
    values.update(overrides)
    return ModelConfig.from_dict(values)


def device_and_autocast(tiny: bool) -> tuple[torch.device, Any]:
    cuda = torch.cuda.is_available() and not tiny
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        return device, torch.autocast("cuda", dtype=torch.bfloat16)
    return device, contextlib.nullcontext()  # fp32 on the CPU: bf16 there is slow or absent


def training_pass(model: torch.nn.Module, tokens: torch.Tensor, autocast: Any) -> None:
    """Forward, next-token cross-entropy, backward."""
    with autocast:
        logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()


def env() -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(), "torch": torch.__version__,
        "cuda": cuda, "cuda_version": torch.version.cuda,
        "device_name": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "bf16": bool(cuda and torch.cuda.is_bf16_supported(including_emulation=False)),
        "gpus": torch.cuda.device_count() if cuda else 0,
    }  # fmt: skip


def sdpa_kernels(tiny: bool) -> dict[str, Any]:
    """Profile one training pass of a causal decoder and list the attention kernels it ran.

    attnlab passes ``is_causal=True`` and no mask for a fresh causal sequence, which is
    what the flash kernel needs (``nn/attention.py``); a mask would send SDPA elsewhere.
    On CUDA the pass is profiled eager and under torch.compile; on the CPU eager only.
    """
    device, autocast = device_and_autocast(tiny)
    shape = TINY if device.type == "cpu" else {**GPT2_124M, "n_layers": 2}
    modes = {}
    for mode in ("eager", "compiled") if device.type == "cuda" else ("eager",):
        torch.manual_seed(0)
        model = build_model(gpt2_config(shape)).to(device).train()
        if mode == "compiled":
            model.compile()
        tokens = torch.randint(6, shape["vocab_size"], (2, shape["max_len"] + 1), device=device)
        training_pass(model, tokens, autocast)  # warm-up: compilation, kernel selection
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as profile:
            training_pass(model, tokens, autocast)
            if device.type == "cuda":
                torch.cuda.synchronize()
        names = sorted({event.key for event in profile.key_averages()})
        modes[mode] = {
            "fused": [name[:160] for name in names if FUSED.search(name)],
            "math": MATH in names,
            "sdpa_ops": [name for name in names if "scaled_dot_product" in name],
        }
    passed = all(found["fused"] and not found["math"] for found in modes.values())
    return {"device": device.type, "shape": shape, "modes": modes, "passed": passed}


def peak_memory(tiny: bool, checkpointing: bool, batch: int | None) -> dict[str, Any]:
    """Peak memory of one training step (AdamW state already allocated) at GPT-2 shape.

    CUDA: the allocator's peak over the step (``torch.cuda.max_memory_allocated``, reset
    after a first step). CPU: the process's peak resident set, libraries included, which is
    only a rough figure at the tiny shape.
    """
    device, autocast = device_and_autocast(tiny)
    cuda = device.type == "cuda"
    shape = TINY if not cuda else GPT2_124M
    batch = batch or (2 if not cuda else 16)
    torch.manual_seed(0)
    cfg = gpt2_config(shape, activation_checkpointing=checkpointing)
    model = build_model(cfg).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    tokens = torch.randint(6, shape["vocab_size"], (batch, shape["max_len"] + 1), device=device)

    def step() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        training_pass(model, tokens, autocast)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    step()  # allocates gradients and the optimizer state
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    seconds = min(step(), step())
    if cuda:
        peak, measure = torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    else:
        peak, measure = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak RSS"
    return {
        "device": device.type, "checkpointing": checkpointing, "batch": batch, "shape": shape,
        "peak_bytes": int(peak), "measure": measure, "step_s": seconds,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probe", choices=("env", "sdpa-kernels", "peak-memory"))
    parser.add_argument("--tiny", action="store_true", help="the tiny shape on the CPU")
    parser.add_argument("--checkpointing", choices=("on", "off"), default="off")
    parser.add_argument("--batch", type=int, help="sequences per step (peak-memory)")
    args = parser.parse_args(argv)
    if args.probe == "env":
        result = env()
    elif args.probe == "sdpa-kernels":
        result = sdpa_kernels(args.tiny)
    else:
        result = peak_memory(args.tiny, args.checkpointing == "on", args.batch)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
