"""Throughput and MFU of a GPT-2-124M-shaped attnlab model on one GPU.

    python -m attnlab.bench.gpu.check            # GPU: bf16-mixed, compile, training's AdamW
    python -m attnlab.bench.gpu.check --accum 4 --batch 12
    python -m attnlab.bench.gpu.check --tiny     # a seconds-long CPU smoke test (fp32, eager)

The model is attnlab's decoder_only at GPT-2 (124M) shape — 12 layers, 12 heads,
d_model 768, block 1024, vocabulary 50304 (50257 padded to a multiple of 64, as
nanoGPT does), Pre-LN, GPT-2's tanh GELU, learned positions, tied embeddings, no dropout —
trained on random tokens with the loss of attnlab-train (LanguageModelTask) and the
optimiser, autocast and gradient clipping it trains with: the task is given a Trainer with
attnlab-train's precision (trainer=gpu: bf16-mixed) and clipping (1.0), so its own
``configure_optimizers`` chooses the AdamW (fused where training fuses it) and its own
``configure_gradient_clipping`` clips. It prints milliseconds per iteration, tokens per second and
MFU against the device's dense peak at the precision its matrix products run in
(attnlab.callbacks.mfu): bf16, or with --precision fp32 the TF32 tensor-core peak, since
CUDA runs here allow TF32 matmuls (``peak_key``; the JSON records it as "peak_precision").

For comparison, nanoGPT trains the same shape (config/train_gpt2.py: batch 12 ×
block 1024 × 40 gradient-accumulation micro-steps ≈ 0.5M tokens per iteration,
on 8 × A100 40GB); its README reports that torch.compile cut its iteration time
from ~250 ms to ~135 ms. See the nanoGPT README for its exact settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import torch

from attnlab.callbacks.mfu import flops_per_token, peak_flops
from attnlab.tasks import LanguageModelTask

GPT2_124M = dict(n_layers=12, n_heads=12, d_model=768, max_len=1024, vocab_size=50304)
TINY = dict(n_layers=2, n_heads=2, d_model=64, max_len=64, vocab_size=512)
CLIP = 1.0  # conf/trainer/default.yaml: gradient_clip_val


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model on the CPU (smoke test)")
    parser.add_argument("--batch", type=int, help="sequences per micro-step (default 16; tiny 2)")
    parser.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step")
    parser.add_argument("--steps", type=int, help="timed iterations (default 20; tiny 3)")
    parser.add_argument("--warmup", type=int, help="untimed iterations first (default 5; tiny 1)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--precision", choices=("bf16", "fp32"), help="default: bf16 on cuda")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (default: on for cuda)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def peak_key(precision: str) -> str:
    """The ``peak_flops`` key of the precision the matmuls run in: fp32 matmuls run on the
    TF32 tensor cores when ``torch.backends.cuda.matmul.allow_tf32`` is set (H100: 494
    against 67 TFLOP/s), so dividing by the fp32 peak would overstate MFU ~7×."""
    return "tf32" if precision == "fp32" and torch.backends.cuda.matmul.allow_tf32 else precision


def training_trainer(device: torch.device, precision: str) -> L.Trainer:
    """A Trainer with attnlab-train's precision and gradient clipping, for the task to read
    as it chooses its optimizer and clips (it is never fitted)."""
    cuda = device.type == "cuda"
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)  # no device banners
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return L.Trainer(
                accelerator="gpu" if cuda else "cpu", devices=[device.index or 0] if cuda else 1,
                precision="bf16-mixed" if precision == "bf16" else "32-true",
                gradient_clip_val=CLIP, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False,
            )  # fmt: skip
    finally:
        lightning_log.setLevel(level)


def build(args: argparse.Namespace) -> tuple[LanguageModelTask, dict]:
    shape = TINY if args.tiny else GPT2_124M
    model = dict(
        name="decoder_only", norm="pre", ffn="gelu_tanh", pos="learned", tie_embeddings=True,
        dropout=0.0, init="gpt2", scale_embeddings=False, compile=args.compile, **shape,
    )  # fmt: skip
    optim = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, warmup_steps=0,
                 decay_steps=10_000)  # the schedule's length: no dataloader to count it from
    return LanguageModelTask(model=model, optim=optim), shape


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    args.compile = cuda if args.compile is None else args.compile
    precision = args.precision or ("bf16" if cuda else "fp32")
    batch = args.batch or (2 if args.tiny else 16)
    steps, warmup = args.steps or (3 if args.tiny else 20), args.warmup or (1 if args.tiny else 5)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers on tensor cores
        torch.backends.cudnn.allow_tf32 = True

    torch.manual_seed(0)
    task, shape = build(args)
    task = task.to(device)
    task.setup("fit")  # as the Trainer does: model.compile=true wraps the model here
    task.trainer = training_trainer(device, precision)
    optimizer = task.configure_optimizers()["optimizer"]  # the AdamW training would step
    fused = bool(optimizer.defaults["fused"])
    block, vocab = shape["max_len"], shape["vocab_size"]
    plugin = task.trainer.precision_plugin  # training's autocast

    def iteration() -> float:
        for _ in range(args.accum):
            tokens = torch.randint(0, vocab, (batch, block + 1), device=device)
            inputs, labels = task.inputs_and_labels(tokens)
            with plugin.forward_context():
                loss = task.loss(task.model(inputs), labels) / args.accum
            loss.backward()
        task.configure_gradient_clipping(optimizer, CLIP, "norm")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach()) * args.accum  # one host sync per iteration, as logging has

    print(f"device: {torch.cuda.get_device_name(device) if cuda else 'cpu'}, {precision}, "
          f"compile={args.compile}, AdamW fused={fused}, clip {CLIP}, "
          f"params {task.model.num_params() / 1e6:.1f}M, "
          f"batch {batch} × block {block} × accum {args.accum}")  # fmt: skip
    started = time.perf_counter()
    for _ in range(warmup):
        iteration()
    print(f"warm-up ({warmup} iterations, compilation included): "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    times = []
    for i in range(steps):
        start = time.perf_counter()
        loss = iteration()  # float(loss) has waited for the GPU
        times.append(time.perf_counter() - start)
        print(f"iter {i}: loss {loss:.3f}, {1e3 * times[-1]:.1f} ms")

    seconds = sorted(times)[len(times) // 2]
    tokens_per_sec = batch * block * args.accum / seconds
    cfg = task.model_cfg
    per_token = flops_per_token(cfg, 0, block)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    key = peak_key(precision)
    peak = peak_flops(name, key) if cuda else None
    result = {
        "device": name, "precision": precision, "peak_precision": key,
        "compile": args.compile, "fused_adamw": fused, "clip": CLIP, "batch": batch,
        "block": block, "accum": args.accum, "params": task.model.num_params(),
        "ms_per_iter": 1e3 * seconds, "tokens_per_sec": tokens_per_sec,
        "flops_per_token": per_token, "achieved_tflops": tokens_per_sec * per_token / 1e12,
        "peak_tflops": peak / 1e12 if peak else None,
        "mfu": tokens_per_sec * per_token / peak if peak else None,
        "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
    }  # fmt: skip
    mfu_text = (
        f"{100 * result['mfu']:.1f}% of {result['peak_tflops']:.0f} TFLOP/s ({key} peak)"
        if peak
        else "n/a (no peak known for this device)"
    )
    print(f"median {result['ms_per_iter']:.1f} ms/iter, {tokens_per_sec:,.0f} tokens/s, "
          f"{result['achieved_tflops']:.2f} TFLOP/s, MFU {mfu_text}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
