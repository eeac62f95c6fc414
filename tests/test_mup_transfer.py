"""experiments/mup_transfer/transfer.py: a (width, learning rate) cell with several seeds is
their mean, and the table says how many runs each cell holds."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from attnlab.callbacks.summary import write_summary
from conftest import REPO_ROOT


@pytest.fixture(scope="module")
def transfer() -> Iterator[ModuleType]:
    """The study's script, imported as a module (its dataclass needs it in sys.modules)."""
    path = REPO_ROOT / "experiments" / "mup_transfer" / "transfer.py"
    spec = importlib.util.spec_from_file_location("mup_transfer_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def sweep(root: Path, runs: list[tuple[int, float, int, float | None]]) -> str:
    """A sweep of (width, lr, seed, final val/loss or None for a diverged run)."""
    for job, (width, lr, seed, loss) in enumerate(runs):
        write_summary(
            root / str(job), status="completed" if loss is not None else "failed",
            config={"model": {"d_model": width}, "optim": {"lr": lr}, "seed": seed,
                    "trainer": {"max_steps": 400}},
            metrics={} if loss is None else {"val/loss": loss}, task="lm",
        )  # fmt: skip
    return str(root)


def test_a_cell_with_several_seeds_is_their_mean(transfer: ModuleType, tmp_path: Path) -> None:
    cells = transfer.grid([sweep(tmp_path, [(32, 0.01, 0, 2.0), (32, 0.01, 1, 2.2),
                                            (32, 0.02, 0, 2.5), (32, 0.02, 1, 2.3)])])  # fmt: skip
    assert cells.losses == {32: {0.01: pytest.approx(2.1), 0.02: pytest.approx(2.4)}}
    assert cells.counts == {32: {0.01: 2, 0.02: 2}}


def test_a_cell_with_a_diverged_seed_is_diverged(transfer: ModuleType, tmp_path: Path) -> None:
    cells = transfer.grid([sweep(tmp_path, [(32, 0.01, 0, 2.0), (32, 0.01, 1, None)])])
    assert cells.losses == {32: {0.01: float("inf")}}


@pytest.mark.parametrize(
    ("runs", "shown", "said"),
    [
        ([(32, 0.01, 0, 2.0), (32, 0.01, 1, 2.2), (32, 0.02, 0, 2.5), (32, 0.02, 1, 2.3)],
         "| 32 | **2.100** | 2.400 |", "Runs per cell (seeds, averaged): 2 in every cell."),
        ([(32, 0.01, 0, 2.0), (32, 0.01, 1, 2.2), (32, 0.02, 0, 2.5)],
         "| 32 | **2.100** (n=2) | 2.500 (n=1) |", "Runs per cell (seeds, averaged): 1 to 2"),
    ],
    ids=["even", "uneven"],
)  # fmt: skip
def test_the_table_says_how_many_runs_each_cell_holds(
    transfer: ModuleType, tmp_path: Path, runs: list, shown: str, said: str
) -> None:
    lines = transfer.table("SP", transfer.grid([sweep(tmp_path, runs)]))
    assert any(line.startswith(shown) for line in lines), lines
    assert any(line.startswith(said) for line in lines), lines


@pytest.mark.parametrize(("optima", "slope"), [({32: 0.016, 64: 0.008, 128: 0.004}, -1.0),
                                               ({32: 0.01, 64: 0.01, 256: 0.01}, 0.0)])  # fmt: skip
def test_the_transfer_slope_reads_every_width(
    transfer: ModuleType, optima: dict[int, float], slope: float
) -> None:  # fmt: skip
    assert transfer.transfer_slope(optima) == pytest.approx(slope)
