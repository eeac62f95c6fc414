"""The gate's numbers from the committed runs: nanoGPT's loss and the baseline trained longer.

    python experiments/compute_multipliers/gate.py RUNS_FOLDER

Reads ``gate/nanogpt.json`` (the unmodified nanoGPT at the study's shape: its last
validation loss) and the runs of ``gate_longer/`` (the GPT-2 block at width 256, seed 0,
its schedule stretched over more steps): for each, the final validation loss, the first
validation below nanoGPT's, and its wall time. Prints a Markdown table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from attnlab.compare.runs import load_runs


def main(argv: list[str] | None = None) -> int:
    runs_folder = Path((argv or sys.argv[1:])[0])
    gate = json.loads((runs_folder / "gate" / "nanogpt.json").read_text())["val_loss"]
    print(f"nanoGPT at the study's shape and budget (gate/nanogpt.json): val loss {gate:.4f}\n")
    print("The baseline (GPT-2 block, width 256, seed 0) with its schedule over more steps:\n")
    print("| steps | val/loss | first validation below the gate | wall s |")
    print("| ---: | ---: | ---: | ---: |")
    runs = sorted(load_runs([str(runs_folder / "gate_longer")]), key=lambda r: r.metrics["wall_s"])
    for run in runs:
        steps, losses = run.curve("val/loss")
        below = np.flatnonzero(losses < gate)
        first = f"{steps[below[0]]:.0f}" if below.size else "not reached"
        print(f"| {steps[-1] + 1:.0f} | {run.metrics['val/loss']:.4f} | {first} | "
              f"{run.metrics['wall_s']:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
