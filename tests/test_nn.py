"""Building blocks: attention, positions, norms, feed-forward, layers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab.model_config import ModelConfig
from attnlab.nn.attention import (
    AttentionInputs,
    MultiHeadAttention,
    fused_attention,
    math_attention,
)
from attnlab.nn.feedforward import FEEDFORWARDS, default_d_ff
from attnlab.nn.layers import DecoderLayer, EncoderLayer
from attnlab.nn.norms import RESIDUALS, make_norm
from attnlab.nn.positions import (
    POSITIONS,
    SinusoidalConcatPositions,
    SinusoidalPositions,
    sequence_positions,
)


def qkv(B: int = 2, H: int = 4, T: int = 6, S: int = 6, D: int = 8) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)


def test_math_attention_is_softmax_of_scaled_scores() -> None:
    q, k, v = qkv()
    out, weights = math_attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)


def test_masked_scores_get_zero_weight() -> None:
    q, k, v = qkv()
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    mask[..., 4:] = False
    _, weights = math_attention(q, k, v, mask)
    assert torch.all(weights[..., 4:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6))


@pytest.mark.parametrize("masking", ["none", "padding", "causal", "bias"])
def test_math_and_sdpa_agree(masking: str) -> None:
    q, k, v = qkv()
    mask = bias = None
    is_causal = False
    if masking == "padding":
        mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
        mask[0, ..., 3:] = False
    elif masking == "causal":
        is_causal = True
    elif masking == "bias":
        bias = torch.randn(1, 4, 6, 6)
        mask = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    reference, _ = math_attention(q, k, v, mask, bias, is_causal=is_causal)
    fused = fused_attention(q, k, v, mask, bias, is_causal=is_causal)
    torch.testing.assert_close(fused, reference, atol=1e-5, rtol=1e-5)


def test_cross_attention_over_an_all_padding_source_is_finite_and_equal_on_both_paths() -> None:
    torch.manual_seed(0)
    fused = MultiHeadAttention(d_model=16, n_heads=4, impl="sdpa").eval()
    explicit = MultiHeadAttention(d_model=16, n_heads=4, impl="math").eval()
    explicit.load_state_dict(fused.state_dict())
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    memory_real = torch.ones(2, 5, dtype=torch.bool)
    memory_real[0] = False  # the first source is nothing but padding
    inputs = AttentionInputs(mask=memory_real[:, None, None, :])
    out_fused, out_explicit = fused(x, inputs, memory=memory), explicit(x, inputs, memory=memory)
    assert out_fused.isfinite().all() and out_explicit.isfinite().all()
    torch.testing.assert_close(out_explicit, out_fused)


def test_multi_head_attention_shapes_self_and_cross() -> None:
    attn = MultiHeadAttention(d_model=16, n_heads=4)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    assert attn(x, AttentionInputs()).shape == (2, 5, 16)
    assert attn(x, AttentionInputs(), memory=memory).shape == (2, 5, 16)


def test_cross_attention_keys_and_values_come_from_memory() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4).eval()
    x, memory = torch.randn(1, 3, 16), torch.randn(1, 7, 16)
    before = attn(x, AttentionInputs(), memory=memory)
    after = attn(x, AttentionInputs(), memory=memory + 1.0)
    assert not torch.allclose(before, after)


def test_sinusoidal_positions_follow_the_paper() -> None:
    d = 16
    enc = SinusoidalPositions(d, 4, 512, causal=False).encoding(torch.arange(50))
    for pos in (0, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert enc[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert enc[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_sinusoidal_concat_puts_sines_before_cosines() -> None:
    pos = torch.arange(10)
    interleaved = SinusoidalPositions(8, 2, 64, False).encoding(pos)
    concat = SinusoidalConcatPositions(8, 2, 64, False).encoding(pos)
    torch.testing.assert_close(concat[:, :4], interleaved[:, 0::2])
    torch.testing.assert_close(concat[:, 4:], interleaved[:, 1::2])


@pytest.mark.parametrize("name", sequence_positions())
def test_every_position_scheme_keeps_shapes(name: str) -> None:
    scheme = POSITIONS.get(name)(16, 4, 64, causal=True)
    x, pos = torch.randn(2, 5, 16), torch.arange(5)
    assert scheme.embed(x, pos).shape == x.shape
    bias = scheme.bias(pos, pos)
    assert bias is None or bias.shape[-3:] == (4, 5, 5)
    rope = scheme.rotary(pos)
    assert rope is None or rope[0].shape[-2:] == (5, 2)


@pytest.mark.parametrize("name", RESIDUALS.names())
def test_residual_wrappers_keep_shape(name: str) -> None:
    wrapper = RESIDUALS.get(name)(16, "layernorm", 0.0)
    x = torch.randn(2, 3, 16)
    assert wrapper(x, nn.Linear(16, 16)).shape == x.shape


def test_post_ln_normalises_after_the_residual_sum_and_pre_ln_before_the_sublayer() -> None:
    x = torch.randn(2, 3, 16) * 5 + 3
    sub = nn.Linear(16, 16)
    post = RESIDUALS.get("post")(16, "layernorm", 0.0)
    pre = RESIDUALS.get("pre")(16, "layernorm", 0.0)
    torch.testing.assert_close(post(x, sub), post.norm(x + sub(x)))
    torch.testing.assert_close(pre(x, sub), x + sub(pre.norm(x)))


def test_rmsnorm_uses_the_explicit_eps_of_layernorm() -> None:
    # nn.RMSNorm's default eps=None means finfo(input dtype).eps: 1.2e-7 in float32, 7.8e-3 in bf16
    rms, layer = make_norm("rmsnorm", 16), make_norm("layernorm", 16)
    assert rms.eps == layer.eps == 1e-5


@pytest.mark.parametrize("name", FEEDFORWARDS.names())
def test_feedforward_shapes(name: str) -> None:
    ffn = FEEDFORWARDS.get(name)(16, default_d_ff(name, 16))
    assert ffn(torch.randn(2, 3, 16)).shape == (2, 3, 16)


@pytest.mark.parametrize("gated", ["swiglu", "geglu"])
def test_gated_default_width_keeps_parameter_count_comparable(gated: str) -> None:
    def params(ffn: str) -> int:
        return sum(p.numel() for p in FEEDFORWARDS.get(ffn)(96, default_d_ff(ffn, 96)).parameters())

    relu, glu = params("relu"), params(gated)
    assert abs(glu - relu) / relu < 0.02


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    wq, wk, wv = theirs.in_proj_weight.chunk(3)
    bq, bk, bv = theirs.in_proj_bias.chunk(3)
    for proj, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv)):
        proj.weight.data.copy_(w)
        proj.bias.data.copy_(b)
    ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


def _copy_common(ours: nn.Module, theirs: nn.Module) -> None:
    _copy_attention(ours.self_attn, theirs.self_attn)
    ours.ffn.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ffn.linear2.load_state_dict(theirs.linear2.state_dict())


@pytest.mark.parametrize("norm,norm_first", [("post", False), ("pre", True)])
def test_encoder_layer_matches_torch_transformer_encoder_layer(norm: str, norm_first: bool) -> None:
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    ours = EncoderLayer(ModelConfig(d_model=32, n_heads=4, d_ff=64, dropout=0.0, norm=norm))
    _copy_common(ours, theirs)
    ours.attn_residual.norm.load_state_dict(theirs.norm1.state_dict())
    ours.ffn_residual.norm.load_state_dict(theirs.norm2.state_dict())
    ours.eval(), theirs.eval()
    x = torch.randn(3, 7, 32)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 5:] = True
    expected = theirs(x, src_key_padding_mask=padding)
    got = ours(x, AttentionInputs(mask=~padding[:, None, None, :]))
    torch.testing.assert_close(got[~padding], expected[~padding], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm,norm_first", [("post", False), ("pre", True)])
def test_decoder_layer_matches_torch_transformer_decoder_layer(norm: str, norm_first: bool) -> None:
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(
        32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    cfg = ModelConfig(d_model=32, n_heads=4, d_ff=64, dropout=0.0, norm=norm)
    ours = DecoderLayer(cfg, cross_attention=True)
    _copy_common(ours, theirs)
    _copy_attention(ours.cross_attn, theirs.multihead_attn)
    ours.attn_residual.norm.load_state_dict(theirs.norm1.state_dict())
    ours.cross_residual.norm.load_state_dict(theirs.norm2.state_dict())
    ours.ffn_residual.norm.load_state_dict(theirs.norm3.state_dict())
    ours.eval(), theirs.eval()
    x, memory = torch.randn(3, 6, 32), torch.randn(3, 9, 32)
    memory_padding = torch.zeros(3, 9, dtype=torch.bool)
    memory_padding[2, 4:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    expected = theirs(x, memory, tgt_mask=causal, memory_key_padding_mask=memory_padding)
    got = ours(
        x,
        AttentionInputs(is_causal=True),
        memory=memory,
        memory_inputs=AttentionInputs(mask=~memory_padding[:, None, None, :]),
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
