"""What a first run on one or several GPUs would meet, checked on a CPU: each rank's own
device, sharded memory needs, FSDP's clipping and weight-decay groups, compiled pooling,
host syncs, MFU peaks, and the launcher environments (fake ``LOCAL_RANK``/``SLURM_*``)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from attnlab.cli import pipeline
from attnlab.cli.common import config_dir, register_resolvers
from attnlab.errors import ConfigError


def trainer_config(name: str, *overrides: str):  # noqa: ANN201
    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=[f"trainer={name}", *overrides]).trainer


def test_free_memory_is_read_on_this_ranks_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare torch.cuda.mem_get_info() opens a context on GPU 0 in every rank."""
    asked: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda device=None: (asked.append(device), (2**30, 2**31))[1])  # fmt: skip
    monkeypatch.setenv("LOCAL_RANK", "3")
    have, where = pipeline.available_memory("gpu")
    assert asked == [torch.device("cuda", 3)] and have == 2**30 and "GPU 3" in where
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("SLURM_LOCALID", "5")  # srun starts the tasks itself
    pipeline.available_memory("gpu")
    assert asked[-1] == torch.device("cuda", 5)


@pytest.mark.parametrize(("name", "overrides", "expected"), [
    ("fsdp", ["trainer.devices=4", "trainer.num_nodes=2"], 8),
    ("ddp", ["trainer.devices=4", "trainer.num_nodes=2"], 1),  # a whole copy on each rank
    ("gpu", [], 1),
])  # fmt: skip
def test_sharded_strategies_divide_the_training_state(
    name: str, overrides: list[str], expected: int
) -> None:
    assert pipeline.shards(trainer_config(name, *overrides)) == expected


def test_a_model_that_fits_when_sharded_is_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model = {"name": "decoder_only", "d_model": 64, "n_heads": 4, "n_layers": 2,
             "vocab_size": 100}  # fmt: skip
    from attnlab.models import ModelConfig, build_model

    with torch.device("meta"):
        params = build_model(ModelConfig.from_dict(model), "lm").num_params()
    need = params * pipeline.TRAINING_BYTES_PER_PARAM
    monkeypatch.setattr(pipeline, "available_memory", lambda accelerator: (need // 4, "free"))
    with pytest.raises(ConfigError, match="need at least"):
        pipeline.check_memory(model, "gpu", "lm")
    pipeline.check_memory(model, "gpu", "lm", sharded_over=8)  # 1/8 of it on each device
    with pytest.raises(ConfigError, match="sharded over 2 devices"):
        pipeline.check_memory(model, "gpu", "lm", sharded_over=2)


def test_is_primary_process_reads_slurm_procid(monkeypatch: pytest.MonkeyPatch) -> None:
    """submitit and srun start every task themselves: only task 0 writes train.log."""
    from attnlab.cli.rundir import is_primary_process

    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert is_primary_process()
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert not is_primary_process()
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert is_primary_process()
