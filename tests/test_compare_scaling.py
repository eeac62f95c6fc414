"""attnlab-compare --fit / --multiplier: known laws recovered from synthetic runs within
their CIs, the guards (too few points, extrapolation, crossing frontiers), a real size sweep."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from attnlab.compare import cli as compare_cli
from attnlab.compare.grouping import group_runs
from attnlab.compare.runs import load_runs
from attnlab.compare.scaling import fit_group, frontier_law
from cli_runs import run

E, A, ALPHA = 1.5, 50.0, 0.15  # L(C) = E + A·C^-α: 3.1 at 1e10 FLOPs, 1.9 at 1e14
SIZES = (1e5, 4e5, 1.6e6, 6.4e6)
# size i is on the frontier between EDGES[i] and EDGES[i + 1] FLOPs
EDGES = np.geomspace(1e10, 1e14, len(SIZES) + 1)


def law(c: np.ndarray, shift: float = 1.0) -> np.ndarray:
    """The frontier of a variant that needs ``shift``× less compute than the baseline."""
    return E + A * (c * shift) ** -ALPHA


def write_run(root: Path, name: str, variant: str, size_index: int, seed: int,
              shift: float = 1.0, noise: float = 0.004) -> None:  # fmt: skip
    """A run whose curve is the law inside its own window and above it outside (a larger
    model is inefficient early, a smaller one saturates late)."""
    lo, hi = EDGES[size_index], EDGES[size_index + 1]
    first, last = size_index == 0, size_index == len(SIZES) - 1
    c = np.geomspace(lo if first else lo / 4, hi if last else hi * 4, 40)
    excess = 0.15 * (np.log(np.maximum(lo / c, 1)) + np.log(np.maximum(c / hi, 1)))
    rng = np.random.default_rng(1000 * size_index + seed + (7 if variant == "b" else 0))
    loss = law(c, shift) * (1 + excess) * math.exp(noise * rng.standard_normal())
    out = root / name
    out.mkdir(parents=True)
    summary = {"status": "completed", "overrides": [f"model.ffn={variant}", f"seed={seed}",
               f"model.d_model={size_index}"], "task": "lm",
               "config": {"model": {"ffn": variant, "d_model": size_index}, "seed": seed},
               "metrics": {"val/loss": float(loss[-1])}, "params": SIZES[size_index],
               "tokens": float(c[-1] / (6 * SIZES[size_index]))}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary))
    with open(out / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "perf/flops", "val/loss"])
        for step, (flops, value) in enumerate(zip(c, loss, strict=True)):
            writer.writerow([step * 10, flops, value])


def synthetic(root: Path, seeds: int = 3, shift_b: float | None = None) -> Path:
    for variant, shift in (("a", 1.0), ("b", shift_b)):
        if shift is None:
            continue
        for i in range(len(SIZES)):
            for seed in range(seeds):
                write_run(root, f"{variant}_{i}_{seed}", variant, i, seed, shift)
    return root


def test_the_frontier_fit_recovers_a_known_law_within_its_cis(tmp_path: Path) -> None:
    (group,) = group_runs(load_runs([str(synthetic(tmp_path))]), ["model.ffn"])
    fit = fit_group(group, "val/loss", "frontier")
    truth = {"E": E, "A": math.log(A), "α": ALPHA}
    for i, name in enumerate(fit.names):
        lo, hi = fit.interval(i)
        assert lo <= truth[name] <= hi, (name, lo, truth[name], hi)
        assert hi - lo < {"E": 0.3, "A": 2.0, "α": 0.1}[name], (name, lo, hi)
    assert fit.bootstrap.startswith("seeds resampled") and fit.distinct == 10**4
    c = np.geomspace(1e10, 1e14, 5)
    np.testing.assert_allclose(frontier_law(c, *fit.params), law(c), rtol=0.01)


def test_the_multiplier_of_a_variant_is_recovered_with_its_ci(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    synthetic(tmp_path, shift_b=2.0)  # b needs half the compute of a for every loss
    plot = tmp_path / "fit.png"
    code = compare_cli.main([str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit",
                             "--multiplier", "a", "b", "--plot", str(plot)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("Compute multiplier"))
    k, lo, hi = (float(v) for v in re.search(r": ([\d.]+)× \[([\d.]+), ([\d.]+)\]", line).groups())
    assert lo <= 2.0 <= hi and lo <= k <= hi and hi / lo < 2, line
    assert "EXTRAPOLATED" not in line and "ILL-CONDITIONED" not in out
    assert "do not cross inside the range (model.ffn=b is lower throughout)" in out
    assert plot.stat().st_size > 10_000


def test_a_target_beyond_the_measured_range_is_flagged(tmp_path: Path, capsys) -> None:
    synthetic(tmp_path, shift_b=2.0)
    args = [str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit", "--multiplier",
            "a", "b", "--target-loss", "1.6"]  # fmt: skip
    assert compare_cli.main(args) == 0
    assert "EXTRAPOLATED beyond the measured FLOPs of model.ffn=a, model.ffn=b" in (
        capsys.readouterr().out
    )


def test_crossing_frontiers_are_reported(tmp_path: Path, capsys) -> None:
    synthetic(tmp_path)
    for i in range(len(SIZES)):  # b: better at small budgets, worse at large (a lower slope)
        for seed in range(3):
            lo, hi = EDGES[i], EDGES[i + 1]
            write_run(tmp_path, f"b_{i}_{seed}", "b", i, seed, shift=1.0)
            path = tmp_path / f"b_{i}_{seed}" / "metrics.csv"
            rows = list(csv.reader(open(path)))
            for row in rows[1:]:
                c = float(row[1])
                # b's frontier 2 + 8·C^-0.1: below a's at 1e10 FLOPs, above it at 1e14
                row[2] = str(float(row[2]) - law(np.array([c]))[0] + 2.0 + 8 * c**-0.1)
            csv.writer(open(path, "w", newline="")).writerows(rows)
            del lo, hi
    assert compare_cli.main([str(tmp_path), "--by", "model.ffn", "--metric", "val/loss",
                             "--fit", "--multiplier", "a", "b"]) == 0  # fmt: skip
    assert "the frontiers cross inside the range" in capsys.readouterr().out


def test_one_seed_per_size_bootstraps_residuals_and_says_so(tmp_path: Path) -> None:
    (group,) = group_runs(load_runs([str(synthetic(tmp_path, seeds=1))]), ["model.ffn"])
    fit = fit_group(group, "val/loss", "frontier")
    assert fit.bootstrap.startswith("residuals resampled")
    assert fit.distinct > 1e6


def test_too_few_sizes_for_the_law_is_one_line(tmp_path: Path, capsys) -> None:
    write_run(tmp_path, "only", "a", 1, 0)
    assert compare_cli.main([str(tmp_path), "--metric", "val/loss", "--fit"]) == 2
    err = capsys.readouterr().err
    assert "has 1 model size(s)" in err and "needs 2 sizes or more" in err
    assert err.count("\n") == 1
    assert compare_cli.main([str(tmp_path), "--multiplier", "a", "b"]) == 2
    assert "add --fit" in capsys.readouterr().err


def test_the_nd_fit_recovers_a_known_two_variable_law(tmp_path: Path, capsys) -> None:
    e, a, alpha, b, beta = 1.7, 400.0, 0.34, 900.0, 0.28
    rng = np.random.default_rng(0)
    for n in (1e5, 1e6, 1e7):
        for d in (1e6, 1e7, 1e8, 1e9):
            for seed in range(3):
                loss = (e + a * n**-alpha + b * d**-beta) * math.exp(0.002 * rng.standard_normal())
                out = tmp_path / f"{n:g}_{d:g}_{seed}"
                out.mkdir()
                (out / "summary.json").write_text(json.dumps({
                    "status": "completed", "overrides": [f"seed={seed}"], "task": "lm",
                    "config": {"seed": seed}, "metrics": {"val/loss": loss}, "params": n,
                    "tokens": d}))  # fmt: skip
    (group,) = group_runs(load_runs([str(tmp_path)]), None)
    fit = fit_group(group, "val/loss", "nd")
    truth = [e, math.log(a), alpha, math.log(b), beta]
    for i, value in enumerate(truth):
        lo, hi = fit.interval(i)
        assert lo <= value <= hi, (fit.names[i], lo, value, hi)
    assert compare_cli.main([str(tmp_path), "--metric", "val/loss", "--fit", "nd"]) == 0
    assert "L(N, D) = E + A/N^α + B/D^β" in capsys.readouterr().out


@pytest.fixture(scope="module")
def size_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sizes") / "sweep"
    result = run("train", "-m", "model=decoder_only", "model.d_model=8,16,32", "seed=0,1",
                 "data=associative_recall", "data.n_pairs=4", "data.n_queries=2",
                 "data.train_size=512", "data.val_size=32", "data.test_size=32",
                 "data.batch_size=16", "model.n_heads=2", "model.n_layers=1",
                 "trainer.max_epochs=-1", "trainer.max_steps=40", "trainer.val_check_interval=5",
                 "trainer.log_every_n_steps=5", "trainer.enable_progress_bar=false", "test=false",
                 f"hydra.sweep.dir={out}", timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_real_size_sweep_is_fitted_from_its_logged_flops(size_sweep: Path, capsys) -> None:
    runs = load_runs([str(size_sweep)])
    assert len({r.metrics["params"] for r in runs}) == 3
    (group,) = group_runs(runs, ["model"])
    fit = fit_group(group, "val/loss", "frontier")
    assert len(fit.x) >= 4 and np.all(np.isfinite(fit.params))
    flops = [r.metrics.get("flops") for r in runs]
    assert fit.x.max() <= max(flops) * 1.0001  # the frontier stays within the logged FLOPs
    assert compare_cli.main([str(size_sweep), "--by", "model", "--metric", "val/loss",
                             "--fit"]) == 0  # fmt: skip
    assert "Scaling fit L(C) = E + A·C^(−α)" in capsys.readouterr().out


def test_a_target_next_to_a_fitted_floor_is_flagged_ill_conditioned(tmp_path: Path,
                                                                     capsys) -> None:  # fmt: skip
    synthetic(tmp_path, shift_b=2.0)
    args = [str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit", "--multiplier",
            "a", "b", "--target-loss", "1.52"]  # a's fitted floor is 1.515 [1.48, 1.53]
    assert compare_cli.main(args) == 0
    assert "ILL-CONDITIONED: the target is" in capsys.readouterr().out


def test_a_target_below_a_fitted_floor_is_one_line(tmp_path: Path, capsys) -> None:
    synthetic(tmp_path, shift_b=2.0)
    args = [str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit", "--multiplier",
            "a", "b", "--target-loss", "0.5"]  # fmt: skip
    assert compare_cli.main(args) == 2
    assert "never reaches" in capsys.readouterr().err


@pytest.mark.parametrize("extra,named", [
    (["--at", "flops=1e12"], "--at flops=1e12"),
    (["--select", "best"], "--select best"),
    (["--at", "step=10", "--multiplier", "a", "b"], "--at step=10"),
])  # fmt: skip
def test_fit_with_an_option_that_reads_runs_at_one_point_is_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], named: str
) -> None:
    synthetic(tmp_path, seeds=1, shift_b=2.0)
    args = [str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit", *extra]
    assert compare_cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --fit frontier"), err
    assert named in err[0] and "do not combine" in err[0] and "parameter count" not in err[0]


@pytest.mark.parametrize("pair,named", [
    (["a", "nosuch"], "--multiplier 'nosuch' matches no group"),
    (["model.ffn", "a"], "--multiplier 'model.ffn' matches 2 groups"),
])  # fmt: skip
def test_a_multiplier_group_that_names_no_single_group_names_the_multiplier_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pair: list[str], named: str
) -> None:
    synthetic(tmp_path, seeds=1, shift_b=2.0)
    args = [str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit", "--multiplier",
            *pair]  # fmt: skip
    assert compare_cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "--vs" not in err[0], err


def write_finals(root: Path, shift_b: float | None = None, sizes: int = 5) -> Path:
    """Runs that each report only a final value on the law at their training FLOPs: one
    token budget for every size (compute grows with size alone)."""
    rng = np.random.default_rng(0)
    for variant, shift in (("a", 1.0), ("b", shift_b)):
        for i, c in enumerate(np.geomspace(1e10, 1e14, sizes) if shift else ()):
            for seed in range(3):
                out = root / f"{variant}_{i}_{seed}"
                out.mkdir(parents=True)
                loss = float(law(np.array(c), shift)) * math.exp(0.004 * rng.standard_normal())
                (out / "summary.json").write_text(json.dumps({
                    "status": "completed", "task": "lm", "overrides": [f"model.ffn={variant}"],
                    "config": {"model": {"ffn": variant}, "seed": seed},
                    "metrics": {"val/loss": loss}, "params": c / 6e6, "tokens": 1e6,
                    "flops": c}))  # fmt: skip
    return root


def test_the_final_value_fit_recovers_a_known_law_and_multiplier(tmp_path: Path,
                                                                  capsys) -> None:  # fmt: skip
    write_finals(tmp_path, shift_b=2.0)
    groups = group_runs(load_runs([str(tmp_path)]), ["model.ffn"])
    fit = fit_group(groups[0], "val/loss", "final")
    c = np.geomspace(1e10, 1e14, 5)
    np.testing.assert_allclose(frontier_law(c, *fit.params), law(c), rtol=0.01)
    assert fit.bootstrap.startswith("seeds resampled")
    assert any("fixed data" in flag for flag in fit.flags)
    code = compare_cli.main([str(tmp_path), "--by", "model.ffn", "--metric", "val/loss", "--fit",
                             "final", "--multiplier", "a", "b"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the final val/loss of each run against its training FLOPs" in out
    line = next(x for x in out.splitlines() if x.startswith("Compute multiplier"))
    k, lo, hi = (float(v) for v in re.search(r": ([\d.]+)× \[([\d.]+), ([\d.]+)\]", line).groups())
    assert abs(math.log(k / 2.0)) < 0.25 and lo < k < hi, line  # one draw: no CI coverage


def test_a_final_value_fit_of_two_sizes_is_one_line(tmp_path: Path, capsys) -> None:
    write_finals(tmp_path, sizes=2)
    code = compare_cli.main([str(tmp_path), "--metric", "val/loss", "--fit", "final"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "needs 3 sizes or more" in err[0], err


@pytest.mark.parametrize(
    ("floors", "shown"),
    [((3e-16, 1e-22, 2e-11), "E = 0 [0, 0]"),  # a rounding error above the bound E ≥ 0
     ((0.4475, 7.8e-17, 1.839), "E = 0.4475 [0, 1.8]")],
    ids=["at-its-bound", "inside"],
)  # fmt: skip
def test_a_floor_at_its_bound_is_shown_as_0_and_cis_to_2_digits(
    floors: tuple[float, float, float], shown: str
) -> None:
    from attnlab.compare.scaling import Fit, describe

    e, low, high = floors
    draws = np.array([[low, math.log(A), ALPHA]] * 25 + [[high, math.log(A), ALPHA]] * 25)
    params = np.array([e, math.log(A), ALPHA])
    x, y = np.array([1e10, 1e12]), np.array([2.5, 2.1])
    fit = Fit("model.ffn=a", "final", ("E", "A", "α"), params, draws, x, y, 0.01, "residuals",
              100.0)  # fmt: skip
    (line,) = describe(fit)
    assert f"{shown}, A = 50 [50, 50], α = 0.15 [0.15, 0.15]" in line, line
