"""attnlab.bench.race_nanogpt: attnlab against nanoGPT, whole processes in turns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NANOGPT = REPO.parent / "shared" / "reference" / "nanogpt"
DATA = Path(os.environ.get("ATTNLAB_DATA_ROOT", REPO.parent / "shared" / "data"))


def load_race():
    from attnlab.bench import race_nanogpt

    return race_nanogpt


def test_nanogpt_runs_its_readme_cpu_setting_with_attnlabs_validation() -> None:
    race = load_race()
    command = race.nanogpt_command(2000, compile=False)
    for flag in ("--device=cpu", "--compile=False", "--block_size=64", "--batch_size=12",
                 "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                 "--lr_decay_iters=2000", "--dropout=0.0", "--eval_iters=20",
                 "--eval_interval=500"):  # fmt: skip
        assert flag in command
    assert "experiment=nanogpt_shakespeare_char_cpu" in race.attnlab_command(2000, True)
    assert "model.compile=true" in race.attnlab_command(2000, True)
    assert "test=false" in race.attnlab_command(2000, False)  # nanoGPT has no test pass


def test_nanogpts_final_validation_loss_is_read_from_its_log() -> None:
    race = load_race()
    log = "step 0: train loss 4.2, val loss 4.1\niter 10\n"
    log += "step 2000: train loss 1.7, val loss 1.88\n"
    assert race.final_val_loss("nanogpt", log) == pytest.approx(1.88)


def test_ratios_are_taken_within_each_round_and_over_the_medians(capsys) -> None:
    race = load_race()
    seconds = [(100.0, 80.0), (120.0, 90.0), (110.0, 99.0)]
    rounds = [
        {"nanogpt": {"seconds": a, "val_loss": 1.9}, "attnlab": {"seconds": b, "val_loss": 1.8}}
        for a, b in seconds
    ]
    report = race.summarise(rounds, ["nanogpt", "attnlab"])
    ratios = report["ratios_to_nanogpt"]["attnlab"]
    assert ratios["per_round"] == pytest.approx([0.8, 0.75, 0.9])
    assert ratios["of_medians"] == pytest.approx(90.0 / 110.0)
    assert "attnlab / nanogpt" in capsys.readouterr().out


def test_the_reading_is_against_the_faster_nanogpt_and_steps_are_parsed(capsys) -> None:
    race = load_race()
    log = "".join(f"iter {i}: loss 2.0, time {ms}ms, mfu 1.0%\n"
                  for i, ms in [(0, 9000.0), (50, 40.0), (100, 44.0), (500, 900.0), (550, 42.0)])
    assert race.step_times("nanogpt_compiled", log) == {"step_ms": 42.0}  # iters 0, 500 out
    rounds = [{"nanogpt": {"seconds": 120.0, "val_loss": 1.9},
               "nanogpt_compiled": {"seconds": 100.0, "val_loss": 1.9},
               "attnlab": {"seconds": 85.0, "val_loss": 1.8}}]  # fmt: skip
    report = race.summarise(rounds, ["nanogpt", "nanogpt_compiled", "attnlab"])
    fastest = report["ratios_to_nanogpt"]["attnlab/fastest_nanogpt"]
    assert fastest["base"] == "nanogpt_compiled" and fastest["of_medians"] == pytest.approx(0.85)
    assert report["ratios_to_nanogpt"]["attnlab"]["of_medians"] == pytest.approx(85 / 120)
    assert "the faster nanoGPT (nanogpt_compiled): 0.850" in capsys.readouterr().out


def test_the_ratio_is_split_into_the_steps_and_the_time_outside_them(capsys) -> None:
    race = load_race()
    rounds = [{"nanogpt": {"seconds": 100.0, "val_loss": 1.9, "step_ms": 45.0},
               "attnlab": {"seconds": 96.0, "val_loss": 1.8, "step_ms": 40.0}}]  # fmt: skip
    report = race.summarise(rounds, ["nanogpt", "attnlab"], steps_run=2000)
    # steps: nanoGPT 2001 × 45 ms = 90.045 s (iterations 0 … 2000), attnlab 80 s
    assert report["outside_steps_s"] == pytest.approx({"nanogpt": 9.955, "attnlab": 16.0})
    reading = report["ratios_to_nanogpt"]["attnlab/fastest_nanogpt"]
    assert reading["of_medians"] == pytest.approx(0.96)
    assert reading["step_ratio"] == pytest.approx(40 / 45)
    assert reading["with_its_outside_time"] == pytest.approx((80 + 9.955) / 100)
    assert "per training step 0.889" in capsys.readouterr().out


def test_a_missing_nanogpt_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.bench.race_nanogpt", "--nanogpt", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "no nanoGPT at" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not (NANOGPT / "train.py").is_file(), reason="nanoGPT is not beside the repo")
@pytest.mark.skipif(not (DATA / "tinyshakespeare").is_dir(), reason="Tiny Shakespeare is absent")
def test_a_short_race_runs_both_and_reports_a_ratio(tmp_path: Path) -> None:
    out = tmp_path / "race.json"
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.bench.race_nanogpt", "--rounds", "1",
         "--max-iters", "20", "--contenders", "nanogpt,attnlab", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["ratios_to_nanogpt"]["attnlab"]["of_medians"] > 0
    assert all(r["val_loss"] is not None for r in report["rounds"][0].values())


def test_the_speedrun_runs_its_own_preset_and_steps() -> None:
    race = load_race()
    assert "experiment=speedrun_shakespeare_char_cpu" in race.speedrun_command()
    assert "test=false" in race.speedrun_command()
    assert not any(a.startswith("trainer.max_steps") for a in race.speedrun_command())
    assert race.speedrun_steps() == 650  # conf/experiment/speedrun_shakespeare_char_cpu.yaml


def test_the_speedrun_is_read_against_the_baseline_preset_in_the_same_rounds(capsys) -> None:
    race = load_race()
    rounds = [
        {"attnlab": {"seconds": base, "val_loss": 1.88, "step_ms": 25.0},
         "attnlab_speedrun": {"seconds": fast, "val_loss": loss, "step_ms": 40.0}}
        for base, fast, loss in [(50.0, 30.0, 1.86), (60.0, 33.0, 1.85), (55.0, 36.0, 1.87)]
    ]  # fmt: skip
    report = race.summarise(rounds, ["attnlab", "attnlab_speedrun"],
                            {"attnlab": 2000, "attnlab_speedrun": 650})  # fmt: skip
    reading = report["ratios_to_nanogpt"]["attnlab_speedrun/attnlab"]
    assert reading["per_round"] == pytest.approx([0.6, 0.55, 36 / 55])
    assert reading["of_medians"] == pytest.approx(33.0 / 55.0)
    assert reading["reached"] is True and reading["val_loss"]["attnlab_speedrun"] == 1.86
    # time outside the steps with each contender's own number of steps
    assert report["outside_steps_s"]["attnlab_speedrun"] == pytest.approx(33.0 - 650 * 0.040)
    assert "not reached" not in capsys.readouterr().out
    slower = [{**r, "attnlab_speedrun": {**r["attnlab_speedrun"], "val_loss": 1.9}}
              for r in rounds]  # fmt: skip
    assert race.summarise(slower, ["attnlab", "attnlab_speedrun"])["ratios_to_nanogpt"][
        "attnlab_speedrun/attnlab"]["reached"] is False
