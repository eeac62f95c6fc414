"""docs/extending.md's "Add your own variant" really works: its ReZero class, config and YAML
line, as written, declare ``model.norm=rezero`` with its own key ``model.rezero_alpha``.

The class runs as if pasted into ``attnlab/nn/norms.py``, the config as if pasted into
``attnlab/components/layers.py``, the YAML line goes into a copy of ``conf/``; all of it is
restored after each test, so a test can declare it again and leaves no trace.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import attnlab.nn.norms as norms
from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from composed_runs import train_fast
from documented import block_with, conf_with, declare, section

VARIANT = section("Add your own variant")


@pytest.fixture
def rezero_declared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    namespace = dict(vars(norms))
    exec(compile(block_with(VARIANT, "class ReZeroResidual"), "extending.md", "exec"), namespace)
    declare(monkeypatch, block_with(VARIANT, "class ReZeroConfig"), "attnlab.components.layers",
            {"ReZeroResidual": namespace["ReZeroResidual"]})  # fmt: skip
    conf_with(monkeypatch, tmp_path, {"model/_base.yaml": block_with(VARIANT, "rezero_alpha",
                                                                     kind="yaml")})  # fmt: skip


def rezero(**keys: object) -> torch.nn.Module:
    cfg = dict(name="decoder_only", vocab_size=20, d_model=32, n_heads=4, dropout=0.0,
               norm="rezero", **keys)  # fmt: skip
    return build_model(ModelConfig.from_dict(cfg))


def test_the_documented_rezero_layers_start_as_the_identity(rezero_declared: None) -> None:
    assert "rezero" in norms.RESIDUALS.names()
    model = rezero()
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    tokens = torch.randint(6, 20, (2, 7))
    embedded = model.decoder.positions.embed(model.embedding(tokens), torch.arange(7))
    torch.testing.assert_close(model.hidden(tokens), embedded)
    model(tokens).logsumexp(-1).sum().backward()  # α learns from the first step
    assert model.decoder.layers[0].ffn_residual.resweight.grad.abs().item() > 0


def test_its_own_key_reaches_alpha_and_belongs_to_it(rezero_declared: None) -> None:
    model = rezero(rezero_alpha=0.25)
    assert {float(m.resweight) for m in model.modules() if hasattr(m, "resweight")} == {0.25}
    with pytest.raises(ConfigError, match=r"model\.rezero_alpha=0\.5 applies to "
                       r"model\.norm=rezero, not model\.norm=pre"):  # fmt: skip
        ModelConfig.from_dict({"name": "decoder_only", "norm": "pre", "rezero_alpha": 0.5})
    with pytest.raises(ConfigError, match=r"model\.rezero_alpha=big must be a number"):
        ModelConfig.from_dict({"name": "decoder_only", "norm": "rezero", "rezero_alpha": "big"})


def test_the_documented_rezero_option_trains_through_the_configs(
    rezero_declared: None, tmp_path: Path
) -> None:
    result = train_fast(["model.norm=rezero", "model.rezero_alpha=0.1"], tmp_path / "run")
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])
