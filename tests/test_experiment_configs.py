"""Every experiment preset composes, and its model and optimiser keys validate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from attnlab.cli.common import config_dir
from attnlab.cli.pipeline import check_config
from attnlab.data.base import AttnlabDataModule
from attnlab.tasks import check_compatible
from composed_runs import compose_run

PRESETS = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))


def test_presets_are_found() -> None:
    assert "study_architectures_sst2_prefix_lm" in PRESETS and len(PRESETS) > 10


@pytest.mark.parametrize("name", PRESETS)
def test_experiment_preset_composes_and_validates(name: str, tmp_path: Path) -> None:
    cfg = compose_run([f"experiment={name}"], tmp_path)
    check_config(cfg)
    OmegaConf.to_container(cfg.model, resolve=True)
    data_class = get_class(cfg.data._target_)
    assert issubclass(data_class, AttnlabDataModule)
    task = data_class.task  # a class attribute, except for synthetic data (by its kind)
    if "kind" in cfg.data:
        task = "classification" if cfg.data.kind == "majority" else "seq2seq"
    check_compatible(str(cfg.model.name), task, bool(cfg.model.prefix_lm))
