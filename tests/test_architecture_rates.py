"""experiments/architecture_comparison/rates.py: each SST-2 architecture's rate is the best mean,
over the tuning seeds, of each run's best validation accuracy; an incomplete grid is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from attnlab.callbacks.summary import write_summary
from attnlab.errors import UserError
from conftest import study_script

Row = tuple[str, float, int, "list[float] | None"]  # experiment, lr, seed, val/acc per validation


@pytest.fixture(scope="module")
def rates() -> Iterator[ModuleType]:
    """The study's script, imported as a module."""
    with study_script(
        "experiments/architecture_comparison/rates.py", "architecture_rates_script"
    ) as module:
        yield module


def sweep(root: Path, runs: list[Row], monitor: str = "val/acc", mode: str = "max") -> str:
    """A sweep of runs validated every 250 steps, each checkpoint chosen by ``monitor``;
    None: a run that did not complete."""
    for job, (experiment, lr, seed, values) in enumerate(runs):
        config = {
            "experiment_name": experiment,
            "optim": {"lr": lr},
            "seed": seed,
            "callbacks": {"model_checkpoint": {"monitor": monitor, "mode": mode}},
        }
        metrics = {} if values is None else {monitor: values[-1]}
        write_summary(root / str(job), status="failed" if values is None else "completed",
                      config=config, task="classification", metrics=metrics)  # fmt: skip
        rows = [f"{250 * (i + 1)},{value}" for i, value in enumerate(values or [])]
        (root / str(job) / "metrics.csv").write_text(f"step,{monitor}\n" + "\n".join(rows) + "\n")
    return str(root)


# A: its last validations favour 1e-3 (0.78 vs 0.76), its best ones 3e-3 (0.83 vs 0.80)
GRID: list[Row] = [
    ("A", 1e-3, 100, [0.70, 0.78]), ("A", 1e-3, 101, [0.80, 0.78]),
    ("A", 3e-3, 100, [0.82, 0.76]), ("A", 3e-3, 101, [0.84, 0.76]),
    ("A", 1e-2, 100, [0.60, 0.65]), ("A", 1e-2, 101, [0.60, 0.65]),
    ("B", 1e-3, 100, [0.75, 0.81]), ("B", 1e-3, 101, [0.79, 0.77]),
    ("B", 3e-3, 100, [0.70, 0.72]), ("B", 3e-3, 101, None),
    ("B", 1e-2, 100, [0.50, 0.50]), ("B", 1e-2, 101, [0.50, 0.50]),
]  # fmt: skip


def test_the_choice_is_the_best_mean_of_the_best_validations(
    rates: ModuleType, tmp_path: Path
) -> None:  # fmt: skip
    cells = rates.grid(rates.load_runs([sweep(tmp_path, GRID)]))
    assert cells.rates == [1e-3, 3e-3, 1e-2] and cells.seeds == [100, 101]
    assert cells.score("A", 1e-3) == pytest.approx(0.79)  # (0.78 + 0.80) / 2, not the last 0.78
    assert cells.score("A", 3e-3) == pytest.approx(0.83)
    assert cells.choice("A") == 3e-3 and not cells.at_edge("A")
    # B's run at 3e-3 did not complete: that rate cannot be chosen, and 1e-3 is at an edge
    assert cells.score("B", 3e-3) is None
    assert cells.choice("B") == 1e-3 and cells.at_edge("B")
    lines = rates.table(cells)
    assert "| A | 0.7900 (0.7800 / 0.8000) | **0.8300 (0.8200 / 0.8400)** | 0.6500 " \
           "(0.6500 / 0.6500) | 0.003 |" in lines  # fmt: skip
    assert "| B | **0.8000 (0.8100 / 0.7900)** | 1 of 2 failed | 0.5000 (0.5000 / 0.5000) " \
           "| 0.001 (edge) |" in lines  # fmt: skip


def test_a_loss_monitor_chooses_the_lowest_mean_of_the_best_validations(
    rates: ModuleType, tmp_path: Path
) -> None:  # fmt: skip
    runs: list[Row] = [
        ("A", 1e-3, 100, [4.0, 3.5]), ("A", 3e-3, 100, [3.2, 3.6]), ("A", 1e-2, 100, [3.9, 3.8]),
    ]  # fmt: skip
    cells = rates.grid(rates.load_runs([sweep(tmp_path, runs, monitor="val/loss", mode="min")]))
    assert (cells.monitor, cells.mode) == ("val/loss", "min")
    assert cells.score("A", 3e-3) == pytest.approx(3.2)  # its best, not its last 3.6
    assert cells.choice("A") == 3e-3
    assert rates.table(cells)[0].endswith("best val/loss on the tuning seeds (100)")


def test_choose_prints_each_rate_with_the_architectures_that_chose_it(
    rates: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # fmt: skip
    path = sweep(tmp_path, GRID + [("C", lr, seed, [0.7]) for lr in (1e-3, 3e-3, 1e-2)
                                   for seed in (100, 101)])  # fmt: skip
    assert rates.main(["--choose", path]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["0.001 B,C", "0.003 A"]  # C ties everywhere: the smaller rate
    assert err.startswith("warning: B chose lr 0.001, an end of the grid") and "widen" in err


@pytest.mark.parametrize(
    ("runs", "said"),
    [
        (GRID[:-1], "B has no run at lr 0.01 on seed(s) 101: the grid must be full"),
        (GRID + GRID[:1], "a second run of A at lr 0.001, seed 100"),
    ],
    ids=["a missing seed", "a run given twice"],
)
def test_a_grid_that_is_not_full_is_refused(
    rates: ModuleType, tmp_path: Path, runs: list[Row], said: str
) -> None:  # fmt: skip
    with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
        rates.grid(rates.load_runs([sweep(tmp_path, runs)]))


def test_choose_without_tuning_runs_is_one_line_and_exit_2(
    rates: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # fmt: skip
    assert rates.main(["--choose", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
