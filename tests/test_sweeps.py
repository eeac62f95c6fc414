"""Sweeps through the real command line: grids, joblib, a failing job, Optuna, SLURM config.

The two grids start together (module fixture) and each test waits for its own, so the
file takes about as long as the slower one; the Optuna search (-m slow) runs on its own.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cli_runs import TINY, compose_run, finish, only_dir, run, start, summary

SWEEP_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_[0-9a-f]{8}$")


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.Popen, Path]]:
    """Started at once: a joblib grid and a grid with one job that fails as it starts."""
    logs = {name: tmp_path_factory.mktemp(name) for name in ("joblib", "failing")}
    procs = {
        "joblib": start("train", "-m", *TINY, "data=majority", "model=decoder_only",
                        "model.norm=pre,post", "seed=1,2", "hydra/launcher=joblib",
                        "hydra.launcher.n_jobs=2", f"paths.log_dir={logs['joblib']}"),
        # a position table too short for the data's sequences: found by the job, not before
        "failing": start("train", "-m", *TINY, "data=reverse", "model=decoder_only",
                         "model.pos=learned", "model.max_len=8,64",
                         f"paths.log_dir={logs['failing']}"),
    }  # fmt: skip
    yield {name: (proc, logs[name]) for name, proc in procs.items()}
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()


def _done(sweeps: dict, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    proc, logs = sweeps[name]
    result = finish(proc, timeout=400)
    return result, only_dir(logs / "train" / "multiruns")


def test_a_joblib_sweep_puts_every_job_of_the_grid_in_one_sweep_dir(sweeps: dict) -> None:
    result, sweep_dir = _done(sweeps, "joblib")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in result.stdout
    assert SWEEP_NAME.match(sweep_dir.name)
    jobs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir())
    assert jobs == ["0", "1", "2", "3"]
    settings = set()
    for job in jobs:
        run = summary(sweep_dir / job)
        assert run["status"] == "completed", run["error"]
        assert (sweep_dir / job / "metrics.csv").is_file()
        assert (sweep_dir / job / "checkpoints" / "last.ckpt").is_file()
        settings.add(tuple(o for o in run["overrides"] if o.startswith(("model.norm", "seed"))))
    assert settings == {(f"model.norm={n}", f"seed={s}") for n in ("pre", "post") for s in (1, 2)}
    assert "sweep: 4/4 jobs completed" in result.stdout
    # side-by-side jobs print one line when they start and one when they end, no bars; two
    # processes share the pipe, and a block-buffered write of one (Lightning's messages) can
    # cut the other's line, so a job line is looked for anywhere, not only at a line start
    started = re.findall(r"job \d \[[^\]\n]*model\.norm=\w+[^\]\n]*\] started in ", result.stdout)
    assert len(started) == 4, result.stdout[-3000:]
    assert len(re.findall(r"job \d \[[^\]\n]*\] completed val/.*val/loss=", result.stdout)) == 4
    assert "━" not in result.stdout


def test_attnlab_compare_tabulates_the_sweep_with_a_p_value_and_a_plot(
    sweeps: dict, tmp_path: Path
) -> None:
    _, sweep_dir = _done(sweeps, "joblib")
    plot = tmp_path / "curves.png"
    result = run("compare", str(sweep_dir), "--plot", str(plot), timeout=120)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert any(re.search(r"\|\s*pre\s*\|", r) for r in rows), result.stdout
    assert any(re.search(r"\|\s*post\s*\|", r) for r in rows), result.stdout
    assert sum("±" in r for r in rows) == 2
    welch = r"Welch t-test on val/loss: .* p=\S+ \(n=2 vs 2\)"
    assert re.search(welch, result.stdout + result.stderr)
    assert plot.is_file() and plot.stat().st_size > 1000


def test_one_failing_job_does_not_stop_the_sweep_but_the_exit_code_says_so(sweeps: dict) -> None:
    result, sweep_dir = _done(sweeps, "failing")
    assert result.returncode == 1
    failed, completed = summary(sweep_dir / "0"), summary(sweep_dir / "1")
    assert failed["status"] == "failed"
    assert "model.max_len=8 is shorter than" in failed["error"]
    assert completed["status"] == "completed" and completed["error"] is None
    assert "val/loss" in completed["metrics"]
    assert "sweep: 1/2 jobs completed" in result.stdout
    assert "error: job 0: model.max_len=8" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_an_optuna_search_runs_its_trials_and_reports_the_best(tmp_path: Path) -> None:
    proc = start("train", "-m", *TINY, "data=majority", "hparams_search=optuna",
                 "hydra.sweeper.n_trials=3", f"paths.log_dir={tmp_path}")  # fmt: skip
    result, sweep_dir = _done({"optuna": (proc, tmp_path)}, "optuna")
    assert result.returncode == 0, result.stderr[-3000:]
    trials = [summary(p) for p in sorted(sweep_dir.iterdir()) if (p / "summary.json").is_file()]
    assert len(trials) == 3
    for trial in trials:
        assert {o.split("=")[0] for o in trial["overrides"]} >= {
            "optim.lr", "optim.warmup_steps", "model.dropout"}  # fmt: skip
        assert 1e-4 <= trial["config"]["optim"]["lr"] <= 1e-2
    best = OmegaConf.load(sweep_dir / "optimization_results.yaml")
    assert best.best_value == pytest.approx(min(t["metrics"]["val/loss"] for t in trials))


def test_the_optuna_search_space_composes(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnlab.cli.common import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", ["hparams_search=optuna"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    sweeper = cfg.hydra.sweeper
    assert "optuna" in sweeper._target_.lower()
    assert sweeper.direction == "minimize" and sweeper.n_trials == 20
    assert sweeper.sampler.seed is not None and "TPESampler" in sweeper.sampler._target_
    assert set(sweeper.params) == {"optim.lr", "optim.warmup_steps", "model.dropout"}
    assert cfg.optimized_metric == "val/loss"


def test_run_dirs_of_runs_started_in_the_same_second_differ(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnlab.cli.common import config_dir, register_resolvers

    register_resolvers()
    dirs = []
    for _ in range(3):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose("config", [], return_hydra_config=True)
        run_dir = str(cfg.hydra.run.dir)
        assert str(cfg.hydra.run.dir) == run_dir  # resolved once, then cached
        dirs.append(run_dir)
    GlobalHydra.instance().clear()
    assert len(set(dirs)) == 3


def test_the_slurm_launcher_config_makes_a_valid_sbatch_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No SLURM here: compose hydra/launcher=slurm and have submitit write the sbatch file
    with the parameters Hydra's launcher would pass (a stub ``srun`` satisfies its check)."""
    submitit = pytest.importorskip("submitit")
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    from attnlab.cli.common import config_dir, register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)  # fmt: skip
    GlobalHydra.instance().clear()
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert params.pop("_target_").endswith("SlurmLauncher")
    params.pop("submitit_folder")
    params["name"] = "train"
    base = set(OmegaConf.structured(BaseQueueConf).keys())

    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "srun").write_text("#!/bin/sh\nexit 0\n")
    (stub / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}{os.pathsep}{os.environ['PATH']}")
    timeouts = params.pop("max_num_timeout")
    executor = submitit.AutoExecutor(
        folder=str(tmp_path / "%j"), cluster="slurm", slurm_max_num_timeout=timeouts
    )
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("attnlab-train", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=1", "--ntasks-per-node=1", "--nodes=1",
                 "--time=240", "--mem=64GB", "--cpus-per-task=8", "--signal=USR2@120"):  # fmt: skip
        assert f"#SBATCH {line}" in script
    assert executor._executor.parameters.get("array_parallelism", 32) == 32


def test_a_nan_loss_stops_the_run_and_marks_it_diverged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.cli.run import train
    from attnlab.tasks.base import Task

    real_loss = Task.loss
    monkeypatch.setattr(Task, "loss", lambda self, *a, **k: real_loss(self, *a, **k) * float("nan"))
    cfg = compose_run([*TINY, "data=majority", "trainer.max_epochs=3"], tmp_path)
    result = train(cfg, tmp_path)
    assert result["status"] == "diverged"
    assert result["stopped_at_step"] == 1
    assert "non-finite loss at step 0" in result["error"]
