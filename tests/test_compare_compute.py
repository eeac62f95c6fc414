"""Equal compute: training logs the tokens and FLOPs it spends, and ``attnlab-compare``
reads curves against them (``--x``) and at one budget (``--at``).

A real two-architecture sweep (a Transformer decoder and an LSTM, 2 seeds each) on
associative recall, where every step sees exactly batch × length tokens, so the
tokens behind each validation are known by hand: Lightning logs step s after s + 1
optimiser steps, hence (s + 1) · 16 · 12 tokens. That a resumed run counts on from its
checkpoint is checked in tests/test_resume.py.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.compare import cli as compare_cli
from attnlab.compare.compute import first_reach, parse_at, to_axis
from attnlab.compare.grouping import group_runs
from attnlab.compare.plot import plot_curves
from attnlab.compare.runs import load_runs
from attnlab.errors import UserError
from cli_runs import run

BATCH, LENGTH, STEPS = 16, 12, 24  # 4 pairs + 2 queries: 2·4 + 2·2 = 12 tokens
PER_STEP = BATCH * LENGTH


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compute") / "sweep"
    result = run("train", "-m", "model=decoder_only,rnn", "seed=0,1", "data=associative_recall",
                 "data.n_pairs=4", "data.n_queries=2", "data.train_size=256", "data.val_size=32",
                 "data.test_size=32", f"data.batch_size={BATCH}", "model.d_model=16",
                 "model.n_layers=1", "trainer.max_epochs=-1",  # keys both architectures read
                 f"trainer.max_steps={STEPS}", "trainer.val_check_interval=6",
                 "trainer.log_every_n_steps=3", "trainer.enable_progress_bar=false",
                 f"hydra.sweep.dir={out}", timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def val_curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    points = [(float(r["step"]), float(r["val/loss"])) for r in rows if r.get("val/loss")]
    steps, values = zip(*points, strict=True)
    return np.array(steps), np.array(values)


def jobs_of(sweep: Path, model: str) -> list[Path]:
    found = []
    for job in sorted(p for p in sweep.iterdir() if (p / "summary.json").is_file()):
        if f"model={model}" in json.loads((job / "summary.json").read_text())["overrides"]:
            found.append(job)
    return found


def test_a_run_records_the_tokens_and_flops_it_spent(sweep: Path) -> None:
    flops_per_token = set()
    for job in sorted(sweep.glob("[0-9]*")):
        summary = json.loads((job / "summary.json").read_text())
        assert summary["tokens"] == STEPS * PER_STEP
        assert summary["flops"] == pytest.approx(summary["tokens"] * summary["flops_per_token"])
        rows = list(csv.DictReader(open(job / "metrics.csv")))
        logged = [(int(r["step"]), float(r["perf/tokens"])) for r in rows if r.get("perf/tokens")]
        assert logged and all(tokens == (step + 1) * PER_STEP for step, tokens in logged)
        flops_per_token.add(summary["flops_per_token"])
    assert len(flops_per_token) == 2  # the decoder and the LSTM cost differently per token


@pytest.mark.parametrize("budget", [1000, 2500, 4000])
def test_at_tokens_reads_each_curve_at_that_budget_by_hand(
    sweep: Path, budget: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare_cli.main([str(sweep), "--metric", "val/loss", "--at", f"tokens={budget}",
                             "--format", "json"]) == 0  # fmt: skip
    table = {row["settings"]["model"]: row for row in json.loads(capsys.readouterr().out)}
    by_hand = []
    for job in jobs_of(sweep, "decoder_only"):
        steps, values = val_curve(job)
        tokens = (steps + 1) * PER_STEP  # first validation after 6 steps: 1152 tokens
        if tokens[0] <= budget <= tokens[-1]:
            by_hand.append(float(np.interp(budget, tokens, values)))
    cell = table["decoder_only"]["metrics"][f"val/loss @ tokens={budget:g}"]
    assert cell["n"] == len(by_hand)
    if by_hand:
        assert cell["mean"] == pytest.approx(np.mean(by_hand))
    else:  # before the first validation: nothing to read, nothing made up
        assert cell["mean"] is None


def test_a_budget_no_run_reached_says_so(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    beyond = STEPS * PER_STEP + 1
    assert compare_cli.main([str(sweep), "--metric", "val/loss", "test/loss",
                             "--at", f"tokens={beyond}"]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert out.count("out of range") == 2  # both architectures
    assert "left out, no curve: test/loss" in out


def reach_by_hand(steps: np.ndarray, values: np.ndarray, target: float) -> float | None:
    for i, (step, value) in enumerate(zip(steps, values, strict=True)):
        if value <= target:
            if i == 0:
                return float(step)
            s0, v0 = steps[i - 1], values[i - 1]
            return float(s0 + (step - s0) * (v0 - target) / (v0 - value))
    return None


def test_reach_tabulates_each_runs_tokens_to_the_target_by_hand(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    curves = [val_curve(job) for job in jobs_of(sweep, "decoder_only")]
    target = float(np.mean([values[len(values) // 2] for _, values in curves]))  # mid-curve
    assert compare_cli.main([str(sweep), "--reach", f"{target:.6f}", "--x", "tokens",
                             "--format", "json"]) == 0  # fmt: skip
    table = {row["settings"]["model"]: row for row in json.loads(capsys.readouterr().out)}
    by_hand = [hit for steps, values in curves
               if (hit := reach_by_hand((steps + 1) * PER_STEP, values, float(f"{target:.6f}")))
               is not None]  # fmt: skip
    cell = table["decoder_only"]["metrics"][f"tokens to val/loss ≤ {float(f'{target:.6f}'):g}"]
    assert by_hand and cell["n"] == len(by_hand)
    assert cell["mean"] == pytest.approx(np.mean(by_hand))


def test_a_target_no_run_reaches_says_not_reached(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare_cli.main([str(sweep), "--reach", "1e-9"]) == 0
    assert capsys.readouterr().out.count("not reached") == 2  # both architectures


@pytest.mark.parametrize(
    ("curve", "target", "lower", "expected"),
    [
        ((np.array([1.0, 3.0, 5.0]), np.array([4.0, 2.0, 1.0])), 3.0, True, 2.0),
        ((np.array([1.0, 3.0, 5.0]), np.array([4.0, 2.0, 1.0])), 5.0, True, 1.0),  # at once
        ((np.array([1.0, 3.0, 5.0]), np.array([4.0, 2.0, 1.0])), 0.5, True, None),
        ((np.array([1.0, 3.0, 5.0]), np.array([0.2, 0.6, np.nan])), 0.5, False, 2.5),  # acc
    ],
)
def test_first_reach_interpolates_between_the_validations_around_the_crossing(
    curve: tuple[np.ndarray, np.ndarray], target: float, lower: bool, expected: float | None
) -> None:
    assert first_reach(curve, target, lower) == expected


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--reach", "low"], "give the target value"),
        (["--reach", "2", "--at", "step=3"], "drop --at"),
    ],
)
def test_a_bad_reach_is_one_line_with_the_fix(
    sweep: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare_cli.main([str(sweep), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --reach") and message in err and "\n" not in err


def test_curves_against_tokens_put_each_validation_at_its_tokens(sweep: Path) -> None:
    groups = group_runs(load_runs([str(sweep)]), None)
    fig = plot_curves(groups, "val/loss", axis="tokens")
    steps, _ = val_curve(jobs_of(sweep, "decoder_only")[0])
    lines = {line.get_label().split(" ")[0]: line for line in fig.axes[0].lines}
    np.testing.assert_allclose(lines["model=decoder_only"].get_xdata(), (steps + 1) * PER_STEP)
    assert fig.axes[0].get_xlabel() == "tokens seen"


def test_to_axis_extrapolates_at_the_rate_of_the_nearest_interval() -> None:
    mapping = (np.array([2.0, 5.0, 8.0]), np.array([30.0, 60.0, 90.0]))  # 10 per step
    np.testing.assert_allclose(to_axis(np.array([0.0, 3.5, 9.0]), mapping), [10.0, 45.0, 100.0])
    np.testing.assert_allclose(to_axis(np.array([4.0]), (np.array([1.0]), np.array([20.0]))), [50])


@pytest.mark.parametrize("text", ["tokens", "bogus=3", "tokens=-1", "flops=many"])
def test_a_bad_at_is_one_line_with_the_fix(text: str) -> None:
    with pytest.raises(UserError, match="--at"):
        parse_at(text)


def test_select_best_reads_every_val_metric_at_the_best_validation_by_hand(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare_cli.main([str(sweep), "--metric", "val/loss", "val/ppl", "test/loss",
                             "--select", "best", "--format", "json"]) == 0  # fmt: skip
    table = {row["settings"]["model"]: row for row in json.loads(capsys.readouterr().out)}
    losses, ppls, tests = [], [], []
    for job in jobs_of(sweep, "rnn"):
        rows = [r for r in csv.DictReader(open(job / "metrics.csv")) if r.get("val/loss")]
        best = min(rows, key=lambda r: float(r["val/loss"]))  # the checkpoint's monitor, min
        losses.append(float(best["val/loss"]))
        ppls.append(float(best["val/ppl"]))
        tests.append(json.loads((job / "summary.json").read_text())["metrics"]["test/loss"])
    cells = table["rnn"]["metrics"]
    assert cells["val/loss @ best val/loss"]["mean"] == pytest.approx(np.mean(losses))
    assert cells["val/ppl @ best val/loss"]["mean"] == pytest.approx(np.mean(ppls))
    assert cells["test/loss"]["mean"] == pytest.approx(np.mean(tests))  # already the best


def test_the_table_says_which_validation_and_which_checkpoint(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare_cli.main([str(sweep), "--metric", "val/loss", "test/loss"]) == 0
    out = capsys.readouterr().out
    assert "val/*: the last validation of each run" in out
    assert "test/*: the best checkpoint by val/loss (min)" in out
    assert compare_cli.main([str(sweep), "--select", "best", "--at", "tokens=2000"]) == 2


def test_at_tokens_on_runs_that_never_logged_tokens_says_so(
    tmp_path: Path, sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(jobs_of(sweep, "rnn")[0], old)
    rows = list(csv.DictReader(open(old / "metrics.csv")))
    columns = [c for c in rows[0] if c not in ("perf/tokens", "perf/flops")]
    with open(old / "metrics.csv", "w", newline="") as f:  # a run from before perf/tokens
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    assert compare_cli.main([str(old), "--metric", "val/loss", "--at", "tokens=2000"]) == 2
    assert "did not log perf/tokens" in capsys.readouterr().err
    assert compare_cli.main([str(old), "--metric", "val/loss", "--at", "step=10"]) == 0
