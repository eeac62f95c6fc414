"""The LR × width grid of the μP transfer study: tables and the Fig. 1-style plot.

usage: transfer.py --sp SWEEP [SWEEP ...] --mup SWEEP [SWEEP ...] --out FOLDER

For each parametrisation: the final validation loss of every (width, learning rate) run, the
best learning rate per width on the grid and where a parabola through the best point and
its two neighbours (in log2 lr) puts the optimum, and the drift of that optimum from the
narrowest to the widest model (in octaves: 1.0 = the best LR halves). A run that diverged
or did not finish is shown as "div." and counts as infinitely bad.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from attnlab.compare.runs import load_runs

METRIC = "val/loss"


def grid(sweeps: list[str]) -> dict[int, dict[float, float]]:
    """{width: {lr: final val/loss (inf when it did not complete)}}."""
    out: dict[int, dict[float, float]] = {}
    for run in load_runs(sweeps):
        width = int(run.config["model"]["d_model"])
        lr = float(run.config["optim"]["lr"])
        loss = run.metrics.get(METRIC, math.inf) if run.completed else math.inf
        out.setdefault(width, {})[lr] = loss if math.isfinite(loss) else math.inf
    return {w: dict(sorted(row.items())) for w, row in sorted(out.items())}


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


def table(name: str, losses: dict[int, dict[float, float]]) -> list[str]:
    lrs = sorted({lr for row in losses.values() for lr in row})
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
        cells = []
        for lr in lrs:
            loss = row.get(lr)
            text = "—" if loss is None else ("div." if math.isinf(loss) else f"{loss:.3f}")
            cells.append(f"**{text}**" if lr == best else text)
        lines.append(f"| {width} | " + " | ".join(cells) + f" | {best:.3g} | {fitted:.3g} |")
    widths = list(optima)
    drift = math.log2(optima[widths[0]] / optima[widths[-1]])
    bests = [min(row.values()) for row in losses.values()]
    lines += [
        "",
        f"Fitted optimum from width {widths[0]} to {widths[-1]}: {optima[widths[0]]:.3g} → "
        f"{optima[widths[-1]]:.3g}, a drift of {drift:+.2f} octaves (positive: the best LR "
        "falls as the width grows).",
        "Best loss per width: " + ", ".join(f"{w}: {b:.3f}" for w, b in zip(widths, bests,
                                                                            strict=True)) + ".",
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
    lines = ["## Learning-rate transfer: Tiny Shakespeare, 2-layer decoder, 400 steps, 1 seed", ""]
    for name, losses in grids.items():
        lines += table(name, losses) + [""]
    (args.out / "transfer.md").write_text("\n".join(lines), encoding="utf-8")
    plot(grids, args.out / "transfer.png")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
