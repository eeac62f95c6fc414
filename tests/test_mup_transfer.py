"""experiments/mup_transfer/transfer.py: a (width, learning rate) cell with several seeds is
their mean, and the table says how many runs each cell holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from attnlab.callbacks.summary import write_summary
from conftest import study_script


@pytest.fixture(scope="module")
def transfer() -> Iterator[ModuleType]:
    """The study's script, imported as a module."""
    with study_script("experiments/mup_transfer/transfer.py", "mup_transfer_script") as module:
        yield module


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


def parabolas(root: Path, centres: dict[int, list[float]]) -> str:
    """A sweep whose every (width, seed) row is the parabola 2 + 0.1·(log2 lr − centre)² over
    lr = 2^-9 … 2^-3: each row's fitted optimum is exactly 2^centre."""
    runs = [(width, 2.0**e, seed, 2.0 + 0.1 * (e - centre) ** 2)
            for width, per_seed in centres.items()
            for seed, centre in enumerate(per_seed) for e in range(-9, -2)]  # fmt: skip
    return sweep(root, runs)


def test_each_seed_gets_its_own_optimum_and_slope(transfer: ModuleType, tmp_path: Path) -> None:
    cells = transfer.grid([parabolas(tmp_path, {32: [-6.0, -6.5, -5.5], 64: [-7.0, -7.4, -6.7]})])
    rows, slopes = transfer.per_seed("SP", cells)
    assert slopes == pytest.approx([-1.0, -0.9, -1.2])
    # log2 optima -6, -6.5, -5.5: mean -6 (2^-6 = 0.0156), t CI -6 ± 4.303·0.5/√3 = ±1.242
    assert any(row.startswith("| 32 | 0.0156 [0.00661, 0.037] | -6.00, -6.50, -5.50 |")
               for row in rows), rows  # fmt: skip


def test_the_slopes_are_tested_against_0_and_paired_by_seed(transfer: ModuleType) -> None:
    lines = transfer.slope_tests({"SP": [-1.0, -0.9, -1.2], "μP": [0.1, -0.1, 0.05]})
    assert lines[2].startswith("| SP slope ≠ 0 | -1.03 |")
    assert lines[4].startswith("| μP − SP slope (paired by seed) | +1.05 |")
    holm_p = [float(line.split("|")[4]) for line in lines[2:]]
    assert holm_p[0] < 0.05 and holm_p[1] > 0.05 and holm_p[2] < 0.05


def tune_sweep(root: Path, runs: list[tuple[float, float, float, int, float]]) -> str:
    """A base-width sweep of (α_output, α_attn, lr, seed, final val/loss) at width 32."""
    for job, (output, attn, lr, seed, loss) in enumerate(runs):
        write_summary(
            root / str(job), status="completed",
            config={"model": {"d_model": 32, "mup_output_mult": output, "mup_attn_mult": attn},
                    "optim": {"lr": lr}, "seed": seed, "trainer": {"max_steps": 400}},
            metrics={"val/loss": loss}, task="lm",
        )  # fmt: skip
    return str(root)


TUNE_RUNS = [(1, 1, 0.01, 100, 2.2), (1, 1, 0.01, 101, 2.0), (1, 1, 0.02, 100, 2.3),
             (1, 1, 0.02, 101, 2.3), (2, 1, 0.01, 100, 2.0), (2, 1, 0.01, 101, 2.1),
             (2, 1, 0.02, 100, 1.9), (2, 1, 0.02, 101, 2.3)]  # fmt: skip


def test_the_base_width_tuning_chooses_the_best_mean_over_the_tuning_seeds(
    transfer: ModuleType, tmp_path: Path
) -> None:
    lines, choice, untuned = transfer.tune([tune_sweep(tmp_path, TUNE_RUNS)])
    # (2, 1) at 0.01: (2.0 + 2.1)/2 = 2.05 beats its 0.02 (2.1) and (1, 1)'s best, 2.1 at 0.01
    assert (choice.output, choice.attn, choice.lr, choice.width) == (2, 1, 0.01, 32)
    assert choice.loss == pytest.approx(2.05)
    assert (untuned.lr, untuned.loss) == (0.01, pytest.approx(2.1))
    assert "| 2 | **2.050 (0.01)** |" in lines
    assert "at the grid's edge: α_output, α_attn, the rate." in lines[-2]
    assert lines[-1].endswith("0.050 above the choice.")


def test_a_tuning_cell_missing_a_seed_is_refused(transfer: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not every cell on seeds"):
        transfer.tune([tune_sweep(tmp_path, TUNE_RUNS[:-1])])


def test_the_tuned_transfer_is_tested_paired_by_seed(transfer: ModuleType) -> None:
    def grid(rows: dict[int, dict[int, dict[float, float]]]) -> object:
        widths = {w for per_seed in rows.values() for w in per_seed}
        losses = {w: {lr: sum(r[w][lr] for r in rows.values()) / len(rows) for lr in
                      next(iter(rows.values()))[w]} for w in sorted(widths)}  # fmt: skip
        return transfer.Grid(losses, {w: dict.fromkeys(row, len(rows))
                                      for w, row in losses.items()}, {400}, rows)  # fmt: skip

    tuned = grid({0: {32: {0.02: 2.1}, 256: {0.02: 1.9}}, 1: {32: {0.02: 2.2}, 256: {0.02: 2.0}},
                  2: {32: {0.02: 2.0}, 256: {0.02: 1.7}}})  # fmt: skip
    mup = grid({s: {256: {0.01: 2.0 + s / 10, 0.02: 2.5}} for s in range(3)})
    sp = grid({s: {256: {0.002: 1.8, 0.004: 1.9 + s / 10}} for s in range(3)})
    choice = transfer.Choice(4, 2, 0.02, 2.0, 32)
    untuned = transfer.Choice(1, 1, 0.01, 2.1, 32)
    lines = transfer.tuned_tests(tuned, [0.1, -0.1, 0.0], choice, untuned, mup, sp)
    # widest − base: −0.2, −0.2, −0.3: mean −0.233, t = −0.233/(0.0577/√3) = −7.0, 2 df: p 0.0198
    assert lines[3].startswith(
        "| width 256 − width 32, tuned μP at lr 0.02 (n = 3) | -0.233 | 0.02 |")
    # tuned − untuned at 256: 1.9−2.0, 2.0−2.1, 1.7−2.2; tuned − SP at SP's best rate, 0.002
    assert "(lr 0.02 against 0.01) (n = 3) | -0.233 |" in lines[4]
    # the multipliers alone, at the tuned rate 0.02: 1.9−2.5, 2.0−2.5, 1.7−2.5
    assert lines[5].startswith("| tuned − untuned μP at width 256, both at lr 0.02 (n = 3) | "
                               "-0.633 |")
    assert "(lr 0.02 against SP's best 0.002) (n = 3) | +0.067 |" in lines[6]
    assert lines[0].endswith("| Holm p (over 5) |")
    assert lines[2].startswith("| tuned μP's slope ≠ 0 (n = 3) | +0.000 | 1 |")
    assert "| SP at the widest | 0.002 | 1.800, 1.800, 1.800 | 1.800 [1.800] |" in lines


def test_run_sh_reads_the_choice_and_a_missing_tuning_is_one_line(
    transfer: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert transfer.main(["--choose", tune_sweep(tmp_path / "tune", TUNE_RUNS)]) == 0
    assert capsys.readouterr().out == "2 1\n"
    assert transfer.main(["--choose", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no such file or directory") and err.count("\n") == 1


def test_tuned_runs_at_other_multipliers_than_the_choice_are_refused(
    transfer: ModuleType, tmp_path: Path
) -> None:
    import argparse

    args = argparse.Namespace(tune=[tune_sweep(tmp_path / "tune", TUNE_RUNS)],
                              tuned=[tune_sweep(tmp_path / "tuned", TUNE_RUNS[:4])],
                              out=tmp_path)  # fmt: skip
    with pytest.raises(SystemExit, match="α_output 1, α_attn 1, base width 0, not the tuning"):
        transfer.tuned_report(args, {})
