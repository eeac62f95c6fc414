"""Time cached vs uncached greedy decoding of a small decoder-only model on this machine.

    python -m attnlab.bench.kv_cache_speed [--new 256] [--repeats 5]

Runs alternate (cached, uncached, cached, …) so background load hits both alike;
prints the median wall and CPU time of each and their ratios (CPU time is the
steadier number on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnlab.inference.generation import DecodeConfig, generate
from attnlab.models import ModelConfig, build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=256, help="new tokens per run")
    parser.add_argument("--prompt", type=int, default=16, help="prompt length")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each kind")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = ModelConfig.from_dict(dict(
        name="decoder_only", vocab_size=64, d_model=128, n_layers=4, n_heads=4,
        dropout=0.0, pos="learned", max_len=512,
    ))  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    prompt = torch.randint(6, 64, (1, args.prompt))

    def once(use_cache: bool) -> tuple[float, float]:
        decode = DecodeConfig(strategy="greedy", max_new_tokens=args.new, use_cache=use_cache)
        wall, cpu = time.perf_counter(), time.process_time()
        out = generate(model, prompt, decode, eos_id=None)  # never stop early
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert out.size(1) == args.new
        return wall, cpu

    once(True), once(False)  # warm-up
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(args.repeats):
        for use_cache in (True, False):
            runs[use_cache].append(once(use_cache))
    print(f"threads={torch.get_num_threads()} prompt={args.prompt} new={args.new} "
          f"repeats={args.repeats}")  # fmt: skip
    for i, clock in enumerate(("wall", "cpu")):
        cached = statistics.median(r[i] for r in runs[True])
        uncached = statistics.median(r[i] for r in runs[False])
        per_token = f"{cached / args.new * 1e3:.2f} / {uncached / args.new * 1e3:.2f} ms/token"
        print(f"{clock:>4}: cached {cached * 1e3:7.1f} ms, uncached {uncached * 1e3:7.1f} ms "
              f"({per_token}), ratio {uncached / cached:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
