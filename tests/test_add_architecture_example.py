"""docs/extending.md's "Add your own architecture" really works: its DAN class, config and
YAML, as written.

The config runs as if pasted into ``attnlab/components/architectures.py`` (its family is
restored afterwards), the class as if saved as ``attnlab/models/dan.py``; the YAML goes into
a copy of ``conf/``, from which the run is composed.
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import attnlab.components.architectures
import composed_runs
from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.tasks import check_compatible
from documented import block_with, conf_with, declare, section

ARCHITECTURE = section("Add your own architecture")


def add_documented_architecture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The documented config declared (its family restored after the test), its class where
    the config says it lives, and its YAML in a copy of ``conf/`` that the tests' and the
    command line's composition read."""
    config = block_with(ARCHITECTURE, "class DeepAveragingConfig")
    # the class module imports its config: declare it first, then run the class as dan.py
    declared = declare(monkeypatch, config, "attnlab.components.architectures", {})
    namespace = {"__name__": "attnlab.models.dan"}
    monkeypatch.setattr(attnlab.components.architectures, "DeepAveragingConfig", declared,
                        raising=False)
    exec(compile(block_with(ARCHITECTURE, "class DeepAveragingNetwork"), "extending.md",
                 "exec"), namespace)  # fmt: skip
    dan = types.ModuleType("attnlab.models.dan")
    dan.DeepAveragingNetwork = namespace["DeepAveragingNetwork"]
    monkeypatch.setitem(sys.modules, "attnlab.models.dan", dan)
    conf_with(monkeypatch, tmp_path, {"model/dan.yaml": block_with(ARCHITECTURE, "name: dan",
                                                                   kind="yaml")})  # fmt: skip


@pytest.fixture
def dan_registered(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    add_documented_architecture(monkeypatch, tmp_path)


def test_the_documented_dan_averages_embeddings(dan_registered: None) -> None:
    cfg = ModelConfig.from_dict({"name": "dan", "vocab_size": 20, "d_model": 8, "n_layers": 1,
                                 "dropout": 0.0})  # fmt: skip
    model = build_model(cfg, "classification")
    tokens = torch.tensor([[7, 8, 0, 0], [9, 9, 9, 9]])
    average = model.embedding.weight[[7, 8]].mean(0)
    torch.testing.assert_close(model.pooled(tokens)[0], model.layers(average))
    with pytest.raises(ConfigError, match="model=dan does not fit a seq2seq"):
        check_compatible("dan", "seq2seq")


def test_the_documented_dan_trains_through_the_configs(dan_registered: None, tmp_path: Path):
    result = composed_runs.train_fast(["model=dan", "data=majority"], tmp_path / "run")
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])
    composed = composed_runs.compose_run(["model=dan"], tmp_path / "other")
    given = OmegaConf.to_container(composed.model)
    resolved = ModelConfig.from_dict(given)
    assert resolved.name == "dan" and resolved.d_model == 128  # its config's default
    with pytest.raises(ConfigError, match=r"model\.n_heads=4 applies to .*not model=dan"):
        ModelConfig.from_dict({**given, "n_heads": 4})
