"""A metric at every validation, mean ± std over seeds, one column per experiment.

    python experiments/architecture_comparison/curve_table.py SWEEP [--metric val/bleu]

The numbers behind the curve plots, as a Markdown table (steps as 1-based counts: the
check after step 299, 0-based, is step 300).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from attnlab.compare.grouping import group_runs
from attnlab.compare.report import format_number
from attnlab.compare.runs import load_runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("--metric", default="val/bleu")
    args = parser.parse_args(argv)
    groups = group_runs([r for r in load_runs([args.sweep]) if r.completed], ["experiment_name"])
    columns = {}  # experiment → {step: values over seeds}
    for group in groups:
        by_step: dict[int, list[float]] = {}
        for run in group.runs:
            steps, values = run.curve(args.metric)
            for step, value in zip(steps, values, strict=True):
                by_step.setdefault(int(step) + 1, []).append(float(value))
        columns[group.settings["experiment_name"]] = by_step
    names = list(columns)
    print(f"{args.metric} at each validation, mean ± std over seeds:\n")
    print("| step | " + " | ".join(names) + " |")
    print("| ---: |" + " --- |" * len(names))
    for step in sorted({s for by_step in columns.values() for s in by_step}):
        cells = []
        for name in names:
            values = np.array(columns[name].get(step, []))
            sd = f" ± {format_number(values.std(ddof=1))}" if len(values) > 1 else ""
            cells.append(f"{format_number(values.mean())}{sd}" if len(values) else "—")
        print(f"| {step} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
