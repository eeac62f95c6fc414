"""docs/extending.md's "Add your own variant" really works: its ReZero class registers, builds
and trains.

The documented code runs as if pasted into ``attnlab/nn/norms.py`` (in a copy
of that module's namespace), and its documented line goes into the real catalog. The
catalog and the registry are restored afterwards, so the test can run again in the
same process (a name can be registered only once) and leaves no trace.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import attnlab.nn.norms as norms
from attnlab.models import ModelConfig, build_model
from composed_runs import train_fast
from documented import add_to_catalog

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def python_block(markdown: str) -> str:
    """The first ```python fenced block of the "Add your own variant" section."""
    section = markdown[markdown.index("## Add your own variant") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match, f"{DOC} has no python block"
    return match.group(1)


@pytest.fixture
def rezero_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    text = DOC.read_text(encoding="utf-8")
    namespace = dict(vars(norms))
    exec(compile(python_block(text), str(DOC), "exec"), namespace)
    section = text[text.index("## Add your own variant") :]
    add_to_catalog(monkeypatch, "model.norm", "rezero", section, namespace)  # restored after


def test_the_documented_rezero_layers_start_as_the_identity(rezero_registered: None) -> None:
    assert "rezero" in norms.RESIDUALS.names()
    cfg = dict(name="decoder_only", vocab_size=20, d_model=32, n_heads=4, dropout=0.0,
               norm="rezero")  # fmt: skip
    model = build_model(ModelConfig.from_dict(cfg))
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    tokens = torch.randint(6, 20, (2, 7))
    embedded = model.decoder.positions.embed(model.embedding(tokens), torch.arange(7))
    torch.testing.assert_close(model.hidden(tokens), embedded)
    model(tokens).logsumexp(-1).sum().backward()  # α learns from the first step
    assert model.decoder.layers[0].ffn_residual.resweight.grad.abs().item() > 0


def test_the_documented_rezero_option_trains_through_the_configs(
    rezero_registered: None, tmp_path: Path
) -> None:
    result = train_fast(["model.norm=rezero"], tmp_path)
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])
