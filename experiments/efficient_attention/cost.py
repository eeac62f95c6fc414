"""What the efficient-attention study's models cost, measured side by side in one run.

    python experiments/efficient_attention/cost.py [--rounds 5] [--threads 1]

1. Training: one step (forward + backward) of each attention kind at the LM study's shape
   (``experiment=study_efficient_lm``: batch 4, 2 layers of width 64, causal), at the
   study's T = 1024 and at T = 4096. Each point runs in a fresh subprocess
   (``attnlab.bench.long_context.run_point``): seconds of the step and the peak memory it
   adds above a step at T = 64. The kinds take turns at each length.
2. Decoding: multi-head (n_kv_heads = H), grouped-query (H/2 and, for the wide shape, H/4)
   and multi-query (1) attention. The KV-cache bytes per token, counted from the
   cache the model keeps after the prompt, and cached greedy decoding tokens/s after a
   prompt, the contenders taking turns for ``--rounds`` rounds (median reported). Two
   shapes: the study's (width 64, 4 heads) and a wide one (width 512, 8 heads, 4 layers),
   where reading the cache is a large part of a decoding step.

Weights are random: the cost of a step does not depend on them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

KINDS = ("full", "sliding_window", "longformer", "bigbird", "linear")
TRAIN_LENGTHS = (1024, 4096)
TRAIN_BATCH = 4


# the sparse kinds' own keys, as run.sh's LM sweep sets them (LM_SPARSE)
SPARSE = {"window": 128, "n_global": 1, "attn_block": 64, "n_random": 2}


def study_shape() -> dict[str, Any]:
    """``model.*`` of experiment=study_efficient_lm, with the data's vocabulary size."""
    from attnlab.cli import pipeline
    from attnlab.cli.compose import compose_config
    from attnlab.cli.pipeline import container

    cfg = compose_config(["experiment=study_efficient_lm"])
    datamodule = pipeline.build_data(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return {**container(cfg.model), "vocab_size": datamodule.vocab_size}


def kind_settings(shape: dict[str, Any], kind: str) -> dict[str, Any]:
    """The study's model with attention ``kind`` and the sparse keys that kind reads."""
    from attnlab.model_config import ModelConfig

    values = {**shape, **SPARSE, "attention": kind}
    return ModelConfig.from_dict(values, strict=False).to_dict()


def training_cost(shape: dict[str, Any], threads: int | None) -> None:
    from attnlab.bench.long_context import run_point

    points: dict[str, dict[int, dict[str, Any]]] = {kind: {} for kind in KINDS}
    for length in TRAIN_LENGTHS:
        for kind in KINDS:
            settings = kind_settings(shape, kind)
            points[kind][length] = run_point(kind, length, "cpu", threads, settings, TRAIN_BATCH)
    header = " | ".join(f"T={t} step s | T={t} peak MiB" for t in TRAIN_LENGTHS)
    print(f"| kind | {header} | memory / full at T={TRAIN_LENGTHS[-1]} |")
    print("|---|" + "---:|" * (2 * len(TRAIN_LENGTHS) + 1))
    full = points["full"][TRAIN_LENGTHS[-1]]
    for kind, by_length in points.items():
        cells = []
        for length in TRAIN_LENGTHS:
            p = by_length[length]
            if "error" in p:
                cells += ["failed", p["error"][:40]]
            else:
                cells += [f"{p['seconds']:.3f}", f"{p['peak_bytes'] / 2**20:.0f}"]
        last = by_length[TRAIN_LENGTHS[-1]]
        ratio = "–"
        if "error" not in last and "error" not in full:
            ratio = f"{last['peak_bytes'] / full['peak_bytes']:.2f}"
        print(f"| {kind} | " + " | ".join(cells) + f" | {ratio} |")


def cache_bytes(state: Any) -> int:
    """Bytes of the keys and values the decoding cache of ``state`` holds (each layer's
    self-attention ``Past``)."""
    total = 0
    for layer in state.cache.layers:
        past = layer.self_attn.past
        if past is not None:
            total += sum(t.numel() * t.element_size() for t in (past.k, past.v))
    return total


def decoding_cost(
    label: str, shape: dict[str, Any], kv_heads: list[int], prompt_len: int, new_tokens: int,
    batch: int, rounds: int,
) -> None:  # fmt: skip
    import torch

    from attnlab.inference.decoding import start_decoding
    from attnlab.models import ModelConfig, build_model

    models = {}
    for n_kv in kv_heads:
        torch.manual_seed(0)
        settings = {**shape, "n_kv_heads": n_kv, "max_len": prompt_len + new_tokens}
        models[n_kv] = build_model(ModelConfig.from_dict(settings), "lm").eval()
    vocab = shape["vocab_size"]
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(6, vocab, (batch, prompt_len), generator=generator)
    seconds: dict[int, list[float]] = {n: [] for n in kv_heads}
    per_token: dict[int, float] = {}

    def decode(n_kv: int) -> float:
        state = start_decoding(models[n_kv], prompt, use_cache=True)
        logits = state.logits()  # the prompt, not timed
        per_token[n_kv] = cache_bytes(state) / (batch * prompt_len)
        start = time.perf_counter()
        for _ in range(new_tokens):
            state.append(logits.argmax(-1))
            logits = state.logits()
        return time.perf_counter() - start

    with torch.inference_mode():
        for n_kv in kv_heads:
            decode(n_kv)  # warm-up
        for _ in range(rounds):
            for n_kv in kv_heads:
                seconds[n_kv].append(decode(n_kv))
    H = shape["n_heads"]
    print(f"\n{label}: batch {batch}, prompt {prompt_len}, {new_tokens} new tokens, "
          f"median of {rounds} rounds")  # fmt: skip
    print("| attention | n_kv_heads | KV cache KiB / token | decode tokens/s | vs MHA |")
    print("|---|---:|---:|---:|---:|")
    mha = statistics.median(seconds[H])
    for n_kv in kv_heads:
        name = "MHA" if n_kv == H else ("MQA" if n_kv == 1 else "GQA")
        median = statistics.median(seconds[n_kv])
        rate = batch * new_tokens / median
        print(f"| {name} | {n_kv} | {per_token[n_kv] / 1024:.2f} | {rate:.0f} | "
              f"{mha / median:.2f}× |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    shape = study_shape()
    print(f"Training, batch {TRAIN_BATCH}, the study's shape (width {shape['d_model']}, "
          f"{shape['n_layers']} layers, window {shape['window']}), one step:\n")  # fmt: skip
    training_cost(shape, args.threads)
    H = shape["n_heads"]
    decoding_cost("The study's shape (width 64, 4 heads, 2 layers)", shape,
                  [H, H // 2, 1], 512, 64, 8, args.rounds)  # fmt: skip
    wide = {**shape, "d_model": 512, "n_heads": 8, "n_layers": 4, "d_ff": 2048}
    decoding_cost("Wide (width 512, 8 heads, 4 layers)", wide, [8, 4, 2, 1], 1024, 32, 8,
                  args.rounds)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
