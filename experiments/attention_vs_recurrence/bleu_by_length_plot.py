"""Test BLEU against source-sentence length per model (Bahdanau et al. 2015, Fig. 2), ± std.

python experiments/attention_vs_recurrence/bleu_by_length_plot.py <sweep> <out.png>
"""

from __future__ import annotations

import sys

import numpy as np

from attnlab.compare.grouping import group_runs
from attnlab.compare.plot import group_style
from attnlab.compare.runs import load_runs

BUCKETS = ["01-10", "11-15", "16-20", "21-25", "26+"]


def main(argv: list[str]) -> int:
    sweep, out = argv
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = group_runs([r for r in load_runs([sweep]) if r.completed], ["experiment_name"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    x = np.arange(len(BUCKETS))
    for i, group in enumerate(groups):
        values = np.array([[r.metrics.get(f"test/bleu_len_{b}", np.nan) for b in BUCKETS]
                           for r in group.runs])  # fmt: skip
        mean, sd = np.nanmean(values, 0), np.nanstd(values, 0, ddof=1)
        style = group_style(i)
        label = group.settings["experiment_name"].removeprefix("study_recurrence_")
        ax.errorbar(x, mean, yerr=sd, capsize=3, label=label, color=style["color"],
                    linestyle=style["linestyle"], marker="o")  # fmt: skip
    counts = [int(groups[0].runs[0].metrics.get(f"test/n_len_{b}", 0)) for b in BUCKETS]
    ax.set_xticks(x, [f"{b}\n(n={n})" for b, n in zip(BUCKETS, counts, strict=True)])
    ax.set_xlabel("source sentence length (words)")
    ax.set_ylabel("test BLEU (greedy)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
