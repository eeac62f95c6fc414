"""Every experiment preset composes, and its model and optimiser keys validate."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnlab.cli.common import config_dir
from attnlab.cli.pipeline import build, check_config
from attnlab.data.base import AttnlabDataModule
from attnlab.tasks import check_compatible
from composed_runs import compose_run

PRESETS = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))


def test_presets_are_found() -> None:
    assert "study_architectures_sst2_prefix_lm" in PRESETS and len(PRESETS) > 10


@pytest.mark.parametrize("name", PRESETS)
def test_experiment_preset_composes_and_validates(name: str, tmp_path: Path) -> None:
    cfg = compose_run([f"experiment={name}"], tmp_path)
    model = check_config(cfg)
    OmegaConf.to_container(cfg.model, resolve=True)
    datamodule = build(cfg.data, "data")  # as attnlab-train builds it; no data is read yet
    assert isinstance(datamodule, AttnlabDataModule)
    check_compatible(model.name, datamodule.task, model.get("prefix_lm") is True)
