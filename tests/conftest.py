"""Shared test setup: offline, quiet, deterministic, small."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

torch.set_num_threads(1)  # tiny models: more intra-op threads only add synchronisation

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ATTNLAB_DATA_ROOT", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """../shared/data beside the checkout; the test is skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA


def compose(overrides: list[str], run_dir: Path):  # noqa: ANN201 (DictConfig)
    """The real Hydra config for ``overrides``, as a run in ``run_dir`` would see it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from attnlab.cli.common import config_dir, register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


FAST = [
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    "data.train_size=64",
    "data.val_size=16",
    "data.test_size=16",
    "model.d_model=32",
]


@pytest.fixture
def fast_run(tmp_path: Path):  # noqa: ANN201
    """Train one fast_dev_run through the real configs; returns train()'s result."""
    from attnlab.train import train

    def run(*overrides: str) -> dict:
        cfg = compose([*FAST, *overrides], tmp_path)
        return train(cfg, tmp_path)

    return run
