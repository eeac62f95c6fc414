"""The gate: the baseline (the GPT-2 block at width 256) against the unmodified nanoGPT.

    python experiments/compute_multipliers/gate.py GATE_JSON BASELINE_SWEEP

Reads nanoGPT's last validation loss from ``GATE_JSON`` (``runs/gate/nanogpt.json``: the
unmodified nanoGPT at the study's shape, budget and rate, with its source's hashes) and the
width-256 runs of ``BASELINE_SWEEP`` (the study's GPT-2 block at its tuned rate, one run a
seed), and prints a Markdown verdict: met when the baseline's mean is at or below nanoGPT's
loss, or when nanoGPT's loss lies inside the baseline's 95 % t interval (the two are not
distinguishable); not met otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from attnlab.compare.runs import load_runs
from attnlab.compare.stats import t_interval

WIDTH = 256


def main(argv: list[str] | None = None) -> int:
    gate_json, sweep = (argv or sys.argv[1:])[:2]
    gate = json.loads(Path(gate_json).read_text())["val_loss"]
    runs = [r for r in load_runs([sweep]) if r.config.get("model", {}).get("d_model") == WIDTH]
    runs.sort(key=lambda r: r.config.get("seed", 0))
    losses = np.array([r.metrics["val/loss"] for r in runs])
    rates = sorted({r.config["optim"]["lr"] for r in runs})
    lo, hi = t_interval(losses.tolist()) or (float("nan"), float("nan"))
    mean = float(losses.mean())
    met = mean <= gate or lo <= gate <= hi
    print(f"nanoGPT at the study's shape and budget (gate/nanogpt.json): val loss {gate:.4f}\n")
    print(f"The baseline (GPT-2 block, width {WIDTH}, lr {', '.join(f'{r:g}' for r in rates)}):\n")
    print("| seed | val/loss |")
    print("| ---: | ---: |")
    for run, loss in zip(runs, losses, strict=True):
        print(f"| {run.config.get('seed')} | {loss:.4f} |")
    print(f"\nmean {mean:.4f}, 95 % t CI [{lo:.4f}, {hi:.4f}] (n = {len(losses)}); "
          f"baseline − nanoGPT {mean - gate:+.4f}: gate "
          f"{'met' if met else 'not met'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
