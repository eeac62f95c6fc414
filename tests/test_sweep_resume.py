"""A sweep resumes as a whole: ``-m <grid> hydra.sweep.dir=<dir> resume=true``.

Completed jobs are kept, unfinished ones continue from their last.ckpt, failed ones run
again only with ``retry_failed=true``, and jobs are matched by their settings, not by
their position in the grid.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from attnlab import train as attnlab_train
from cli_runs import finish, run, start, summary

JOB = ["data=majority", "data.train_size=64", "data.val_size=16", "data.test_size=16",
       "data.batch_size=16", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
       "trainer.max_epochs=2", "trainer.enable_progress_bar=false", "test=false"]  # fmt: skip


def sweep(folder: Path, *args: str) -> int:
    try:
        return attnlab_train.main(["-m", *JOB, *args, f"hydra.sweep.dir={folder}"])
    except SystemExit as exc:
        return int(exc.code or 0)


def seeds_by_dir(folder: Path) -> dict[str, int]:
    return {p.parent.name: summary(p.parent)["config"]["seed"]
            for p in folder.glob("*/summary.json")}  # fmt: skip


def mtimes(folder: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in folder.glob("*/summary.json")}


def test_completed_jobs_are_kept_and_new_grid_points_get_new_directories(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    assert sweep(folder, "seed=1,2") == 0
    before = mtimes(folder)
    assert sweep(folder, "seed=3,1,2", "resume=true") == 0  # a new value, listed first
    assert seeds_by_dir(folder) == {"0": 1, "1": 2, "2": 3}
    assert {k: v for k, v in mtimes(folder).items() if k in before} == before


def test_a_failed_job_runs_again_only_with_retry_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.tasks.base import Task

    folder = tmp_path / "sweep"
    real_loss = Task.loss
    with monkeypatch.context() as patch:
        patch.setattr(Task, "loss", lambda self, *a, **k: real_loss(self, *a, **k) * float("nan"))
        assert sweep(folder, "seed=1,2") == 1
    assert {summary(folder / d)["status"] for d in ("0", "1")} == {"diverged"}
    before = mtimes(folder)
    assert sweep(folder, "seed=1,2", "resume=true") == 1  # kept as they were
    assert mtimes(folder) == before
    assert sweep(folder, "seed=1,2", "resume=true", "retry_failed=true") == 0
    assert {summary(folder / d)["status"] for d in ("0", "1")} == {"completed"}


def test_an_unfinished_job_continues_from_its_last_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    assert sweep(folder, "seed=1,2", "trainer.max_epochs=1") == 0
    (folder / "1" / "summary.json").unlink()  # as if job 1 had been killed after epoch 1
    assert sweep(folder, "seed=1,2", "resume=true") == 0
    assert summary(folder / "0")["config"]["trainer"]["max_epochs"] == 1  # kept
    log = (folder / "1" / "train.log").read_text()
    assert "Restoring states from the checkpoint path" in log
    checkpoint = torch.load(folder / "1" / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 8  # 2 epochs of 4 steps, the first one not repeated


def test_resume_is_refused_without_a_sweep_directory(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        attnlab_train.main(["-m", *JOB, "seed=1,2", "resume=true",
                            f"paths.log_dir={tmp_path}"])  # fmt: skip
    assert exit_info.value.code == 2
    assert "resume=true needs hydra.sweep.dir=" in capfd.readouterr().err


KILLED = ["model.norm=pre,post", "seed=1,2,3", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
          "trainer.max_epochs=6", "data.train_size=128"]  # fmt: skip


def final_val_losses(folder: Path) -> dict[tuple[str, int], float]:
    out = {}
    for path in folder.glob("*/summary.json"):
        data = json.loads(path.read_text())
        assert data["status"] == "completed", (path, data["error"])
        key = (data["config"]["model"]["norm"], data["config"]["seed"])
        assert key not in out, f"{key} ran twice"
        out[key] = data["metrics"]["val/loss"]
    return out


@pytest.mark.slow
def test_a_sigkilled_joblib_sweep_resumes_to_the_same_results_as_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    result = run("train", "-m", *JOB, *KILLED, f"hydra.sweep.dir={reference}", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    proc = start("train", "-m", *JOB, *KILLED, f"hydra.sweep.dir={killed}", new_session=True)
    deadline = time.monotonic() + 300
    while len(list(killed.glob("*/summary.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)

    def mid_training() -> bool:  # a job with a checkpoint but no summary yet
        jobs = killed.glob("*")
        return any(
            (job / "checkpoints" / "last.ckpt").is_file() and not (job / "summary.json").is_file()
            for job in jobs
        )

    while not mid_training() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    finish(proc)
    done = len(list(killed.glob("*/summary.json")))
    assert 2 <= done < 6, f"{done} jobs had finished when the sweep was killed"
    resumed = run("train", "-m", *JOB, *KILLED, f"hydra.sweep.dir={killed}", "resume=true",
                  timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "kept from earlier" in resumed.stdout
    assert "continues from its last.ckpt" in resumed.stdout  # a job killed mid-training
    assert sorted(p.name for p in killed.iterdir() if p.is_dir()) == [str(i) for i in range(6)]
    assert final_val_losses(killed) == final_val_losses(reference)  # identical, not approx
    tables = [run("compare", str(folder), "--metric", "val/loss", "val/acc", "--format", "csv",
                  timeout=120).stdout for folder in (reference, killed)]  # fmt: skip
    columns = [[row.split(",")[:5] for row in table.splitlines()] for table in tables]
    assert columns[0] == columns[1] and len(columns[0]) == 3


SEARCH = ["hparams_search=optuna", "trainer.max_epochs=1"]


def study_trials(folder: Path) -> list:
    import optuna

    return optuna.load_study(study_name="train", storage=f"sqlite:///{folder}/optuna.db").trials


def test_an_optuna_study_continues_where_it_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "search"
    assert sweep(folder, *SEARCH, "hydra.sweeper.n_trials=2") == 0
    assert (folder / "optuna.db").is_file()  # the default storage: beside the trials
    assert sweep(folder, *SEARCH, "hydra.sweeper.n_trials=4", "resume=true") == 0
    trials = study_trials(folder)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]
    params = [tuple(sorted(t.params.items())) for t in trials]
    assert len(set(params)) == 4  # the continued study does not replay its first trials


def told(folder: Path) -> int:
    """Completed trials in the study a running search writes; read once a job has run (so the
    search has made the database: two processes making one race)."""
    import sqlalchemy.exc

    if not any(folder.glob("*/summary.json")):
        return 0
    try:
        return sum(t.state.name == "COMPLETE" for t in study_trials(folder))
    except sqlalchemy.exc.OperationalError:  # the database locked by a write
        return 0


@pytest.mark.slow
def test_a_killed_six_trial_study_ends_with_six_trials_not_nine(tmp_path: Path) -> None:
    folder = tmp_path / "search"
    args = ["-m", *JOB, *SEARCH, "hydra.sweeper.n_trials=6", f"hydra.sweep.dir={folder}"]
    proc = start("train", *args, new_session=True)
    deadline = time.monotonic() + 300
    # a job writes its summary, then the launching process tells the study its value
    while told(folder) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    finish(proc)
    completed = [t for t in study_trials(folder) if t.state.name == "COMPLETE"]
    assert 3 <= len(completed) < 6
    result = run("train", *args, "resume=true", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    states = [t.state.name for t in study_trials(folder)]
    assert states.count("COMPLETE") == 6 and len(states) <= 7  # at most one killed mid-run


def search_space() -> dict:
    """The distributions of conf/hparams_search/optuna.yaml, as Optuna records them."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    return {"optim.lr": FloatDistribution(1e-4, 1e-2, log=True),
            "optim.warmup_steps": CategoricalDistribution([0, 50, 100, 200, 400]),
            "model.dropout": FloatDistribution(0.0, 0.3)}  # fmt: skip


def stopped_study(folder: Path, states: list[str]) -> dict:
    """The study a killed search leaves in ``folder``: a trial per state (RUNNING: asked, never
    told), each with the same parameters; those parameters."""
    import optuna
    from optuna.trial import TrialState, create_trial

    params = {"optim.lr": 1e-3, "optim.warmup_steps": 0, "model.dropout": 0.1}
    study = optuna.create_study(study_name="train", storage=f"sqlite:///{folder}/optuna.db")
    for state in states:
        if state == "RUNNING":
            study.enqueue_trial(params)
            study.ask(search_space())
        else:
            value = 1.0 if state == "COMPLETE" else None
            study.add_trial(create_trial(state=TrialState[state], value=value, params=params,
                                         distributions=search_space()))  # fmt: skip
    return params


def test_each_trial_records_the_parameters_value_and_directory_of_its_job(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "search"
    assert sweep(folder, *SEARCH, "hydra.sweeper.n_trials=1") == 0
    (trial,) = study_trials(folder)
    job = summary(folder / "0")
    assert trial.state.name == "COMPLETE" and trial.value == job["metrics"]["val/loss"]
    assert trial.params == {"optim.lr": job["config"]["optim"]["lr"],
                            "optim.warmup_steps": job["config"]["optim"]["warmup_steps"],
                            "model.dropout": job["config"]["model"]["dropout"]}  # fmt: skip
    assert trial.user_attrs["run_dir"] == str(folder / "0")


def test_a_trial_left_running_by_a_killed_search_is_failed_and_asked_again(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "search"
    folder.mkdir()
    params = stopped_study(folder, ["COMPLETE", "RUNNING"])
    assert sweep(folder, *SEARCH, "hydra.sweeper.n_trials=2", "resume=true") == 0
    trials = study_trials(folder)
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert trials[2].params == params and trials[2].user_attrs["retry_of"] == 1
    assert summary(folder / "2")["status"] == "completed"  # the next job number


@pytest.mark.parametrize(("retry", "states"), [(False, ["FAIL"]), (True, ["FAIL", "COMPLETE"])])
def test_a_failed_trial_runs_again_with_its_parameters_only_with_retry_failed(
    tmp_path: Path, retry: bool, states: list[str]
) -> None:
    folder = tmp_path / "search"
    folder.mkdir()
    params = stopped_study(folder, ["FAIL"])
    retry_failed = f"retry_failed={str(retry).lower()}"
    assert sweep(folder, *SEARCH, "hydra.sweeper.n_trials=1", "resume=true", retry_failed) == 0
    trials = study_trials(folder)
    assert [t.state.name for t in trials] == states
    assert all(t.params == params for t in trials)
    assert [t.user_attrs["retry_of"] for t in trials[1:]] == [0] * (len(trials) - 1)


def test_a_search_space_optuna_cannot_draw_from_is_one_line_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "search"
    assert sweep(folder, *SEARCH, "optim.lr=tag(log, interval(0, 1e-2))") == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "optim.lr=tag(log, interval(0, 1e-2))" in err
    assert "Traceback" not in err and not (folder / "optuna.db").exists()


def test_resuming_a_study_in_another_direction_is_refused_and_leaves_it_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "search"
    folder.mkdir()
    stopped_study(folder, ["COMPLETE"])
    args = [*SEARCH, "hydra.sweeper.direction=maximize", "resume=true"]
    assert sweep(folder, *args) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "hydra.sweeper.direction=maximize" in err
    assert "Traceback" not in err
    assert [t.state.name for t in study_trials(folder)] == ["COMPLETE"]
