"""Data parallel training: trainer=ddp_cpu through the command line, and the GPU configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class

from attnlab.cli.common import config_dir, register_resolvers, torchrun_run_dir
from attnlab.errors import UserError

REPO = Path(__file__).resolve().parents[1]


OVERRIDES = [
    "trainer=ddp_cpu", "model=decoder_only", "data=copy", "data.train_size=256",
    "data.val_size=64", "data.test_size=64", "data.batch_size=16", "trainer.max_steps=4",
    "trainer.max_epochs=1", "trainer.log_every_n_steps=1",
    "+callbacks.rank_checksum._target_=rank_checksum.ParameterChecksum",
]  # fmt: skip


def train(cwd: Path, command: list[str]) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]),
        "WANDB_MODE": "offline",
        "ATTNLAB_LOG_DIR": str(cwd / "logs"),
        "ATTNLAB_EXTRA_TARGETS": "rank_checksum.ParameterChecksum",  # the test's own callback
    }
    return subprocess.run(
        [sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """Four optimizer steps of a small decoder on two gloo processes that Lightning starts."""
    cwd = tmp_path_factory.mktemp("ddp")
    return cwd / "logs", train(cwd, ["-m", "attnlab.train", *OVERRIDES])


@pytest.mark.slow
def test_ddp_cpu_trains_two_ranks_into_one_run_directory(ddp_run) -> None:
    logs, done = ddp_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Starting with 2 processes" in done.stdout + done.stderr
    runs = [p for p in (logs / "train" / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, f"each rank made its own run directory: {runs}"


@pytest.mark.slow
def test_ddp_ranks_end_with_identical_parameters(ddp_run) -> None:
    logs, _ = ddp_run
    records = [json.loads(p.read_text()) for p in logs.rglob("param_checksum_rank*.json")]
    assert sorted(r["rank"] for r in records) == [0, 1]
    assert all(r["world_size"] == 2 and r["step"] == 4 for r in records)
    assert records[0]["sha256"] == records[1]["sha256"]


@pytest.mark.slow
def test_only_rank_zero_writes_summary_and_logs(ddp_run) -> None:
    logs, _ = ddp_run
    assert len(list(logs.rglob("summary.json"))) == 1
    assert len(list(logs.rglob("metrics.csv"))) == 1
    assert len(list(logs.rglob(".hydra"))) == 1
    (run,) = (p.parent for p in logs.rglob("summary.json"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert "trainer=ddp_cpu" in summary["overrides"]
    assert (run / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_torchrun_ranks_share_one_run_directory(tmp_path: Path) -> None:
    # torchrun starts every rank itself; without hydra.run.dir each would resolve its own
    # timestamped directory, so attnlab names one after the rendezvous id
    done = train(tmp_path, [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "attnlab.train", *OVERRIDES,
    ])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = list((tmp_path / "logs" / "train" / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("torchrun_")
    records = [json.loads(p.read_text()) for p in runs[0].glob("param_checksum_rank*.json")]
    assert len(records) == 2 and records[0]["sha256"] == records[1]["sha256"]
    assert json.loads((runs[0] / "summary.json").read_text())["status"] == "completed"


def test_torchrun_run_directory_comes_from_the_rendezvous_id() -> None:
    env = {"TORCHELASTIC_RUN_ID": "job/42", "WORLD_SIZE": "4"}
    assert torchrun_run_dir(["data=copy"], env) == [
        "data=copy",
        "hydra.run.dir=${paths.log_dir}/${task_name}/runs/torchrun_job_42",
    ]
    given = ["hydra.run.dir=/shared/run"]
    assert torchrun_run_dir(given, env) == given  # the user's choice wins
    assert torchrun_run_dir(["-m", "seed=1,2"], env) == ["-m", "seed=1,2"]
    assert torchrun_run_dir(["data=copy"], {}) == ["data=copy"]  # not under torchrun
    assert torchrun_run_dir(["data=copy"], {**env, "WORLD_SIZE": "1"}) == ["data=copy"]
    with pytest.raises(UserError, match="--rdzv-id"):
        torchrun_run_dir(["data=copy"], {**env, "TORCHELASTIC_RUN_ID": "none"})


def compose_trainer(name: str):
    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=[f"trainer={name}"]).trainer


@pytest.mark.parametrize(
    "name,precision,strategy",
    [("gpu", "bf16-mixed", None), ("ddp", "bf16-mixed", "ddp"), ("ddp_cpu", "32-true", "ddp")],
)
def test_accelerated_trainer_configs_compose(name: str, precision: str, strategy: str) -> None:
    trainer = compose_trainer(name)
    assert trainer.precision == precision
    assert trainer.get("strategy") == strategy


def test_fsdp_config_composes_to_an_fsdp_strategy() -> None:
    trainer = compose_trainer("fsdp")
    assert trainer.precision == "bf16-mixed" and trainer.accelerator == "gpu"
    strategy = get_class(trainer.strategy._target_)
    assert strategy.__name__ == "FSDPStrategy"
    assert trainer.strategy.sharding_strategy == "FULL_SHARD"
