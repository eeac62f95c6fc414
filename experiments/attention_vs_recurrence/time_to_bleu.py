"""Training time to a validation BLEU, per model, from a sweep's run directories.

    python experiments/attention_vs_recurrence/time_to_bleu.py <sweep> [--bleu 5 10]

For each run, the first validation check whose val/bleu reaches the threshold, and the
training time at that step (``perf/train_s``: steps × the run's mean measured step time,
validation excluded). Runs that never reach it count as "not reached". Prints a Markdown
table: mean ± std and a Student-t 95 % CI of the mean over the runs that reached it.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from attnlab.compare.grouping import group_runs
from attnlab.compare.report import format_number
from attnlab.compare.runs import load_runs
from attnlab.compare.stats import t_interval


def seconds_to(run, threshold: float) -> tuple[float, float] | None:
    """(step, training seconds) when val/bleu first reaches ``threshold``; None if never."""
    bleu, seconds = run.curves.curve("val/bleu"), run.curves.curve("perf/train_s")
    if bleu is None or seconds is None:
        return None
    reached = np.flatnonzero(bleu[1] >= threshold)
    if not reached.size:
        return None
    step = float(bleu[0][reached[0]])
    # perf/train_s is logged every log_every_n_steps: read it at the step (linear between)
    return step, float(np.interp(step, seconds[0], seconds[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="+")
    parser.add_argument("--bleu", type=float, nargs="+", default=[5.0, 10.0])
    args = parser.parse_args(argv)
    groups = group_runs([r for r in load_runs(args.sweep) if r.completed], ["experiment_name"])
    for threshold in args.bleu:
        print(f"\nTraining time to val/bleu ≥ {threshold:g} (greedy, 256 validation pairs):\n")
        print("| experiment_name | reached | step | train_s | train_s 95 % t CI |")
        print("| --- | ---: | --- | --- | --- |")
        for group in groups:
            hits = [h for h in (seconds_to(r, threshold) for r in group.runs) if h is not None]
            name = group.settings["experiment_name"]
            if not hits:
                print(f"| {name} | 0/{len(group.runs)} | – | – | – |")
                continue
            steps, secs = np.array([h[0] for h in hits]), np.array([h[1] for h in hits])
            sd = f" ± {format_number(secs.std(ddof=1))}" if len(secs) > 1 else ""
            ci = t_interval(list(secs))
            ci_text = f"[{format_number(ci[0])}, {format_number(ci[1])}]" if ci else "–"
            print(f"| {name} | {len(hits)}/{len(group.runs)} | {format_number(steps.mean())} | "
                  f"{format_number(secs.mean())}{sd} | {ci_text} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
