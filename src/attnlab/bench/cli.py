"""Command line: ``attnlab-bench [--quick] [--json PATH] [--device cpu|cuda] …``.

torch, Lightning and the contenders are imported inside the functions that use
them, after the arguments are parsed: ``--help`` and a bad argument answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from attnlab.bench.cases import Effort
    from attnlab.bench.contenders import BenchSize

CLOCK_NAMES = ("wall", "cpu")  # attnlab.bench.timing.CLOCKS (a test keeps them equal)
HF_CASES = {"decoder_only_vs_hf_gpt2", "decoder_only_generate_vs_hf"}  # need transformers


def effort_for(size: BenchSize, quick: bool, device: torch.device, clock: str) -> Effort:
    """How long to time each size: ``--quick`` finishes in a few minutes on 2 CPU cores."""
    from attnlab.bench.cases import Effort

    effort = Effort(device=device, clock=clock)
    if quick:
        effort = replace(
            effort, rounds=5, calls=2, decode_rounds=3, lightning_steps=40,
            lightning_rounds=5, lightning_minimal=False,
        )  # fmt: skip
    big = size.d_model >= 512 and device.type == "cpu"
    if big:  # a training step takes seconds on a CPU at this size
        effort = replace(effort, calls=1, lightning_steps=20)
    if not big and not quick:  # decoding at the training batch as well
        effort = replace(effort, decode_batches=(1, size.batch))
    return effort


def cpu_name() -> str:
    """The CPU model (Linux: /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device, clock: str, quick: bool) -> dict[str, Any]:
    import importlib.metadata

    import torch

    try:  # the installed version, without importing it (seconds) where no case uses it
        hf_version: str | None = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        hf_version = None
    import lightning

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {
        "device": device.type, "device_name": name, "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(), "clock": clock, "quick": quick,
        "torch": torch.__version__, "lightning": lightning.__version__,
        "transformers": hf_version, "python": platform.python_version(),
        "precision": "float32", "optimizer": "AdamW",
    }  # fmt: skip


def _line(size: str, key: str, result: dict[str, Any]) -> str:
    from attnlab.bench.cases import TARGETS, meets_target

    if "skipped" in result:
        return f"{size:<6} {key:<38} skipped: {result['skipped']}"
    pair = result.get("pair") or list(result["contenders"])[:2]
    first, second = (result["contenders"][name]["median_s"] for name in pair)
    target = TARGETS.get(key)
    verdict = ""
    if target:
        met = "met" if meets_target(key, result["ratio"]) else "NOT met"
        verdict = f"target {target[0]} {target[1]:g}: {met}"
    if "graph_breaks" in result:
        verdict += (f"({result['graphs']} graph(s), {result['graph_breaks']} break(s), "
                    f"compiled in {result['compile_s']:.0f} s)")  # fmt: skip
    if "floor_ratio" in result:  # the ratio if only attnlab's matrix products took time
        verdict += f" (matmul floor {result['floor_ratio']:.2f}"
        if "kernel_floor_ratio" in result:  # the attention kernel counted as well
            verdict += f", with the attention kernel {result['kernel_floor_ratio']:.2f}"
        verdict += ")"
    return (
        f"{size:<6} {key:<38} {1e3 * first:>10.2f} ms {1e3 * second:>10.2f} ms "
        f"{result['ratio']:>7.3f}  {verdict}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="attnlab-bench",
        description="Time attnlab against Hugging Face GPT-2, torch.nn.Transformer and a bare "
        "training loop; contenders take turns, medians and ratios are reported.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds, baby size only")
    parser.add_argument("--json", type=Path, help="write results and configuration here")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--sizes", help="comma-separated sizes, e.g. baby,d512 (default: "
                        "baby,d512; baby with --quick); a wrong name lists them")  # fmt: skip
    parser.add_argument("--only", help="comma-separated result keys to run (default: all); "
                        "long_context: step time and peak memory of the attention kinds "
                        "against sequence length; startup: attnlab's own start-up "
                        "share; data: attnlab-prepare's memory and speed, the token "
                        "loader and the step from data=tokens")  # fmt: skip
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--clock", default="wall", choices=CLOCK_NAMES,
                        help="wall time, or this process's CPU time (use with --threads 1 "
                        "on a shared machine)")  # fmt: skip
    return parser.parse_args(argv)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from attnlab.bench.cases import RATIO_MEANING, TARGETS, run_all
    from attnlab.bench.contenders import SIZES

    sizes = (args.sizes or ("baby" if args.quick else "baby,d512")).split(",")
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        return _fail(f"--sizes {unknown[0]} is not a size; use one of: {', '.join(SIZES)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        return _fail("--device cuda: no CUDA device is visible; use --device cpu")
    if args.device == "cuda" and args.clock == "cpu":
        return _fail("--clock cpu measures CPU time, not GPU work; use --clock wall with cuda")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    only = set(args.only.split(",")) if args.only else None
    separate: dict[str, Any] = {}  # the cases with tables of their own
    if only and "long_context" in only:  # time and memory against T
        from attnlab.bench.long_context import run_long_context

        separate["long_context"] = run_long_context(args.device, args.quick, args.threads)
    if only and "startup" in only:  # whole processes: time to the first training step
        from attnlab.bench.startup import report, run_startup

        separate["startup"] = run_startup(3 if args.quick else 5)
        report(separate["startup"])
    if only and "data" in only:  # attnlab-prepare, the loader and the step (whole processes)
        from attnlab.bench.data import run_data

        sizes_mb, text_mb = ([64, 128], [16, 32]) if args.quick else ([200, 1024, 2048], [50, 100])
        separate["data"] = run_data(sizes_mb, 32 if args.quick else 128, text_mb,
                                    2 if args.quick else 3,
                                    step_rounds=2 if args.quick else 5)  # fmt: skip
    if separate:
        only = (only or set()) - set(separate)
        if not only:
            _write_json(args.json, separate)
            return 0
    for key in sorted(only or ()):
        if key not in RATIO_MEANING and not key.startswith("kv_cache_speedup_batch"):
            return _fail(
                f"--only {key} is not a result key; use some of: {', '.join(RATIO_MEANING)}"
            )
    if only is None or only & HF_CASES:
        from attnlab.bench.contenders import find_transformers

        find_transformers()
    config = environment(device, args.clock, args.quick)
    print(f"attnlab-bench: {config['device_name']} ({args.device}), torch {config['torch']}, "
          f"{config['threads']} threads, {args.clock} clock")  # fmt: skip
    print(f"{'size':<6} {'comparison':<38} {'first':>13} {'second':>13} {'ratio':>7}")
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for name in sizes:
        size = SIZES[name]
        effort = effort_for(size, args.quick, device, args.clock)
        results[name] = run_all(
            size, effort, lambda key, res, n=name: print(_line(n, key, res), flush=True), only
        )
    report = {
        "config": {**config, "sizes": {name: SIZES[name].to_dict() for name in sizes}},
        "ratios": {
            name: {key: res.get("ratio") for key, res in by_key.items()}
            for name, by_key in results.items()
        },
        "meaning": RATIO_MEANING,
        "targets": {key: f"{op} {bound:g}" for key, (op, bound) in TARGETS.items()},
        "results": results,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(f"done in {report['wall_s']:.0f} s")
    _write_json(args.json, {**report, **separate})
    return 0


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
        print(f"results: {path}")
