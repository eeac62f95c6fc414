"""model.attention=mla (DeepSeek-V2, §2.1): the module computes eq. 9–19 head by head, and
its decoding cache holds only the latent c^KV and the shared rotary key k^R of each token."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F

from attnlab.callbacks.attention_maps import recorded_attention
from attnlab.inference import start_decoding
from attnlab.models import ModelConfig, build_model
from attnlab.models.flops import cache_elements_per_token
from attnlab.nn.kernels import AttentionInputs
from attnlab.nn.latent_attention import MultiHeadLatentAttention

D_MODEL, N_HEADS, D_HEAD = 32, 4, 8


def latent_attention(impl: str, **keys: object) -> MultiHeadLatentAttention:
    cfg = ModelConfig(d_model=D_MODEL, n_heads=N_HEADS, attention="mla", pos="rope",
                      attn_impl=impl, **keys)  # fmt: skip
    torch.manual_seed(0)
    return MultiHeadLatentAttention(cfg.validated(), causal=True).double()


def rope_by_hand(x: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation of (…, T, d) at positions 0 … T − 1, θ_i = 10000^(−2i/d), pair by
    pair."""
    T, d = x.shape[-2:]
    out = torch.empty_like(x)
    for t in range(T):
        for i in range(d // 2):
            angle = t * 10000.0 ** (-2 * i / d)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = a * math.cos(angle) - b * math.sin(angle)
            out[..., t, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


def eq_9_to_19(mla: MultiHeadLatentAttention, h: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2, eq. 9–19, one head at a time with explicit einsums; causal."""
    T, d_h, d_r = h.size(1), D_HEAD, mla.d_rope
    c_kv = F.linear(h, mla.w_dkv.weight, mla.w_dkv.bias)  # eq. 9
    c_q = h if mla.w_dq is None else F.linear(h, mla.w_dq.weight, mla.w_dq.bias)  # eq. 12
    k_rope = rope_by_hand(F.linear(h, mla.w_kr.weight, mla.w_kr.bias))  # eq. 15, shared
    later = torch.ones(T, T, dtype=torch.bool).triu(1)
    heads = []
    for i in range(N_HEADS):
        rows = slice(i * d_h, (i + 1) * d_h)
        k_c = torch.einsum("btc,ec->bte", c_kv, mla.w_uk.weight[rows]) + mla.w_uk.bias[rows]
        v_c = torch.einsum("btc,ec->bte", c_kv, mla.w_uv.weight[rows]) + mla.w_uv.bias[rows]
        q_c = torch.einsum("btc,ec->bte", c_q, mla.w_uq.weight[rows]) + mla.w_uq.bias[rows]
        rope_rows = slice(i * d_r, (i + 1) * d_r)
        q_r = rope_by_hand(torch.einsum("btc,ec->bte", c_q, mla.w_qr.weight[rope_rows])
                           + mla.w_qr.bias[rope_rows])  # eq. 14  # fmt: skip
        q = torch.cat([q_c, q_r], dim=-1)  # eq. 16
        k = torch.cat([k_c, k_rope], dim=-1)  # eq. 17
        scores = torch.einsum("bte,bse->bts", q, k) / math.sqrt(d_h + d_r)
        weights = scores.masked_fill(later, float("-inf")).softmax(dim=-1)
        heads.append(torch.einsum("bts,bse->bte", weights, v_c))  # eq. 18
    return F.linear(torch.cat(heads, dim=-1), mla.out_proj.weight, mla.out_proj.bias)  # eq. 19


@pytest.mark.parametrize("impl", ["sdpa", "math"])
@pytest.mark.parametrize(
    "keys",
    [{}, {"kv_latent_rank": 12, "q_latent_rank": 20, "rope_head_dim": 6}],
    ids=["paper-ratios", "query-compression"],
)
def test_mla_is_deepseek_v2_equations_9_to_19_head_by_head(keys: dict, impl: str) -> None:
    mla = latent_attention(impl, **keys)
    assert (mla.w_dq is None) == ("q_latent_rank" not in keys)
    h = torch.randn(2, 7, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    angles = torch.arange(7, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, mla.d_rope, 2, dtype=torch.float64) / mla.d_rope)  # fmt: skip
    inputs = AttentionInputs(rope=(angles.cos()[None, None], angles.sin()[None, None]),
                             is_causal=True)  # fmt: skip
    torch.testing.assert_close(mla(h, inputs), eq_9_to_19(mla, h))


def model(overrides: dict) -> torch.nn.Module:
    cfg = {"name": "decoder_only", "vocab_size": 20, "d_model": D_MODEL, "n_heads": N_HEADS,
           "n_layers": 2, "dropout": 0.0, "pos": "rope", **overrides}  # fmt: skip
    return build_model(ModelConfig.from_dict(cfg)).eval()


@pytest.mark.parametrize(
    "overrides,per_token",
    [
        ({}, 2 * N_HEADS * D_HEAD),  # MHA: 2·n_h·d_h
        ({"n_kv_heads": 2}, 2 * 2 * D_HEAD),  # GQA: 2·n_kv·d_h
        ({"n_kv_heads": 1}, 2 * D_HEAD),  # MQA
        ({"attention": "mla"}, 4 * D_HEAD + D_HEAD // 2),  # MLA: d_c + d_h^R, the defaults
        ({"attention": "mla", "kv_latent_rank": 12, "rope_head_dim": 6}, 12 + 6),
        ({"attention": "mla", "pos": "alibi", "kv_latent_rank": 12}, 12),  # no k^R
    ],
    ids=["mha", "gqa", "mqa", "mla", "mla-ranks", "mla-alibi"],
)
def test_the_decoding_cache_holds_the_numbers_per_token_it_reports(
    overrides: dict, per_token: int
) -> None:
    """DeepSeek-V2 Table 1: 2·n_h·d_h (MHA), 2·n_g·d_h (GQA), d_c + d_h^R (MLA) per token and
    layer; every tensor each layer's cache holds, counted."""
    net = model(overrides)
    assert cache_elements_per_token(net.cfg) == per_token
    state = start_decoding(net, torch.randint(6, 20, (3, 5)), use_cache=True)
    for _ in range(4):
        state.append(state.logits().argmax(-1))
    state.logits()
    for layer in state.cache.layers:
        held = layer.self_attn.past
        assert held.state is None and held.k.size(2) == 9  # 5 prompt + 4 generated tokens
        assert (held.k.numel() + held.v.numel()) // (3 * 9) == per_token


def test_attention_maps_record_the_softmax_of_every_mla_layer() -> None:
    """Eq. 18's weights, causal rows that sum to 1, for the diagnostics' attention maps."""
    net = model({"attention": "mla", "q_latent_rank": 16})
    with torch.no_grad(), recorded_attention(net) as maps:
        net(torch.randint(6, 20, (2, 7)))
    assert len(maps) == 2
    for recorded in maps.values():
        assert recorded.weights.shape == (2, N_HEADS, 7, 7)
        torch.testing.assert_close(recorded.weights.sum(-1), torch.ones(2, N_HEADS, 7))
        assert not recorded.weights.triu(1).any()
    assert not any(layer.self_attn.record_weights for layer in net.decoder.layers)


def test_coordcheck_measures_each_mla_layer_as_attention() -> None:
    from attnlab.coord_check import _hooks

    net, record = model({"attention": "mla"}), defaultdict(list)
    _hooks(net, record)
    net(torch.randint(6, 20, (2, 7)))
    assert len(record["attention"]) == 2  # one per layer's self-attention


@pytest.mark.parametrize("init,zero", [("gpt2", False), ("paper", True)])
def test_w_o_is_initialised_as_a_residual_output_projection(init: str, zero: bool) -> None:
    """W^O (eq. 19) ends a residual branch: N(0, 0.02/√(2·n_layers)) under init=gpt2, and zero
    with model.zero_init_residual, as MultiHeadAttention's W_O."""
    net = model({"attention": "mla", "init": init, "zero_init_residual": zero, "n_layers": 8})
    for layer in net.decoder.layers:
        std = float(layer.self_attn.out_proj.weight.detach().std())
        if zero:
            assert std == 0.0
        else:
            assert std == pytest.approx(0.02 / math.sqrt(16), rel=0.1)
            assert float(layer.self_attn.w_uq.weight.detach().std()) == pytest.approx(0.02, rel=0.1)
