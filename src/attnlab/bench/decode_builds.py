"""What each part of the compiled CPU decoding step buys, side by side in one process.

    python -m attnlab.bench.decode_builds [--rounds 7] [--threads 2]

Greedy decoding of 256 new tokens after a 16-token prompt, batch 1, at the bench's baby
size (``attnlab-bench``'s ``kv_cache_speedup`` case), never stopping at EOS: uncached,
and with the static cache and the compiled step built four ways, each adding one part:

1. ``python_wrapper``: ``torch.compile`` with inductor's defaults;
2. ``cpp_wrapper``: inductor's C++ wrapper calls the kernels;
3. ``skip_guards``: after a generation's first step only the guards that tell compiled
   graphs apart run (``FastSteps.step``);
4. ``one_row_matmuls``: + the post-grad pass of ``attnlab.inference.row_matmuls``: attnlab's
   own ``Runtime.compiled``, what ``decode.compile=true`` does.

Every build decodes in turns with the others (A B C, C B A, …); the medians, per-token
times and uncached / build ratios are printed, and every output is checked to be the
uncached one's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from typing import Any

import torch

from attnlab.bench.contenders import SIZES, our_decoder_only, random_tokens
from attnlab.inference import decoding
from attnlab.inference.generation import DecodeConfig, generate

NEW, PROMPT = 256, 16


def every_guard(self: decoding.FastSteps, step: Any, device: torch.device) -> Any:
    """``FastSteps.step`` checking every guard at every step (before ``skip_guards``)."""
    if self.compile and self.static:
        return self.runtime.compiled(step, device)
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    size = SIZES["baby"]
    model = our_decoder_only(size, max_len=PROMPT + NEW).eval()
    prompt = random_tokens(replace(size, batch=1), PROMPT, torch.device("cpu"))
    step = decoding._prompt_step
    cpp = {"cpp_wrapper": True}
    builds: dict[str, tuple[Any, Any]] = {  # compiled step, FastSteps.step
        "python_wrapper": (torch.compile(step), every_guard),
        "cpp_wrapper": (torch.compile(step, options=cpp), every_guard),
        "skip_guards": (torch.compile(step, options=cpp), decoding.FastSteps.step),
        "one_row_matmuls": (decoding.Runtime.compiled, decoding.FastSteps.step),  # attnlab's
    }
    outputs: dict[str, torch.Tensor] = {}

    def run(name: str) -> None:
        if name == "uncached":
            config = DecodeConfig(max_new_tokens=NEW, use_cache=False)
            outputs[name] = generate(model, prompt, config, eos_id=None)
            return
        compiled, fast_step = builds[name]
        saved = decoding.Runtime.compiled, decoding.FastSteps.step
        if compiled is not decoding.Runtime.compiled:
            decoding.Runtime.compiled = lambda self, step, device: compiled  # type: ignore[method-assign]
        decoding.FastSteps.step = fast_step  # type: ignore[method-assign]
        try:
            config = DecodeConfig(max_new_tokens=NEW, compile=True)
            outputs[name] = generate(model, prompt, config, eos_id=None)
        finally:
            decoding.Runtime.compiled, decoding.FastSteps.step = saved  # type: ignore[method-assign]

    names = ["uncached", *builds]
    for name in names:  # compilation and warm-up, untimed
        start = time.perf_counter()
        run(name)
        print(f"{name:16s} first call {time.perf_counter() - start:6.1f} s", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.rounds):
        for name in names if i % 2 == 0 else reversed(names):
            start = time.perf_counter()
            run(name)
            seconds[name].append(time.perf_counter() - start)
    assert all(torch.equal(out, outputs["uncached"]) for out in outputs.values()), "outputs differ"
    median = {name: statistics.median(times) for name, times in seconds.items()}
    print(f"\n{args.threads} threads, {args.rounds} rounds in turns, medians; outputs identical")
    print(f"{'build':16s} {'median ms':>10s} {'µs/token':>9s} {'uncached/build':>15s}  rounds (ms)")
    for name in names:
        rounds = " ".join(f"{t * 1000:.0f}" for t in seconds[name])
        print(f"{name:16s} {median[name] * 1000:10.1f} {median[name] / NEW * 1e6:9.0f} "
              f"{median['uncached'] / median[name]:15.2f}  {rounds}")  # fmt: skip


if __name__ == "__main__":
    main()
