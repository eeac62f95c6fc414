"""attnlab's own start-up: time to the first training step, less the imports it cannot avoid.

    python -m attnlab.bench.startup --rounds 5
    attnlab-bench --only startup

Each round runs, in turns (the order alternates), a bare ``python -c "import torch,
lightning.pytorch"`` (its age once imported) and a one-step training run
of ``experiment=nanogpt_shakespeare_char_cpu`` whose ``summary.json`` records
``startup_s``: the seconds from its process's start to its first training step. attnlab's
own share is the run's start-up less the bare import, per round; medians are reported.
What remains is attnlab's work before the first step: its own imports and the few
third-party ones a run needs beyond torch and Lightning (Hydra, rich, the tokenizer),
composing and checking the config, building the model, data and Trainer, and preparing
the data (the run's data cache is warm after the first round, as for any run after the
first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnlab.bench.race_nanogpt import summary_of

REPO = Path(__file__).resolve().parents[3]
# the bare import reports its own age once imported, as the run does at its first step
# (timing the process from outside would add its exit, a second or more with torch)
BARE = [sys.executable, "-c", "import torch, lightning.pytorch\n"
        "from attnlab.callbacks.throughput import process_age\nprint(process_age())"]
RUN = [
    sys.executable, "-m", "attnlab.train", "experiment=nanogpt_shakespeare_char_cpu",
    "trainer.max_steps=1", "test=false", "trainer.limit_val_batches=0",
    "trainer.enable_progress_bar=false",
]  # fmt: skip


def _bare(env: dict[str, str]) -> float:
    done = subprocess.run(BARE, env=env, check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def _run(env: dict[str, str], cwd: Path) -> dict[str, float]:
    started = time.perf_counter()
    done = subprocess.run(RUN, env=env, cwd=cwd, capture_output=True, text=True)
    whole = time.perf_counter() - started
    summary = summary_of(done.stdout)
    if done.returncode != 0 or not summary:
        tail = (done.stdout + done.stderr)[-2000:]
        raise SystemExit(f"error: the one-step run exited with {done.returncode}:\n{tail}")
    if summary.get("startup_s") is None:
        raise SystemExit("error: this system does not report a process's start time "
                         "(/proc); startup_s cannot be measured here")  # fmt: skip
    return {"startup_s": float(summary["startup_s"]), "whole_s": whole,
            "job_s": float(summary["wall_s"])}  # fmt: skip


def shared_root(data: Path | None = None) -> Path:
    """The shared data: ``data``, else ``$ATTNLAB_DATA_ROOT``, else beside the checkout."""
    return data or Path(os.environ.get("ATTNLAB_DATA_ROOT", REPO.parent / "shared/data"))


def no_shakespeare(root: Path) -> dict[str, str] | None:
    """The benchmark's result when Tiny Shakespeare is missing under ``root``, else None."""
    if (root / "tinyshakespeare" / "input.txt").is_file():
        return None
    return {"skipped": f"no tinyshakespeare/input.txt under {root}; fetch it with "
                       f"`attnlab-data shakespeare --root {root}`, or set ATTNLAB_DATA_ROOT"}


def run_env(root: Path, logs: Path) -> dict[str, str]:
    """The environment of a benchmarked training run: this checkout, the shared data,
    logs under ``logs``, no W&B."""
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "ATTNLAB_DATA_ROOT": str(root),
            "ATTNLAB_LOG_DIR": str(logs), "WANDB_MODE": "disabled"}  # fmt: skip


def run_startup(rounds: int = 5, data: Path | None = None) -> dict[str, Any]:
    """Bare imports and one-step runs in turns; per-round and median seconds."""
    root = shared_root(data)
    if (skipped := no_shakespeare(root)) is not None:
        return skipped
    per_round: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="attnlab_startup_") as tmp:
        env = run_env(root, Path(tmp) / "logs")
        _run(env, Path(tmp))  # fills the data cache and Python's bytecode caches, untimed
        for i in range(rounds):
            if i % 2 == 0:
                bare, run = _bare(env), _run(env, Path(tmp))
            else:
                run, bare = _run(env, Path(tmp)), _bare(env)
            per_round.append({"bare_import_s": bare, **run, "own_s": run["startup_s"] - bare})
    median = {key: statistics.median(r[key] for r in per_round) for key in per_round[0]}
    return {"rounds": per_round, "median": median, "command": " ".join(RUN[1:])}


def report(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"startup: skipped: {result['skipped']}")
        return
    m = result["median"]
    print(f"startup ({len(result['rounds'])} rounds, medians): first training step "
          f"{m['startup_s']:.2f} s after the process starts; bare `import torch, "
          f"lightning.pytorch` {m['bare_import_s']:.2f} s; attnlab's own share "
          f"{m['own_s']:.2f} s (target <= 1 s: {'met' if m['own_s'] <= 1.0 else 'NOT met'})")
    shown = " ".join(f"{r['own_s']:.2f}" for r in result["rounds"])
    print(f"  own share per round: {shown} s; whole one-step process {m['whole_s']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", type=Path, help="the data root (default: ATTNLAB_DATA_ROOT)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run_startup(args.rounds, args.data)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 2 if "skipped" in result else 0


if __name__ == "__main__":
    sys.exit(main())
