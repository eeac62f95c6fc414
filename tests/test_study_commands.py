"""The studies' run.sh on a GPU: each study README's "Rerun on GPUs" command trains every sweep
with trainer=gpu, one run at a time, and every sweep composes as attnlab-train checks it; the
settings the scripts read from the environment are checked. Nothing is trained: with PLAN set
a script writes each sweep's command to a file and stops before its analysis."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from test_readme_commands import TrainCommand, compose_command, fenced_blocks, logical_lines

EXPERIMENTS = REPO_ROOT / "experiments"
STUDIES = sorted(p.parent.name for p in EXPERIMENTS.glob("*/run.sh"))
GPU_SECTION = "Rerun on GPUs"
NOT_LANGUAGE_MODELS = ["architecture_comparison", "attention_vs_recurrence", "depth_stability",
                       "preln_vs_postln_warmup", "speedrun"]  # fmt: skip


def gpu_commands(study: str) -> list[str]:
    """The run.sh command lines of the study README's "Rerun on GPUs" section."""
    readme = (EXPERIMENTS / study / "README.md").read_text(encoding="utf-8")
    script = f"experiments/{study}/run.sh"
    return [text for first, lines, section in fenced_blocks(readme) if section == GPU_SECTION
            for _, text in logical_lines(lines, first) if script in text]  # fmt: skip


def planned(command: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` run with PLAN set: it writes its sweeps' commands instead of training."""
    plan = tmp_path / "plan"
    plan.unlink(missing_ok=True)
    environment = {k: v for k, v in os.environ.items() if k not in ("JOBS", "CORPUS", "SKIP_TRAIN")}
    return subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**environment, "PLAN": str(plan), **env}, timeout=60)  # fmt: skip


def sweeps(tmp_path: Path) -> list[list[str]]:
    """attnlab.train's arguments for each sweep the planned command would train."""
    lines = (tmp_path / "plan").read_text().splitlines()
    return [(words := shlex.split(line))[words.index("attnlab.train") + 1 :] for line in lines]


@pytest.mark.parametrize("study", STUDIES)
def test_the_readme_gpu_command_trains_every_sweep_on_one_gpu(study: str, tmp_path: Path) -> None:
    commands = gpu_commands(study)
    assert commands, f"experiments/{study}/README.md has no run.sh command under {GPU_SECTION}"
    for command in commands:
        done = planned(command, tmp_path)
        assert done.returncode == 0, done.stderr
        planned_sweeps = sweeps(tmp_path)
        assert planned_sweeps, command
        for args in planned_sweeps:
            assert "trainer=gpu" in args and args[0] == "-m", args
            assert not any(a.startswith("hydra/launcher=") for a in args), args  # one at a time
            compose_command(TrainCommand(line=0, text=command, args=args))
        if "CORPUS=" in command:  # the language model trains on the prepared shards
            assert any("data=tokens" in args for args in planned_sweeps), command


@pytest.mark.parametrize(
    ("jobs", "launcher"),
    [("", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]), ("1", [])],
    ids=["two side by side by default", "one at a time with JOBS=1"],
)
def test_jobs_sets_how_many_runs_train_at_once(
    jobs: str, launcher: list[str], tmp_path: Path
) -> None:  # fmt: skip
    env = {"JOBS": jobs} if jobs else {}
    done = planned("experiments/depth_stability/run.sh", tmp_path, TUNE="", **env)  # its sweep only
    assert done.returncode == 0, done.stderr
    (args,) = sweeps(tmp_path)
    assert [a for a in args if a.startswith("hydra/launcher") or "n_jobs" in a] == launcher


@pytest.mark.parametrize("study", NOT_LANGUAGE_MODELS)
def test_a_corpus_is_refused_by_a_study_that_trains_no_language_model_on_it(
    study: str, tmp_path: Path
) -> None:  # fmt: skip
    done = planned(f"experiments/{study}/run.sh", tmp_path, CORPUS="data/some-tokens")
    assert done.returncode == 2
    assert done.stderr.startswith("error: CORPUS ") and done.stderr.count("\n") == 1
    assert not (tmp_path / "plan").exists()


def test_jobs_that_is_not_a_count_is_refused(tmp_path: Path) -> None:
    done = planned("experiments/depth_stability/run.sh", tmp_path, JOBS="two")
    assert done.returncode == 2
    assert done.stderr.startswith("error: JOBS=two ") and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("study", "env", "said"),
    [("mup_transfer", {"TUNE_SEED": "1"}, "error: tuning seed 1 (TUNE_SEED, TUNE_MORE_SEEDS)"),
     ("architecture_comparison", {"SST2_TUNE_SEEDS": "100,2"},
      "error: tuning seed 2 (SST2_TUNE_SEEDS)"),
     ("architecture_comparison", {"TRANSLATION_TUNE_SEEDS": "0"},
      "error: tuning seed 0 (TRANSLATION_TUNE_SEEDS)")],
)  # fmt: skip
def test_a_tuning_seed_that_also_reports_is_refused(
    study: str, env: dict[str, str], said: str, tmp_path: Path
) -> None:  # fmt: skip
    done = planned(f"experiments/{study}/run.sh", tmp_path, **env)
    assert done.returncode == 2
    assert done.stderr.startswith(said) and done.stderr.count("\n") == 1
    assert not (tmp_path / "plan").exists()
