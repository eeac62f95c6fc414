"""The real Hydra configs, composed for a run in a given directory (as attnlab-train does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from attnlab.cli.common import config_dir, register_resolvers

# one train/val/test batch of a small data set, no optional callbacks
FAST_DEV_RUN = [
    "trainer.fast_dev_run=true", "trainer.enable_progress_bar=false",
    "data.train_size=64", "data.val_size=16", "data.test_size=16", "callbacks=none",
]  # fmt: skip
TINY_MODEL = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1"]


def sized(tiny: list[str], overrides: list[str]) -> list[str]:
    """``tiny``'s model sizes for the architecture ``overrides`` choose: only the keys it
    reads (``model.n_heads`` where it has attention heads; a key it does not read is
    refused)."""
    from attnlab.components import FAMILIES

    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("model=")]
    arch = FAMILIES["name"].get(chosen[-1] if chosen else "encoder_decoder")
    reads = {key for part in (arch, *arch.parts) for key in part.keys}
    return [o for o in tiny if o.split("=", 1)[0].removeprefix("model.") in reads]


def compose_run(overrides: list[str], run_dir: Path) -> DictConfig:
    """conf/config.yaml with ``overrides``; ``${hydra:runtime.output_dir}`` is ``run_dir``.

    Hydra fills ``hydra.runtime`` only inside a real run, so it is set here and
    registered with HydraConfig, which the ``hydra:`` resolver reads.
    """
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            "config", overrides=[*overrides, f"hydra.run.dir={run_dir}"], return_hydra_config=True
        )
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(cfg)
    return cfg


def train_fast(overrides: list[str], run_dir: Path) -> dict[str, Any]:
    """``attnlab.train.train`` on a fast_dev_run of a tiny model; returns its result."""
    from attnlab.cli.run import train

    run_dir.mkdir(parents=True, exist_ok=True)  # Hydra creates it in a real run
    args = [*sized(TINY_MODEL, overrides), *FAST_DEV_RUN, *overrides]
    return train(compose_run(args, run_dir), run_dir)
