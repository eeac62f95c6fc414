"""The LR × width grid of the μP transfer study: tables and the Fig. 1-style plot.

usage: transfer.py --sp SWEEP [SWEEP ...] --mup SWEEP [SWEEP ...] --out FOLDER

For each parametrisation: the final validation loss of every (width, learning rate) run, the
best learning rate per width on the grid and where a parabola through the best point and
its two neighbours (in log2 lr) puts the optimum, and the drift of that optimum from the
narrowest to the widest model (in octaves: 1.0 = the best LR halves) and the slope of that
optimum against width over every width (log-log). A cell with several
runs (seeds) is their mean, and each table says how many runs each cell holds. A run that
diverged or did not finish counts as infinitely bad, so a cell with one is shown as "div.".
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, linear_regression

from attnlab.compare.runs import load_runs

METRIC = "val/loss"


@dataclass
class Grid:
    """One parametrisation's runs: the mean final loss and the number of runs of each cell."""

    losses: dict[int, dict[float, float]]  # {width: {lr: mean final val/loss, inf if any failed}}
    counts: dict[int, dict[float, int]]  # {width: {lr: runs}}
    steps: set[int]  # the runs' trainer.max_steps


def grid(sweeps: list[str]) -> Grid:
    """Every run of ``sweeps`` in its (width, lr) cell, averaged over the cell's seeds."""
    cells: dict[int, dict[float, list[float]]] = {}
    steps = set()
    for run in load_runs(sweeps):
        width = int(run.config["model"]["d_model"])
        lr = float(run.config["optim"]["lr"])
        steps.add(int(run.config["trainer"]["max_steps"]))
        loss = run.metrics.get(METRIC, math.inf) if run.completed else math.inf
        cells.setdefault(width, {}).setdefault(lr, []).append(loss)
    losses = {
        w: {lr: fmean(runs) if all(map(math.isfinite, runs)) else math.inf
            for lr, runs in sorted(row.items())}
        for w, row in sorted(cells.items())
    }  # fmt: skip
    counts = {w: {lr: len(runs) for lr, runs in sorted(row.items())} for w, row in cells.items()}
    return Grid(losses, counts, steps)


def runs_per_cell(grids: list[Grid]) -> str:
    """How many seeds the cells hold: '1 seed', '3 seeds' or '1–3 seeds per cell'."""
    counts = sorted({n for g in grids for row in g.counts.values() for n in row.values()})
    if len(counts) == 1:
        return f"{counts[0]} seed" + ("s" if counts[0] > 1 else "")
    return f"{counts[0]}–{counts[-1]} seeds per cell"


def optimum(losses: dict[float, float]) -> tuple[float, float]:
    """(the best lr on the grid, the parabola's optimum in log2 lr through it and its
    neighbours; the grid's best when it is at an edge or the parabola opens downwards)."""
    lrs = sorted(losses)
    i = min(range(len(lrs)), key=lambda j: losses[lrs[j]])
    best = lrs[i]
    if i in (0, len(lrs) - 1) or not all(math.isfinite(losses[lrs[j]]) for j in (i - 1, i + 1)):
        return best, best
    x = [math.log2(lrs[j]) for j in (i - 1, i, i + 1)]
    y = [losses[lrs[j]] for j in (i - 1, i, i + 1)]
    denominator = (x[0] - x[1]) * (x[0] - x[2]) * (x[1] - x[2])
    a = (x[2] * (y[1] - y[0]) + x[1] * (y[0] - y[2]) + x[0] * (y[2] - y[1])) / denominator
    b = (x[2] ** 2 * (y[0] - y[1]) + x[1] ** 2 * (y[2] - y[0]) + x[0] ** 2 * (y[1] - y[2])) / (
        denominator
    )
    if a <= 0:
        return best, best
    return best, 2 ** (-b / (2 * a))


def transfer_slope(optima: dict[int, float]) -> float:
    """The least-squares slope of log2(fitted optimum) against log2(width), over every width."""
    widths = list(optima)
    return linear_regression([math.log2(w) for w in widths],
                             [math.log2(optima[w]) for w in widths]).slope  # fmt: skip


def table(name: str, cells: Grid) -> list[str]:
    losses = cells.losses
    lrs = sorted({lr for row in losses.values() for lr in row})
    counts = {n for row in cells.counts.values() for n in row.values()}
    uneven = len(counts) > 1  # then each cell shows its own number of runs
    lines = [
        f"### {name}: final validation loss (best per width in bold)",
        "",
        "| width | " + " | ".join(f"lr {lr:.3g}" for lr in lrs) + " | best lr | fitted optimum |",
        "|---|" + "---|" * (len(lrs) + 2),
    ]
    optima = {}
    for width, row in losses.items():
        best, fitted = optimum(row)
        optima[width] = fitted
        shown = []
        for lr in lrs:
            loss = row.get(lr)
            text = "—" if loss is None else ("div." if math.isinf(loss) else f"{loss:.3f}")
            text = f"**{text}**" if lr == best else text
            if uneven and loss is not None:
                text += f" (n={cells.counts[width][lr]})"
            shown.append(text)
        lines.append(f"| {width} | " + " | ".join(shown) + f" | {best:.3g} | {fitted:.3g} |")
    widths = list(optima)
    slope_line = [] if len(widths) < 2 else [  # one width has no slope
        f"Fitted optimum against width over all {len(widths)} widths: a log-log slope of "
        f"{transfer_slope(optima):+.2f} (least squares; -1: the optimum falls as 1/width, "
        "0: it stays put)."
    ]
    drift = math.log2(optima[widths[0]] / optima[widths[-1]])
    bests = [min(row.values()) for row in losses.values()]
    lines += [
        "",
        f"Fitted optimum from width {widths[0]} to {widths[-1]}: {optima[widths[0]]:.3g} → "
        f"{optima[widths[-1]]:.3g}, a drift of {drift:+.2f} octaves (positive: the best LR "
        "falls as the width grows).",
        *slope_line,
        "Best loss per width: " + ", ".join(f"{w}: {b:.3f}" for w, b in zip(widths, bests,
                                                                            strict=True)) + ".",
        f"Runs per cell (seeds, averaged): {min(counts)} to {max(counts)}, as (n=…) shows."
        if uneven
        else f"Runs per cell (seeds, averaged): {min(counts)} in every cell.",
    ]
    return lines


def plot(grids: dict[str, dict[int, dict[float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(grids), figsize=(5.2 * len(grids), 3.8), sharey=True)
    for ax, (name, losses) in zip(axes, grids.items(), strict=True):
        for k, (width, row) in enumerate(losses.items()):
            lrs = sorted(lr for lr in row if math.isfinite(row[lr]))
            colour = plt.cm.viridis(k / max(1, len(losses) - 1))
            ax.plot(lrs, [row[lr] for lr in lrs], marker="o", color=colour, label=f"width {width}")
            best = min(lrs, key=lambda lr: row[lr])
            ax.plot([best], [row[best]], marker="*", markersize=13, color=colour)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate")
        ax.set_title(f"{name}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"final {METRIC}")
    finite = [v for g in grids.values() for row in g.values() for v in row.values()
              if math.isfinite(v)]  # fmt: skip
    axes[0].set_ylim(min(finite) - 0.05, min(max(finite), min(finite) + 1.2) + 0.05)
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="transfer.py")
    parser.add_argument("--sp", nargs="+", required=True)
    parser.add_argument("--mup", nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    grids = {"SP": grid(args.sp), "μP": grid(args.mup)}
    steps = "/".join(str(n) for n in sorted(set.union(*(g.steps for g in grids.values()))))
    seeds = runs_per_cell(list(grids.values()))
    lines = [f"## Learning-rate transfer: {steps} steps, {seeds}", ""]
    for name, cells in grids.items():
        lines += table(name, cells) + [""]
    (args.out / "transfer.md").write_text("\n".join(lines), encoding="utf-8")
    plot({name: cells.losses for name, cells in grids.items()}, args.out / "transfer.png")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
