"""Weights & Biases: offline runs that carry name, group, flat config and metrics; no prompts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from attnlab.cli.wandb_setup import (
    ensure_mode,
    finish_wandb,
    init_settings,
    prepare_wandb,
    run_identity,
)
from attnlab.errors import ConfigError
from cli_runs import (
    REPO_ROOT,
    TINY,
    cli_env,
    compose_run,
    only_dir,
    run,
    summary,
    wandb_api_run,
    wandb_run_contents,
)


@pytest.fixture(scope="module")
def offline_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    logs = tmp_path_factory.mktemp("wandb")
    result = run("train", "-m", *TINY, "data=majority", "model=decoder_only", "logger=wandb",
                 "model.norm=pre,post", "seed=0,1", "tags=[ablation,tiny]",
                 "trainer.log_every_n_steps=1", f"paths.log_dir={logs}",
                 WANDB_MODE="offline")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result, only_dir(logs / "train" / "multiruns")


def _run_file(job_dir: Path) -> Path:
    """The offline run file that training wrote (the first one, by its timestamp)."""
    return sorted(job_dir.glob("wandb/offline-run-*/run-*.wandb"))[0]


def _contents(job_dir: Path) -> dict:
    return wandb_run_contents(_run_file(job_dir))


def _values(config: dict) -> dict:
    return {k: v["value"] if isinstance(v, dict) and "value" in v else v
            for k, v in config.items()}  # fmt: skip


def _jobs(sweep_dir: Path) -> list[Path]:
    return sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").is_file())


def test_a_sweep_run_is_named_by_the_overrides_that_vary_and_grouped_without_the_seed(
    offline_sweep: tuple,
) -> None:
    _, sweep_dir = offline_sweep
    seen = set()
    for job in _jobs(sweep_dir):
        overrides = summary(job)["overrides"]
        norm = next(o for o in overrides if o.startswith("model.norm="))
        seed = next(o for o in overrides if o.startswith("seed="))
        contents = _contents(job)
        assert contents["name"] == f"{norm} {seed}"  # model=decoder_only does not vary
        assert contents["group"] == norm
        assert contents["job_type"] == "train"
        assert contents["tags"] == ["ablation", "tiny", sweep_dir.name]
        assert (job / "wandb_id.txt").read_text() == contents["id"]
        seen.add(contents["name"])
    assert len(seen) == 4


def test_the_config_is_logged_flat_with_git_sha_command_overrides_and_model_size(
    offline_sweep: tuple,
) -> None:
    _, sweep_dir = offline_sweep
    job = _jobs(sweep_dir)[1]
    values = _values(_contents(job)["config"])
    recorded = summary(job)
    assert values["model.norm"] == recorded["config"]["model"]["norm"]
    assert values["model.pos"] == "sinusoidal"
    assert values["model.name"] == "decoder_only"
    assert values["data.kind"] == "majority"
    assert values["seed"] == recorded["config"]["seed"]
    assert values["command"].startswith("attnlab-train ")
    assert "model.norm=pre,post" not in values["command"]
    assert values["overrides"] == recorded["overrides"]
    assert "git_sha" in values
    assert values["params"] == recorded["params"] > 0
    nested = [k for k, v in values.items() if isinstance(v, dict) and not k.startswith("_")]
    assert nested == []  # every setting under its dotted name


def test_flops_per_token_is_the_training_count_of_the_architecture(offline_sweep: tuple) -> None:
    from attnlab.callbacks.mfu import flops_per_token
    from attnlab.cli.checkpoints import read_checkpoint
    from attnlab.model_config import ModelConfig

    _, sweep_dir = offline_sweep
    job = _jobs(sweep_dir)[0]
    values = _values(_contents(job)["config"])
    saved = read_checkpoint(job / "checkpoints" / "last.ckpt")["hyper_parameters"]["model"]
    model = ModelConfig.from_dict(dict(saved))
    # a decoder-only classifier reads (0, length) tokens; majority sequences have 5–15 symbols
    by_length = {flops_per_token(model, 0, length): length for length in range(1, 32)}
    assert 5 <= by_length[values["flops_per_token"]] <= 17


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


@pytest.mark.parametrize("mode", ["online", "run"])
def test_wandb_online_without_credentials_is_refused_instead_of_prompting(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("WANDB_MODE", mode)
    with pytest.raises(ConfigError, match=f"WANDB_MODE={mode} needs W&B credentials"):
        ensure_mode()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert ensure_mode() == mode


def test_wandb_init_waits_thirty_seconds_for_the_server_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    assert init_settings() == {"init_timeout": 30}
    assert init_settings({"init_timeout": 120}) == {"init_timeout": 120}
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "120")
    assert init_settings() == {}


def test_an_unreachable_wandb_server_is_one_line(tmp_path: Path) -> None:
    """Credentials but no server (nothing listens on port 9): wandb.init's failure after its
    timeout is one line naming the host and the offline fix, not a traceback."""
    env = cli_env(WANDB_API_KEY="k" * 40, WANDB_BASE_URL="http://127.0.0.1:9",
                  WANDB_INIT_TIMEOUT="1")  # fmt: skip
    del env["WANDB_MODE"]  # online, as with credentials and no WANDB_MODE
    result = subprocess.run([sys.executable, "-m", "attnlab.train", *TINY, "logger=wandb",
                             f"paths.log_dir={tmp_path}"], env=env, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "W&B at http://127.0.0.1:9 did not answer" in errors[0]
    assert "WANDB_MODE=offline" in errors[0]


def test_a_single_run_is_named_by_its_settings_without_bookkeeping_overrides() -> None:
    overrides = ["model=decoder_only", "model.norm=post", "seed=1", "trainer.max_epochs=3",
                 "paths.log_dir=/tmp/x", "logger=wandb", "tags=[a]"]  # fmt: skip
    assert run_identity(overrides) == ("model=decoder_only model.norm=post seed=1",
                                       "model=decoder_only model.norm=post")  # fmt: skip


def test_a_swept_key_names_the_run_and_the_seed_alone_falls_back_to_the_sweep() -> None:
    overrides = ["model.norm=post", "optim.lr=0.001", "seed=1", "hydra.sweep.dir=/tmp/s"]
    varying = {"optim.lr", "seed", "hydra.sweep.dir"}
    assert run_identity(overrides, varying, "sweep") == ("optim.lr=0.001 seed=1", "optim.lr=0.001")
    assert run_identity(["seed=1"], {"seed"}, "sweep") == ("seed=1", "sweep")
    assert run_identity([], None, None) == ("defaults", None)


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


# -- attnlab-compare --wandb, on real W&B run objects built from these runs' records ------


@pytest.fixture
def wandb_api(offline_sweep: tuple, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """``wandb.Api`` serving the sweep's runs as ``wandb.apis.public.Run`` objects: returns
    them (``runs``) and the (path, filters) of every ``api.runs`` call (``calls``)."""
    import wandb

    _, sweep_dir = offline_sweep
    runs = [wandb_api_run(_run_file(job)) for job in _jobs(sweep_dir)]
    calls: list = []

    class Api:
        def __init__(self, **_: object) -> None:
            pass

        def runs(self, path: str, filters: dict | None = None, **_: object) -> list:
            calls.append((path, filters))
            group = (filters or {}).get("group")
            return [r for r in runs if group is None or r.group == group]

    monkeypatch.setattr(wandb, "Api", Api)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return SimpleNamespace(runs=runs, calls=calls)


def _compare(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    from attnlab.compare import main

    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


METRICS = ["--metric", "val/loss", "val/acc", "params"]


def test_compare_from_wandb_pools_seeds_like_the_local_sweep(
    offline_sweep: tuple, wandb_api: SimpleNamespace, capsys: pytest.CaptureFixture
) -> None:
    _, sweep_dir = offline_sweep
    remote = json.loads(_compare(["--wandb", "team/attnlab", *METRICS, "--format", "json"], capsys))
    local = json.loads(_compare([str(sweep_dir), *METRICS, "--format", "json"], capsys))
    assert wandb_api.calls == [("team/attnlab", {})]
    assert [(g["group"], g["n"]) for g in remote] == [("model.norm=post", 2), ("model.norm=pre", 2)]
    assert [(g["group"], g["n"]) for g in local] == [(g["group"], g["n"]) for g in remote]
    for mine, theirs in zip(remote, local, strict=True):
        for metric in ("val/loss", "val/acc", "params"):  # one validation: min = final
            for stat in ("mean", "std"):
                assert mine["metrics"][metric][stat] == pytest.approx(
                    theirs["metrics"][metric][stat], rel=1e-6
                ), (mine["group"], metric, stat)


def test_the_table_header_says_a_wandb_metric_is_its_summary_not_its_last_value(
    wandb_api: SimpleNamespace, capsys: pytest.CaptureFixture
) -> None:
    out = _compare(["--wandb", "team/attnlab", *METRICS], capsys)
    header = out.splitlines()[0]
    assert "| val/loss (min) |" in header and "| val/acc (max) |" in header
    assert "| params |" in header
    assert "val/loss (min), val/acc (max): the W&B run summary" in out


def test_compare_from_wandb_filters_on_config_and_reads_one_group(
    wandb_api: SimpleNamespace, capsys: pytest.CaptureFixture
) -> None:
    out = _compare(["--wandb", "team/attnlab", "--filter", "model.norm=pre", "--filter",
                    "data.kind=majority"], capsys)  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[:2] for row in rows[1:]] == [["| all runs", "2"]]
    _compare(["--wandb", "team/attnlab", "--group", "model.norm=post"], capsys)
    assert wandb_api.calls[-1] == ("team/attnlab", {"group": "model.norm=post"})


def test_a_filter_that_matches_no_run_names_the_values_there_are(
    wandb_api: SimpleNamespace, capsys: pytest.CaptureFixture
) -> None:
    from attnlab.compare import main

    assert main(["--wandb", "team/attnlab", "--filter", "model.norm=sandwich"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --filter model.norm=sandwich matches no run; the runs have "
                   "model.norm=post, pre; check the key and the value")  # fmt: skip
    assert main(["--wandb", "team/attnlab", "--filter", "model.norm"]) == 2
    assert "--filter wants KEY=VALUE" in capsys.readouterr().err


def test_wandb_runs_without_recorded_overrides_group_by_their_settings_alone(
    wandb_api: SimpleNamespace, capsys: pytest.CaptureFixture
) -> None:
    for run_object in wandb_api.runs:  # as runs logged before attnlab recorded its overrides
        del run_object._attrs["config"]["overrides"]
    out = json.loads(_compare(["--wandb", "team/attnlab", "--format", "json"], capsys))
    # command, git_sha, params, seed and W&B's _wandb differ or are no settings
    assert [(g["group"], g["n"]) for g in out] == [("model.norm=post", 2), ("model.norm=pre", 2)]


# -- attnlab-eval logs to the training run ----------------------------------------------


@pytest.fixture
def job(offline_sweep: tuple, tmp_path: Path) -> Path:
    """A copy of the sweep's first job (its W&B files included), to evaluate."""
    _, sweep_dir = offline_sweep
    copy = tmp_path / "job"
    shutil.copytree(_jobs(sweep_dir)[0], copy)
    return copy


def test_eval_logs_its_metrics_to_the_runs_own_wandb_run(job: Path) -> None:
    result = run("eval", f"run_dir={job}", WANDB_MODE="offline")
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = (job / "wandb_id.txt").read_text()
    assert f"W&B (offline): eval/… in run {run_id}" in result.stdout
    files = sorted(job.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2  # training's, then the evaluation's
    evaluation = wandb_run_contents(files[-1])
    assert evaluation["id"] == run_id
    printed = dict(line.split() for line in result.stdout.splitlines() if line.startswith("test/"))
    logged = {k: v for row in evaluation["history"] for k, v in row.items()}
    assert printed and {f"eval/{k}" for k in printed} <= set(logged)
    for name, value in printed.items():
        assert logged[f"eval/{name}"] == pytest.approx(float(value), rel=1e-5)


def test_eval_with_wandb_false_leaves_wandb_alone_and_a_bad_value_is_one_error(
    job: Path,
) -> None:
    bad = run("eval", f"run_dir={job}", "wandb=maybe")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: wandb=maybe is not valid; use wandb=auto, wandb=true or wandb=false"
    )
    result = run("eval", f"run_dir={job}", "wandb=false", WANDB_MODE="offline")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "W&B" not in result.stdout
    assert len(list(job.glob("wandb/offline-run-*"))) == 1
