"""Data parallel training: trainer=ddp_cpu through the command line, and the GPU configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from torch.utils.data import DataLoader, TensorDataset

from attnlab.cli.common import config_dir, register_resolvers, torchrun_run_dir
from attnlab.data.base import without_repeats
from attnlab.errors import UserError

REPO = Path(__file__).resolve().parents[1]


OVERRIDES = [
    "trainer=ddp_cpu", "model=decoder_only", "data=copy", "data.train_size=256",
    "data.val_size=64", "data.test_size=64", "data.batch_size=16", "trainer.max_steps=4",
    "trainer.max_epochs=1", "trainer.log_every_n_steps=1",
    "+callbacks.rank_checksum._target_=rank_checksum.ParameterChecksum",
]  # fmt: skip


def train(cwd: Path, command: list[str], extra_targets: str = "rank_checksum.ParameterChecksum"
          ) -> subprocess.CompletedProcess:  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]),
        "WANDB_MODE": "offline",
        "ATTNLAB_LOG_DIR": str(cwd / "logs"),
        "ATTNLAB_EXTRA_TARGETS": extra_targets,  # the test's own callbacks
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


# two ranks of 16 examples a step: 2 steps an epoch, so the stop at step 2 is an epoch end;
# every sequence as long as the next, so each step draws as many dropout numbers
DROPOUT = [
    "trainer=ddp_cpu", "model=decoder_only", "data=copy", "data.train_size=64",
    "data.val_size=16", "data.test_size=16", "data.batch_size=16", "data.min_len=8",
    "data.max_len=8", "model.dropout=0.3", "model.d_model=16", "model.n_heads=2",
    "model.n_layers=1", "optim.warmup_steps=1", "optim.decay_steps=4", "trainer.max_epochs=-1",
    "test=false", "trainer.enable_progress_bar=false",
    "+callbacks.rng_checksum._target_=rank_checksum.RngChecksum",
]  # fmt: skip


@pytest.mark.slow
def test_a_resumed_ddp_run_continues_every_ranks_own_random_states(tmp_path: Path) -> None:
    """Every rank's random states are saved and restored: after the resume, rank 1 draws
    its own dropout masks, as in the run that never stopped — not rank 0's."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    for args in ([f"hydra.run.dir={whole}", "trainer.max_steps=4"],
                 [f"hydra.run.dir={parts}", "trainer.max_steps=2"],
                 [f"hydra.run.dir={parts}", "trainer.max_steps=4", "ckpt_path=last"]):
        done = train(tmp_path, ["-m", "attnlab.train", *DROPOUT, *args],
                     extra_targets="rank_checksum.RngChecksum")  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        for step in (3, 4):  # the steps after the resume
            name = f"rng_rank{rank}_step{step}.txt"
            assert (whole / name).read_text() == (parts / name).read_text(), name
    ranks = [(whole / f"rng_rank{rank}_step3.txt").read_text() for rank in (0, 1)]
    assert ranks[0] != ranks[1]  # the ranks' generators differ, so the check can fail


@pytest.mark.slow
def test_ddp_trains_a_classifier_that_leaves_parameters_unused(tmp_path: Path) -> None:
    """encoder_decoder pooling its encoder by mean never uses its decoder: under DDP
    (find_unused_parameters=False) that failed at the second step."""
    done = train(tmp_path, ["-m", "attnlab.train", "trainer=ddp_cpu", "model=encoder_decoder",
                            "model.pool=mean", "data=majority", "data.train_size=64",
                            "data.val_size=16", "data.test_size=16", "data.batch_size=8",
                            "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
                            "trainer.max_steps=3",
                            "trainer.enable_progress_bar=false"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_ddp_trains_a_mixture_of_experts_whose_ranks_agree(tmp_path: Path) -> None:
    """ffn=moe with more experts than a small batch fills (an expert without tokens still
    gets a gradient) and a balancing bias updated from the load summed over the ranks."""
    moe = [
        "model.ffn=moe", "model.moe_experts=8", "model.moe_top_k=1", "model.moe_shared_experts=1",
        "model.moe_bias_rate=0.01", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
        "data.batch_size=2", "data.max_len=4",
    ]  # fmt: skip
    done = train(tmp_path, ["-m", "attnlab.train", *OVERRIDES, *moe])
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in tmp_path.rglob("param_checksum_rank*.json")]
    assert len(records) == 2 and records[0]["sha256"] == records[1]["sha256"]
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    state = torch.load(checkpoint, weights_only=True)["state_dict"]
    assert state["model.decoder.layers.0.ffn.balance_bias"].abs().sum() > 0


@pytest.mark.slow
def test_the_final_test_under_ddp_scores_each_example_once(tmp_path: Path) -> None:
    """5 test examples over 2 ranks: 3 + 2, not 3 + 3 with one repeated to even the shares."""
    run_dir = tmp_path / "run"
    done = train(tmp_path, ["-m", "attnlab.train", "trainer=ddp_cpu", "model=encoder_only",
                            "data=majority", "data.train_size=32", "data.val_size=8",
                            "data.test_size=5", "data.batch_size=2", "model.d_model=16",
                            "model.n_heads=2", "model.n_layers=1", "trainer.max_steps=2",
                            "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}",
                            "+callbacks.count._target_=rank_checksum.TestExampleCount"],
                 extra_targets="rank_checksum.TestExampleCount")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    counts = sorted(int((run_dir / f"test_examples_rank{r}.txt").read_text()) for r in (0, 1))
    assert counts == [2, 3]


def test_a_test_loader_read_in_order_is_split_over_the_processes_without_repeats() -> None:
    loader = DataLoader(TensorDataset(torch.arange(5)), batch_size=2)
    shares = [[int(x) for (batch,) in without_repeats(
        loader, SimpleNamespace(world_size=2, global_rank=rank)) for x in batch]
        for rank in (0, 1)]  # fmt: skip
    assert sorted(shares[0] + shares[1]) == [0, 1, 2, 3, 4]
    assert sorted(len(share) for share in shares) == [2, 3]


def test_a_shuffled_or_single_process_test_loader_is_left_as_it_is() -> None:
    data = TensorDataset(torch.arange(5))
    shuffled, in_order = DataLoader(data, shuffle=True), DataLoader(data)
    assert without_repeats(shuffled, SimpleNamespace(world_size=2, global_rank=0)) is shuffled
    assert without_repeats(in_order, SimpleNamespace(world_size=1, global_rank=0)) is in_order
    assert without_repeats(in_order, None) is in_order


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


def test_ckpt_path_last_under_torchrun_finds_the_shared_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchrun's ranks get ``hydra.run.dir=${paths.log_dir}/…/torchrun_<id>``: a resume
    looks for last.ckpt there, with the path resolved (not the literal ``${…}`` text)."""
    from attnlab.cli.compose import compose_config, resume_overrides

    monkeypatch.setenv("ATTNLAB_LOG_DIR", str(tmp_path / "logs"))
    env = {"TORCHELASTIC_RUN_ID": "job42", "WORLD_SIZE": "2"}
    overrides = torchrun_run_dir(["data=copy", "ckpt_path=last"], env)
    last = tmp_path / "logs" / "train" / "runs" / "torchrun_job42" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")
    resumed = resume_overrides(compose_config(overrides), overrides)
    assert f"ckpt_path={last}" in resumed


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


# data=tokens on two ranks of batch 4: 48 samples an epoch are 6 steps; a stop at 4 is
# mid-epoch and the resumed run crosses into the next epoch
TOKENS = [
    "model=decoder_only", "data=tokens", "data.block_size=32", "data.samples_per_epoch=48",
    "data.eval_blocks=8", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
    "model.dropout=0.2", "optim.warmup_steps=1", "optim.decay_steps=8", "trainer.max_epochs=-1",
    "test=false", "trainer.enable_progress_bar=false",
    "+callbacks.rank_checksum._target_=rank_checksum.ParameterChecksum",
    "+callbacks.rows._target_=rank_checksum.BatchRows",
]  # fmt: skip
TOKEN_TARGETS = "rank_checksum.ParameterChecksum,rank_checksum.BatchRows"


def _rows(run_dir: Path, rank: int, step: int) -> list[str]:
    return (run_dir / f"rows_rank{rank}_step{step}.txt").read_text().split()


@pytest.fixture(scope="module")
def token_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from token_folders import prepared_folder

    return prepared_folder(tmp_path_factory.mktemp("token_folder"))


@pytest.mark.slow
def test_a_ddp_run_on_tokens_killed_mid_epoch_resumes_to_the_same_weights(
    tmp_path: Path, token_folder: Path
) -> None:
    """Every rank continues with its next unseen batch (and its own dropout states): the
    final weights equal those of the run that never stopped."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    common = [*TOKENS, "trainer=ddp_cpu", "data.batch_size=4", f"data.path={token_folder}"]
    for args in ([f"hydra.run.dir={whole}", "trainer.max_steps=8"],
                 [f"hydra.run.dir={parts}", "trainer.max_steps=4"],
                 [f"hydra.run.dir={parts}", "trainer.max_steps=8", "ckpt_path=last"]):
        done = train(tmp_path, ["-m", "attnlab.train", *common, *args], TOKEN_TARGETS)
        assert done.returncode == 0, done.stderr[-3000:]
    for step in range(8):
        ranks = [_rows(whole, r, step) for r in (0, 1)]
        assert not set(ranks[0]) & set(ranks[1])  # disjoint samples
        assert [_rows(parts, r, step) for r in (0, 1)] == ranks, step
    checksums = {d.name: {json.loads(p.read_text())["sha256"]
                          for p in d.glob("param_checksum_rank*.json")} for d in (whole, parts)}
    assert len(checksums["whole"]) == 1 and checksums["whole"] == checksums["parts"]


@pytest.mark.slow
def test_a_ddp_run_on_tokens_resumed_on_one_process_continues_without_repeating(
    tmp_path: Path, token_folder: Path
) -> None:
    """Two ranks of batch 4 for 3 steps, then one process of batch 8 from their
    checkpoint: the samples read are those of one process of batch 8 from the start."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    data = [*TOKENS, f"data.path={token_folder}"]
    for args in (["trainer=cpu", "data.batch_size=8", f"hydra.run.dir={whole}",
                  "trainer.max_steps=6"],
                 ["trainer=ddp_cpu", "data.batch_size=4", f"hydra.run.dir={parts}",
                  "trainer.max_steps=3"],
                 ["trainer=cpu", "data.batch_size=8", f"hydra.run.dir={parts}",
                  "trainer.max_steps=6", f"ckpt_path={parts / 'checkpoints' / 'last.ckpt'}"]):
        done = train(tmp_path, ["-m", "attnlab.train", *data, *args], TOKEN_TARGETS)
        assert done.returncode == 0, done.stderr[-3000:]
    for step in range(6):
        read = _rows(parts, 0, step) + (_rows(parts, 1, step) if step < 3 else [])
        assert read == _rows(whole, 0, step), step


@pytest.mark.slow
@pytest.mark.parametrize("optimiser", ["muon", "lion", "adafactor"])
def test_each_optimiser_trains_under_ddp_with_identical_ranks(
    tmp_path: Path, optimiser: str
) -> None:
    done = train(tmp_path, ["-m", "attnlab.train", *OVERRIDES, f"optim.name={optimiser}"])
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in tmp_path.rglob("param_checksum_rank*.json")]
    assert sorted(r["rank"] for r in records) == [0, 1]
    assert records[0]["sha256"] == records[1]["sha256"]
