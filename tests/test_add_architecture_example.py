"""docs/extending.md's "Add your own architecture" really works: its DAN class and YAML, as written.

The class runs as if saved as ``attnlab/models/dan.py``, named by its documented line in
the real catalog (restored afterwards); the YAML goes into a copy of ``conf/``,
from which the run is composed.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest
import torch

import composed_runs
from attnlab.cli.common import config_dir
from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.tasks import check_compatible
from documented import add_to_catalog

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def fenced(kind: str) -> str:
    section = DOC.read_text(encoding="utf-8").split("## Add your own architecture", 1)[1]
    match = re.search(rf"```{kind}\n(.*?)```", section, flags=re.DOTALL)
    assert match, f"{DOC} has no {kind} block in 'Add your own architecture'"
    return match.group(1)


def add_documented_architecture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The README's class registered (the registry is restored after the test) and its YAML
    in a copy of ``conf/`` that the tests' and the command line's composition read."""
    import attnlab.cli.compose

    namespace = {"__name__": "attnlab.models.dan"}
    exec(compile(fenced("python"), str(DOC), "exec"), namespace)
    section = DOC.read_text(encoding="utf-8").split("## Add your own architecture", 1)[1]
    add_to_catalog(monkeypatch, "model", "dan", section, namespace)
    conf = tmp_path / "conf"
    shutil.copytree(config_dir(), conf)
    (conf / "model" / "dan.yaml").write_text(fenced("yaml"), encoding="utf-8")
    monkeypatch.setattr(composed_runs, "config_dir", lambda: conf)
    monkeypatch.setattr(attnlab.cli.compose, "config_dir", lambda: conf)


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
    assert composed.model.name == "dan" and composed.model.d_model == 128
