"""The gates' numbers read from the committed runs of ``runs/gate``.

    python experiments/efficient_attention/gates.py GATE_DIR [--runs-per-sweep 15]

The LM gate: nanoGPT's last validation loss at the study's shape (``nanogpt.json``). The
MQAR gate's long run, ``mqar_20k`` (full attention, seed 0, a 20,000-step cosine
schedule, interrupted): its validation accuracy at every check, where it stopped and its
step time, and two straight-line extrapolations to 0.99 (all ten validations; the last
five): a lower bound where the gate is met, and a weak estimate beyond it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from attnlab.compare.runs import load_runs

TARGET = 0.99


def extrapolation(steps: np.ndarray, acc: np.ndarray, seconds_per_step: float, runs: int) -> str:
    """The least-squares line through (step, acc): its slope and the step it reaches TARGET."""
    slope, intercept = np.polyfit(steps, acc, 1)
    reach = (TARGET - intercept) / slope
    hours = reach * seconds_per_step / 3600
    return (f"{slope * 1000:.3f} per 1,000 steps, reaching {TARGET} at step {reach:,.0f} "
            f"({hours:.1f} CPU hours a run, {hours * runs:.0f} for the sweep)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gate_dir")
    parser.add_argument("--runs-per-sweep", type=int, default=15)
    args = parser.parse_args(argv)
    nanogpt = json.loads((Path(args.gate_dir) / "nanogpt.json").read_text())["val_loss"]
    print(f"LM gate: nanoGPT at the study's shape and budget (nanogpt.json): val loss "
          f"{nanogpt:.4f}\n")  # fmt: skip
    (run,) = load_runs([str(Path(args.gate_dir) / "mqar_20k")])
    steps, acc = run.curve("val/acc")
    last = int(run.curve("perf/train_s")[0][-1]) + 1  # steps trained before it stopped
    wall = run.metrics["wall_s"]
    per_step = wall / last
    print("MQAR gate, long run (full attention, seed 0, 20,000-step schedule):\n")
    print("| step | val/acc |")
    print("| ---: | ---: |")
    for step, value in zip(steps, acc, strict=True):
        print(f"| {step + 1:.0f} | {value:.3f} |")
    hours = wall / 3600
    print(f"\nStopped ({run.status}) at step {last:,} after {wall:,.0f} s at one thread: "
          f"{hours:.2f} CPU hours ({hours * args.runs_per_sweep:.1f} for a sweep of "
          f"{args.runs_per_sweep} runs), {per_step:.3f} s a step.")  # fmt: skip
    print("A line through all validations: "
          + extrapolation(steps, acc, per_step, args.runs_per_sweep) + ".")  # fmt: skip
    print("A line through the last five: "
          + extrapolation(steps[-5:], acc[-5:], per_step, args.runs_per_sweep) + ".")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
