"""docs/extending.md's attention-kind example (the Sparse Transformer's strided pattern)
really works: the documented class and config declare ``model.attention=strided`` (restored
afterwards), and its pattern gives the mask of Child et al. (2019, §4.2), cached decoding,
the FlexAttention path and a training run through the configs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnlab.models import ModelConfig, build_model
from attnlab.nn import attention_kinds, flex
from attnlab.nn.attention_kinds import ATTENTION_KINDS
from composed_runs import train_fast
from decoding_inputs import left_padded_prompts, step_logits
from documented import block_with, declare, section

VARIANT = section("Add your own variant")


@pytest.fixture
def strided(monkeypatch: pytest.MonkeyPatch) -> type:
    namespace = dict(vars(attention_kinds))
    exec(compile(block_with(VARIANT, "class StridedAttention"), "extending.md", "exec"),
         namespace)  # fmt: skip
    declare(monkeypatch, block_with(VARIANT, "class StridedConfig"),
            "attnlab.components.attention", {"StridedAttention": namespace["StridedAttention"]})
    return ATTENTION_KINDS.get("strided")


@pytest.mark.parametrize("causal", [True, False])
def test_the_documented_pattern_is_the_strided_mask(strided: type, causal: bool) -> None:
    l, T = 4, 13
    kind = strided(ModelConfig(d_model=16, n_heads=2, window=l), causal)
    expected = torch.tensor([[(abs(i - j) < l or (i - j) % l == 0) and (j <= i or not causal)
                              for j in range(T)] for i in range(T)])  # fmt: skip
    assert torch.equal(kind.mask(T, T), expected)
    assert torch.equal(kind.mask(3, T, q_offset=T - 3), expected[-3:])


def model(**overrides: object) -> torch.nn.Module:
    cfg = dict(name="decoder_only", vocab_size=20, d_model=16, n_heads=2, n_layers=2,
               dropout=0.0, attention="strided", window=3, pos="rope", **overrides)  # fmt: skip
    torch.manual_seed(0)
    return build_model(ModelConfig.from_dict(cfg)).eval()


def test_the_documented_kind_decodes_with_a_cache(strided: type) -> None:
    net, prompts = model().double(), left_padded_prompts()
    torch.testing.assert_close(step_logits(net, prompts, True), step_logits(net, prompts, False))


@pytest.mark.skipif(not flex.available(), reason="torch without FlexAttention")
def test_the_documented_kind_gets_the_flex_attention_path(strided: type) -> None:
    tokens = torch.randint(6, 20, (2, 30))
    with torch.no_grad():
        blocked = model()(tokens)
        flexed = model(attn_impl="flex")(tokens)
    torch.testing.assert_close(flexed, blocked, atol=1e-5, rtol=1e-5)


def test_the_documented_kind_trains_through_the_configs(strided: type, tmp_path: Path) -> None:
    result = train_fast(["model=decoder_only", "model.attention=strided", "model.window=3",
                         "model.pos=rope", "data=reverse"], tmp_path)  # fmt: skip
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])
