"""The LR × width grid of the μP transfer study: tables and the Fig. 1-style plot.

usage: transfer.py --sp SWEEP [SWEEP ...] --mup SWEEP [SWEEP ...] --out FOLDER
                   [--tune SWEEP [SWEEP ...] --tuned SWEEP [SWEEP ...]]
       transfer.py --choose SWEEP [SWEEP ...]   (the tuning's α_output and α_attn, for run.sh)

For each parametrisation: the final validation loss of every (width, learning rate) run, the
best learning rate per width on the grid and where a parabola through the best point and
its two neighbours (in log2 lr) puts the optimum, and the drift of that optimum from the
narrowest to the widest model (in octaves: 1.0 = the best LR halves) and the slope of that
optimum against width over every width (log-log). A cell with several
runs (seeds) is their mean, and each table says how many runs each cell holds. A run that
diverged or did not finish counts as infinitely bad, so a cell with one is shown as "div.".

With several seeds, each seed's own row also gets its parabola: each width's optimum is then
the geometric mean over seeds with a 95 % Student-t interval (in log2 lr), each seed's slope
of the optimum against width is a sample of the slope (mean, t interval), and three planned
tests, Holm-corrected, ask whether SP's slope and μP's differ from 0 (one-sample t) and from
each other (paired by seed: both parametrisations share a seed's initialisation at μP's base
width, where they are the same model).

With ``--tune`` and ``--tuned`` (``tuned.md``, ``tuned.png``): μP's base multipliers tuned at
the base width as Tensor Programs V does, then transferred. ``--tune`` holds the base-width
grid over α_output (``model.mup_output_mult``), α_attn (``model.mup_attn_mult``) and the
learning rate on a tuning seed that reports nothing; its best cell is the choice. ``--tuned``
holds μP with the chosen multipliers at every width, rate and reporting seed. Five planned
tests, paired by seed and Holm-corrected: the tuned optimum's slope against width (0: it
transfers); at the transferred rate (the tuning seeds' choice), the widest model against
the base width ("wider is better"); the widest model tuned against untuned μP at its own
transferred rate (the tuning seeds' best at multipliers 1) and at the same rate (the
multipliers alone); and against SP at the widest width at SP's best rate on the grid (chosen
on the reporting seeds themselves, so biased towards SP).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, linear_regression

from attnlab.compare import holm, t_interval
from attnlab.compare.runs import load_runs
from attnlab.errors import UserError

METRIC = "val/loss"


@dataclass
class Grid:
    """One parametrisation's runs: the mean final loss and the number of runs of each cell."""

    losses: dict[int, dict[float, float]]  # {width: {lr: mean final val/loss, inf if any failed}}
    counts: dict[int, dict[float, int]]  # {width: {lr: runs}}
    steps: set[int]  # the runs' trainer.max_steps
    seeds: dict[int, dict[int, dict[float, float]]]  # {seed: {width: {lr: final val/loss}}}


def grid(sweeps: list[str]) -> Grid:
    """Every run of ``sweeps`` in its (width, lr) cell, averaged over the cell's seeds."""
    cells: dict[int, dict[float, list[float]]] = {}
    seeds: dict[int, dict[int, dict[float, float]]] = {}
    steps = set()
    for run in load_runs(sweeps):
        width = int(run.config["model"]["d_model"])
        lr = float(run.config["optim"]["lr"])
        steps.add(int(run.config["trainer"]["max_steps"]))
        loss = run.metrics.get(METRIC, math.inf) if run.completed else math.inf
        cells.setdefault(width, {}).setdefault(lr, []).append(loss)
        seeds.setdefault(int(run.config["seed"]), {}).setdefault(width, {})[lr] = loss
    losses = {
        w: {lr: fmean(runs) if all(map(math.isfinite, runs)) else math.inf
            for lr, runs in sorted(row.items())}
        for w, row in sorted(cells.items())
    }  # fmt: skip
    counts = {w: {lr: len(runs) for lr, runs in sorted(row.items())} for w, row in cells.items()}
    seeds = {seed: dict(sorted(rows.items())) for seed, rows in sorted(seeds.items())}
    return Grid(losses, counts, steps, seeds)


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


def complete_seeds(cells: Grid) -> dict[int, dict[int, dict[float, float]]]:
    """The seeds that ran every (width, lr) cell of the grid: each one's rows."""
    def complete(rows: dict[int, dict[float, float]]) -> bool:
        return all(set(rows.get(w, {})) == set(row) for w, row in cells.losses.items())

    return {seed: rows for seed, rows in cells.seeds.items() if complete(rows)}


def interval(values: list[float]) -> str:
    low, high = t_interval(values) or (math.nan, math.nan)
    return f"[{low:.3f}, {high:.3f}]" if low != high else f"[{low:.3f}]"


def octave_interval(log2s: list[float]) -> str:
    """A learning rate's geometric mean and its t interval, from log2 values."""
    low, high = t_interval(log2s) or (math.nan, math.nan)
    return f"{2 ** fmean(log2s):.3g} [{2**low:.3g}, {2**high:.3g}]"


def per_seed(name: str, cells: Grid) -> tuple[list[str], list[float]]:
    """Each width's optimum over seeds (each seed's own parabola) and each seed's slope."""
    seeds = complete_seeds(cells)
    rows = [
        f"#### {name}: each seed's fitted optimum (seeds {', '.join(map(str, seeds))})",
        "",
        "| width | fitted optimum, geometric mean [95 % t CI] | log2 optimum per seed "
        "| best loss per seed, mean [95 % t CI] | at the grid's edge |",
        "|---|---|---|---|---|",
    ]
    log2_optima: dict[int, list[float]] = {}
    for width in cells.losses:
        fits = [optimum(rows_[width]) for rows_ in seeds.values()]
        lrs = sorted(cells.losses[width])
        edge = sum(best in (lrs[0], lrs[-1]) for best, _ in fits)
        log2_optima[width] = [math.log2(fitted) for _, fitted in fits]
        bests = [min(rows_[width].values()) for rows_ in seeds.values()]
        rows.append(
            f"| {width} | {octave_interval(log2_optima[width])} | "
            + ", ".join(f"{v:+.2f}" for v in log2_optima[width])
            + f" | {fmean(bests):.3f} {interval(bests)} | {edge} of {len(fits)} |"
        )
    widths = list(cells.losses)
    slopes = [
        linear_regression([math.log2(w) for w in widths],
                          [log2_optima[w][k] for w in widths]).slope
        for k in range(len(seeds))
    ]  # fmt: skip
    rows += [
        "",
        f"{name}: slope of log2(fitted optimum) against log2(width) over the {len(widths)} "
        f"widths, one per seed: {', '.join(f'{v:+.2f}' for v in slopes)}; mean "
        f"{fmean(slopes):+.2f} {interval(slopes)} (95 % t CI).",
    ]
    return rows, slopes


def slope_tests(slopes: dict[str, list[float]]) -> list[str]:
    """SP's and μP's slopes against 0, and against each other paired by seed; Holm over 3."""
    from scipy import stats

    (a, sa), (b, sb) = slopes.items()
    tests = [
        (f"{a} slope ≠ 0", fmean(sa), stats.ttest_1samp(sa, 0.0).pvalue),
        (f"{b} slope ≠ 0", fmean(sb), stats.ttest_1samp(sb, 0.0).pvalue),
        (f"{b} − {a} slope (paired by seed)", fmean(sb) - fmean(sa),
         stats.ttest_rel(sb, sa).pvalue),
    ]  # fmt: skip
    adjusted = holm([p for _, _, p in tests])
    lines = ["| planned test | estimate | p | Holm p (over 3) |", "|---|---|---|---|"]
    for (label, estimate, p), q in zip(tests, adjusted, strict=True):
        lines.append(f"| {label} | {estimate:+.2f} | {p:.2g} | {q:.2g} |")
    return lines


@dataclass(frozen=True)
class Choice:
    """The tuning seed's best cell at the base width: the multipliers and the rate."""

    output: float
    attn: float
    lr: float
    loss: float
    width: int


def multiplier(run: object, key: str) -> float:
    return float(run.config["model"].get(key, 1.0))  # type: ignore[attr-defined]


def tune(sweeps: list[str]) -> tuple[list[str], Choice, Choice]:
    """The base-width grid over (α_output, α_attn, lr): a table of each multiplier pair's best
    rate and loss, the choice (the best cell) and the untuned pair's (1, 1) best."""
    runs: dict[tuple[float, float], dict[float, dict[int, float]]] = {}
    widths = set()
    for run in load_runs(sweeps):
        pair = (multiplier(run, "mup_output_mult"), multiplier(run, "mup_attn_mult"))
        loss = run.metrics.get(METRIC, math.inf) if run.completed else math.inf
        lr = float(run.config["optim"]["lr"])
        runs.setdefault(pair, {}).setdefault(lr, {})[int(run.config["seed"])] = loss
        widths.add(int(run.config["model"]["d_model"]))
    seeds = sorted({seed for row in runs.values() for cell in row.values() for seed in cell})
    if len(widths) != 1 or any(sorted(cell) != seeds for row in runs.values()
                               for cell in row.values()):  # fmt: skip
        raise SystemExit(f"error: --tune holds widths {sorted(widths)}, not every cell on seeds "
                         f"{seeds}; give the sweeps of one width (the base), every cell on the "
                         "same tuning seeds")
    (width,) = widths
    cells = {pair: {lr: fmean(cell.values()) if all(map(math.isfinite, cell.values()))
                    else math.inf for lr, cell in row.items()}
             for pair, row in runs.items()}  # fmt: skip

    def best(pair: tuple[float, float]) -> Choice:
        row = cells[pair]
        lr = min(row, key=row.__getitem__)
        return Choice(pair[0], pair[1], lr, row[lr], width)

    choice = min((best(pair) for pair in cells), key=lambda c: c.loss)
    outs = sorted({o for o, _ in cells})
    attns = sorted({a for _, a in cells})
    lrs = sorted({lr for row in cells.values() for lr in row})
    lines = [
        f"### μP's multipliers tuned at the base width {width} (tuning seeds "
        f"{', '.join(map(str, seeds))})",
        "",
        "Each pair's final validation loss at its best rate (the rate in brackets), over the "
        f"rates {', '.join(f'{lr:.3g}' for lr in lrs)}"
        + (f", each the mean of the {len(seeds)} tuning seeds" if len(seeds) > 1 else "")
        + "; the best cell in bold.",
        "",
        "| α_output \\ α_attn | " + " | ".join(f"{a:g}" for a in attns) + " |",
        "|---|" + "---|" * len(attns),
    ]
    for out in outs:
        shown = []
        for attn in attns:
            if (out, attn) not in cells:
                shown.append("—")
                continue
            c = best((out, attn))
            text = "div." if math.isinf(c.loss) else f"{c.loss:.3f} ({c.lr:.3g})"
            shown.append(f"**{text}**" if c == choice else text)
        lines.append(f"| {out:g} | " + " | ".join(shown) + " |")
    edges = [name for name, value, grid_ in (("α_output", choice.output, outs),
                                             ("α_attn", choice.attn, attns),
                                             ("the rate", choice.lr, lrs))
             if value in (grid_[0], grid_[-1])]  # fmt: skip
    untuned = best((1.0, 1.0)) if (1.0, 1.0) in cells else None
    lines += [
        "",
        f"Chosen: α_output = {choice.output:g}, α_attn = {choice.attn:g}, lr = {choice.lr:.3g} "
        f"(loss {choice.loss:.3f}); at the grid's edge: "
        + (", ".join(edges) if edges else "none") + ".",
    ]
    if untuned is None:
        raise SystemExit("error: --tune lacks the untuned pair α_output = α_attn = 1; "
                         "include 1 in both multipliers' grids")
    lines.append(f"Untuned (α_output = α_attn = 1): lr = {untuned.lr:.3g} "
                 f"(loss {untuned.loss:.3f}), {untuned.loss - choice.loss:.3f} above the choice.")
    return lines, choice, untuned


def at_rate(cells: Grid, width: int, lr: float) -> dict[int, float]:
    """Each seed's final loss at one (width, rate) cell."""
    return {seed: rows[width][lr] for seed, rows in cells.seeds.items()
            if lr in rows.get(width, {})}  # fmt: skip


def tuned_tests(tuned: Grid, slopes: list[float], choice: Choice, untuned: Choice,
                mup: Grid, sp: Grid) -> list[str]:
    """The five planned tests of the tuned transfer, paired by seed, Holm over 5."""
    from scipy import stats

    widest = max(tuned.losses)
    sp_rate = optimum(sp.losses[widest])[0]
    arms = {
        "tuned at the base width": at_rate(tuned, choice.width, choice.lr),
        "tuned at the widest": at_rate(tuned, widest, choice.lr),
        "untuned at the widest": at_rate(mup, widest, untuned.lr),
        "untuned at the widest, tuned rate": at_rate(mup, widest, choice.lr),
        "SP at the widest": at_rate(sp, widest, sp_rate),
    }
    missing = [name for name, values in arms.items() if len(values) < 2]
    if missing:
        raise SystemExit(f"error: fewer than 2 seeds for {', '.join(missing)}: the tuned "
                         "sweep needs the chosen rate at every width, and the untuned μP "
                         "sweeps the untuned choice's rate")

    def paired(a: str, b: str) -> tuple[float, float, int]:
        common = sorted(set(arms[a]) & set(arms[b]))
        x, y = [arms[a][s] for s in common], [arms[b][s] for s in common]
        diff = [u - v for u, v in zip(x, y, strict=True)]
        return fmean(diff), stats.ttest_rel(x, y).pvalue, len(common)

    rows = [
        (f"tuned μP's slope ≠ 0 (n = {len(slopes)})", fmean(slopes),
         stats.ttest_1samp(slopes, 0.0).pvalue),
    ]  # fmt: skip
    for label, a, b in (
        (f"width {widest} − width {choice.width}, tuned μP at lr {choice.lr:.3g}",
         "tuned at the widest", "tuned at the base width"),
        (f"tuned − untuned μP at width {widest} (lr {choice.lr:.3g} against "
         f"{untuned.lr:.3g})", "tuned at the widest", "untuned at the widest"),
        (f"tuned − untuned μP at width {widest}, both at lr {choice.lr:.3g}",
         "tuned at the widest", "untuned at the widest, tuned rate"),
        (f"tuned μP − SP at width {widest} (lr {choice.lr:.3g} against SP's best "
         f"{sp_rate:.3g})", "tuned at the widest", "SP at the widest"),
    ):  # fmt: skip
        estimate, p, n = paired(a, b)
        rows.append((f"{label} (n = {n})", estimate, p))
    adjusted = holm([p for _, _, p in rows])
    lines = [f"| planned test (paired by seed) | estimate | p | Holm p (over {len(rows)}) |",
             "|---|---|---|---|"]  # fmt: skip
    for (label, estimate, p), q in zip(rows, adjusted, strict=True):
        lines.append(f"| {label} | {estimate:+.3f} | {p:.2g} | {q:.2g} |")
    lines += ["", "Each arm's final loss per seed, mean [95 % t CI]:", ""]
    lines += ["| arm | rate | loss per seed | mean [95 % t CI] |", "|---|---|---|---|"]
    rates = {"tuned at the base width": choice.lr, "tuned at the widest": choice.lr,
             "untuned at the widest": untuned.lr,
             "untuned at the widest, tuned rate": choice.lr, "SP at the widest": sp_rate}
    for name, values in arms.items():
        losses = list(values.values())
        lines.append(f"| {name} | {rates[name]:.3g} | "
                     + ", ".join(f"{v:.3f}" for v in losses)
                     + f" | {fmean(losses):.3f} {interval(losses)} |")
    return lines


def tuned_report(args: argparse.Namespace, grids: dict[str, Grid]) -> list[str]:
    """tuned.md: the base-width tuning, the tuned transfer grid and its planned tests."""
    lines, choice, untuned = tune(args.tune)
    tuned = grid(args.tuned)
    used = {(multiplier(run, "mup_output_mult"), multiplier(run, "mup_attn_mult"),
             int(run.config["model"].get("mup_base_width", 0))) for run in load_runs(args.tuned)}
    if used != {(choice.output, choice.attn, choice.width)}:  # fmt: skip
        shown = "; ".join(f"α_output {o:g}, α_attn {a:g}, base width {w}" for o, a, w in used)
        raise SystemExit(f"error: the --tuned runs use {shown}, not the tuning's choice (α_output "
                         f"{choice.output:g}, α_attn {choice.attn:g} at base width "
                         f"{choice.width}): rerun them at the choice, or give the tuning "
                         "that chose theirs")
    name = f"μP, α_output = {choice.output:g}, α_attn = {choice.attn:g}"
    lines = ["## μP with its multipliers tuned at the base width", "", *lines, ""]
    lines += table(name, tuned) + [""]
    if len(complete_seeds(tuned)) < 2 or len(tuned.losses) < 2:
        raise SystemExit("error: --tuned needs at least 2 seeds at every width and rate")
    rows, slopes = per_seed(name, tuned)
    lines += rows + [""]
    lines += tuned_tests(tuned, slopes, choice, untuned, grids["μP"], grids["SP"]) + [""]
    plot({"μP, multipliers 1": grids["μP"].losses, name: tuned.losses},
         args.out / "tuned.png")
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
    if argv[:1] == ["--choose"]:
        try:
            _, choice, _ = tune(argv[1:])
        except UserError as error:  # no tuning runs where run.sh looks
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"{choice.output:g} {choice.attn:g}")
        return 0
    parser = argparse.ArgumentParser(prog="transfer.py")
    parser.add_argument("--sp", nargs="+", required=True)
    parser.add_argument("--mup", nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tune", nargs="+", help="μP's base-width multiplier × rate grid")
    parser.add_argument("--tuned", nargs="+", help="μP at the chosen multipliers, every width")
    args = parser.parse_args(argv)
    if bool(args.tune) != bool(args.tuned):
        parser.error("--tune and --tuned go together")
    grids = {"SP": grid(args.sp), "μP": grid(args.mup)}
    steps = "/".join(str(n) for n in sorted(set.union(*(g.steps for g in grids.values()))))
    seeds = runs_per_cell(list(grids.values()))
    lines = [f"## Learning-rate transfer: {steps} steps, {seeds}", ""]
    for name, cells in grids.items():
        lines += table(name, cells) + [""]
    if all(len(complete_seeds(cells)) >= 2 and len(cells.losses) >= 2 for cells in grids.values()):
        lines += ["### Each seed's optimum", ""]
        slopes = {}
        for name, cells in grids.items():
            rows, slopes[name] = per_seed(name, cells)
            lines += rows + [""]
        lines += slope_tests(slopes) + [""]
    (args.out / "transfer.md").write_text("\n".join(lines), encoding="utf-8")
    plot({name: cells.losses for name, cells in grids.items()}, args.out / "transfer.png")
    print("\n".join(lines))
    if args.tune:
        tuned = tuned_report(args, grids)
        (args.out / "tuned.md").write_text("\n".join(tuned), encoding="utf-8")
        print("\n".join(tuned))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
