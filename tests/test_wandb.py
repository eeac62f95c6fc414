"""Weights & Biases: offline runs that carry name, group, flat config and metrics; no prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attnlab.cli.wandb_setup import ensure_mode, finish_wandb, prepare_wandb, run_name
from cli_runs import REPO_ROOT, TINY, compose_run, only_dir, run, wandb_run_contents


@pytest.fixture(scope="module")
def offline_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    logs = tmp_path_factory.mktemp("wandb")
    result = run("train", "-m", *TINY, "data=majority", "model=decoder_only", "logger=wandb",
                 "model.norm=pre,post", "seed=1", "tags=[ablation,tiny]",
                 "trainer.log_every_n_steps=1", f"paths.log_dir={logs}",
                 WANDB_MODE="offline")  # fmt: skip
    return result, only_dir(logs / "train" / "multiruns")


def _contents(job_dir: Path) -> dict:
    run_file = only_dir(job_dir / "wandb", "offline-run-*")
    return wandb_run_contents(next(run_file.glob("run-*.wandb")))


def test_an_offline_sweep_run_carries_name_group_tags_and_job_type(offline_sweep: tuple) -> None:
    result, sweep_dir = offline_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    names = set()
    for job in ("0", "1"):
        contents = _contents(sweep_dir / job)
        names.add(contents["name"])
        assert contents["group"] == sweep_dir.name
        assert contents["job_type"] == "train"
        assert contents["tags"] == ["ablation", "tiny"]
        assert (sweep_dir / job / "wandb_id.txt").read_text() == contents["id"]
    assert names == {"pre", "post"}  # only the swept value names the run


def test_the_config_is_logged_flat_with_git_sha_and_command(offline_sweep: tuple) -> None:
    _, sweep_dir = offline_sweep
    config = _contents(sweep_dir / "1")["config"]
    values = {k: v["value"] if isinstance(v, dict) and "value" in v else v
              for k, v in config.items()}  # fmt: skip
    assert values["model.norm"] == "post"
    assert values["model.pos"] == "sinusoidal"
    assert values["model.name"] == "decoder_only"
    assert values["data.kind"] == "majority"
    assert values["seed"] == 1
    assert values["command"].startswith("attnlab-train ")
    assert "model.norm=post" in values["command"] and "model.norm=pre,post" not in values["command"]
    assert "git_sha" in values
    nested = [k for k, v in values.items() if isinstance(v, dict) and not k.startswith("_")]
    assert nested == []  # every setting under its dotted name


def test_metrics_and_summaries_are_logged(offline_sweep: tuple) -> None:
    _, sweep_dir = offline_sweep
    contents = _contents(sweep_dir / "0")
    logged = {key for row in contents["history"] for key in row}
    assert {"val/loss", "val/acc", "train/loss", "trainer/global_step"} <= logged
    assert set(contents["summary"]["val/loss"]) == {"min"}
    assert set(contents["summary"]["val/acc"]) == {"max"}
    assert contents["summary"]["status"] == "completed"


def test_the_sweep_prints_how_to_upload_its_offline_runs(offline_sweep: tuple) -> None:
    result, sweep_dir = offline_sweep
    assert f"wandb sync {sweep_dir}/*/wandb/offline-run-*" in result.stdout


def test_a_resumed_run_logs_to_the_same_wandb_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_run(["logger=wandb", "data=majority"], tmp_path)
    ids = []
    for _ in range(2):
        logger = prepare_wandb(cfg, cfg.logger.wandb, tmp_path)
        ids.append(logger.experiment.id)
        finish_wandb([logger], "completed")
    assert ids[0] == ids[1] == (tmp_path / "wandb_id.txt").read_text()


def test_wandb_mode_disabled_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = compose_run(["logger=wandb", "data=majority"], tmp_path)
    logger = prepare_wandb(cfg, cfg.logger.wandb, tmp_path)
    logger.log_metrics({"val/loss": 1.0}, step=0)
    finish_wandb([logger], "completed")
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "wandb_id.txt").exists()


def test_without_credentials_wandb_goes_offline_instead_of_prompting(
    tmp_path: Path, monkeypatch
) -> None:
    for key in ("WANDB_MODE", "WANDB_API_KEY", "NETRC"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert ensure_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert ensure_mode() == "disabled"


def test_run_names_come_from_the_values_that_vary() -> None:
    overrides = ["model=decoder_only", "model.norm=post", "seed=1", "trainer.max_epochs=3"]
    assert run_name(overrides) == "decoder_only·post·seed1"
    assert run_name(overrides, varying={"model.norm", "seed"}) == "post·seed1"
    assert run_name(["optim.lr=0.001"], varying={"optim.lr"}) == "lr0.001"


def test_the_wandb_sweep_file_drives_attnlab_train_with_hydra_overrides() -> None:
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    from attnlab.cli.compose import validate_overrides

    sweep = yaml.safe_load((REPO_ROOT / "conf" / "wandb_sweep" / "norm_ablation.yaml").read_text())
    assert sweep["command"] == ["${env}", "attnlab-train", "${args_no_hyphens}"]
    assert sweep["metric"] == {"name": "val/loss", "goal": "minimize"}
    # what `wandb agent` would pass for the first grid point
    first = {key: {"value": spec["values"][0] if "values" in spec else spec["value"]}
             for key, spec in sweep["parameters"].items()}  # fmt: skip
    args = create_sweep_command_args({"args": first})["args_no_hyphens"]
    assert "model.norm=pre" in args
    cfg = validate_overrides(args, multirun=False)
    assert cfg.model.norm == "pre" and "wandb" in cfg.logger
