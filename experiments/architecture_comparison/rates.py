"""Each architecture's learning rate, chosen on seeds that report nothing.

    rates.py SWEEP [SWEEP ...]            the grid as a markdown table (rates_<task>.md)
    rates.py --choose SWEEP [SWEEP ...]   one line per chosen rate, "RATE EXPERIMENT,…", for run.sh

Every run is read at its best validation: the checkpoint its test would use, by the
presets' ``callbacks.model_checkpoint`` monitor (SST-2: val/acc, max, on whole held-out
sentences; translation: val/loss, min). An architecture's score at a rate is the mean of
that value over the tuning seeds, and it chooses the rate with the best score. The grid must
be full: every architecture has every rate on the same seeds, or the table is refused. A run
that did not complete (diverged included) makes its rate unchoosable, and the table shows it.
A choice at an edge of the grid is flagged: the optimum may lie outside it (widen the grid).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from statistics import fmean

from attnlab.compare.compute import monitor_of, runs_at_best
from attnlab.compare.grouping import lookup
from attnlab.compare.runs import Run, load_runs
from attnlab.errors import UserError


@dataclass
class Grid:
    """The monitor at each run's best validation per (experiment, rate), one value per
    tuning seed; None for a run that did not complete."""

    monitor: str
    mode: str  # "max" or "min"
    rates: list[float]
    seeds: list[int]
    cells: dict[str, dict[float, dict[int, float | None]]]

    def score(self, experiment: str, rate: float) -> float | None:
        """The mean over the seeds, or None when a run of the cell did not complete."""
        values = list(self.cells[experiment][rate].values())
        return None if any(v is None for v in values) else fmean(values)  # type: ignore[arg-type]

    def choice(self, experiment: str) -> float:
        """The rate of the best score (the smaller rate on a tie)."""
        sign = 1 if self.mode == "max" else -1
        scored = [
            (sign * s, -r) for r in self.rates if (s := self.score(experiment, r)) is not None
        ]
        if not scored:
            raise UserError(f"{experiment}: no rate of the grid has every tuning run completed")
        return -max(scored)[1]

    def at_edge(self, experiment: str) -> bool:
        rate = self.choice(experiment)
        return len(self.rates) < 3 or rate in (self.rates[0], self.rates[-1])


def grid(runs: list[Run]) -> Grid:
    """The runs as a full experiment × rate × seed grid; a missing cell is a UserError."""
    completed = [r for r in runs if r.completed]
    if not completed:
        raise UserError("no run of the grid completed: nothing to choose from")
    monitor, mode = monitor_of(completed[0])
    best = runs_at_best(completed, [monitor])[0]  # refuses runs of different monitors
    at_best = {id(r): b.metrics.get(f"{monitor} @ best {monitor}")
               for r, b in zip(completed, best, strict=True)}  # fmt: skip
    cells: dict[str, dict[float, dict[int, float | None]]] = {}
    for run in runs:
        experiment = lookup(run.config, "experiment_name")
        rate, seed = float(lookup(run.config, "optim.lr")), int(lookup(run.config, "seed"))
        cell = cells.setdefault(str(experiment), {}).setdefault(rate, {})
        if seed in cell:
            raise UserError(f"{run.path}: a second run of {experiment} at lr {rate:g}, seed "
                            f"{seed}; give each sweep once")  # fmt: skip
        cell[seed] = at_best.get(id(run))
    rates = sorted({rate for by_rate in cells.values() for rate in by_rate})
    seeds = sorted({seed for by_rate in cells.values() for c in by_rate.values() for seed in c})
    for experiment, by_rate in cells.items():
        for rate in rates:
            missing = sorted(set(seeds) - set(by_rate.get(rate, {})))
            if missing:
                raise UserError(f"{experiment} has no run at lr {rate:g} on seed(s) "
                                f"{', '.join(map(str, missing))}: the grid must be full — "
                                f"train the missing runs (resume=true) or drop that "
                                f"seed or rate")  # fmt: skip
    return Grid(monitor, mode, rates, seeds, dict(sorted(cells.items())))


def table(cells: Grid) -> list[str]:
    seeds = ", ".join(map(str, cells.seeds))
    lines = [
        f"## Learning rate per architecture: best {cells.monitor} on the tuning seeds ({seeds})",
        "",
        "| experiment | " + " | ".join(f"lr {r:g}" for r in cells.rates) + " | chosen |",
        "| --- | " + " | ".join("---:" for _ in cells.rates) + " | ---: |",
    ]
    for experiment in cells.cells:
        chosen = cells.choice(experiment)
        row = []
        for rate in cells.rates:
            score = cells.score(experiment, rate)
            if score is None:
                failed = sum(v is None for v in cells.cells[experiment][rate].values())
                row.append(f"{failed} of {len(cells.seeds)} failed")
                continue
            by_seed = cells.cells[experiment][rate]
            values = " / ".join(f"{by_seed[seed]:.4f}" for seed in cells.seeds)
            text = f"{score:.4f} ({values})" if len(cells.seeds) > 1 else f"{score:.4f}"
            row.append(f"**{text}**" if rate == chosen else text)
        edge = " (edge)" if cells.at_edge(experiment) else ""
        lines.append(f"| {experiment} | " + " | ".join(row) + f" | {chosen:g}{edge} |")
    lines += [
        "",
        f"Each cell: the mean over the tuning seeds of each run's best {cells.monitor} "
        f"({cells.mode}; the checkpoint its test would use), then each seed's value in seed "
        f"order; bold: the chosen rate, the best mean (the smaller rate on a tie). (edge): the "
        f"choice is at an end of the grid, so the optimum may lie outside it. The tuning seeds "
        f"report nothing.",
    ]
    return lines


def main(argv: list[str]) -> int:
    choose = argv[:1] == ["--choose"]
    paths = argv[1:] if choose else argv
    if not paths or any(p.startswith("-") for p in paths):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    try:
        cells = grid(load_runs(paths))
        if choose:
            by_rate: dict[float, list[str]] = {}
            for experiment in cells.cells:
                by_rate.setdefault(cells.choice(experiment), []).append(experiment)
            for rate, experiments in sorted(by_rate.items()):
                print(f"{rate:g} {','.join(experiments)}")
            for experiment in filter(cells.at_edge, cells.cells):
                print(f"warning: {experiment} chose lr {cells.choice(experiment):g}, an end of "
                      f"the grid: its optimum may lie outside it (widen the grid)",
                      file=sys.stderr)  # fmt: skip
            return 0
        print("\n".join(table(cells)))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
