"""The three architectures: shapes, causality, padding, tying, initialisation."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn.norms import StackDepth, deepnorm_constants
from attnlab.nn.positions import sequence_positions

ARCHS = ("encoder_only", "decoder_only", "encoder_decoder")
NORMS = ("pre", "post", "sandwich", "deepnorm", "olmo2")


def make(name: str, **overrides: object) -> torch.nn.Module:
    values = dict(name=name, vocab_size=20, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    values.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig.from_dict(values)).eval()


def run(
    model: torch.nn.Module, tokens: torch.Tensor, src: torch.Tensor | None = None
) -> torch.Tensor:
    if model.cfg.name == "encoder_decoder":
        return model(src if src is not None else tokens, tokens)
    return model(tokens)


@pytest.mark.parametrize("name,norm,pos", itertools.product(ARCHS, NORMS, sequence_positions()))
def test_every_model_returns_vocabulary_logits(name: str, norm: str, pos: str) -> None:
    model = make(name, norm=norm, pos=pos)
    tokens = torch.randint(6, 20, (3, 7))
    logits = run(model, tokens)
    assert logits.shape == (3, 7, 20)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(
    "name,pos", itertools.product(("decoder_only", "encoder_decoder"), sequence_positions())
)
def test_future_tokens_do_not_change_past_logits(name: str, pos: str) -> None:
    model = make(name, pos=pos)
    tokens = torch.randint(6, 20, (2, 8))
    changed = tokens.clone()
    changed[:, 5:] = torch.randint(6, 20, (2, 3))
    src = torch.randint(6, 20, (2, 6))
    before, after = run(model, tokens, src), run(model, changed, src)
    torch.testing.assert_close(before[:, :5], after[:, :5], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(before[:, 5:], after[:, 5:])


def test_encoder_only_sees_the_future() -> None:
    model = make("encoder_only")
    tokens = torch.randint(6, 20, (1, 8))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] - 6 + 1) % 14 + 6
    assert not torch.allclose(model(tokens)[:, 0], model(changed)[:, 0])


@pytest.mark.parametrize("name,pos", itertools.product(ARCHS, sequence_positions()))
def test_appended_padding_leaves_real_positions_unchanged(name: str, pos: str) -> None:
    model = make(name, pos=pos)
    tokens = torch.randint(6, 20, (2, 6))
    padded = torch.cat([tokens, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    if name == "encoder_decoder":  # pad the source: decoder outputs must not move
        src = torch.randint(6, 20, (2, 5))
        src_padded = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], dim=1)
        expected = model(src, tokens)
        torch.testing.assert_close(expected, model(src_padded, tokens), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(expected, model(src, padded)[:, :6], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(model(tokens), model(padded)[:, :6], atol=1e-5, rtol=1e-5)


def test_math_and_sdpa_models_agree() -> None:
    tokens = torch.randint(6, 20, (2, 7))
    tokens[1, 5:] = 0
    for name in ARCHS:
        a = run(make(name, attn_impl="sdpa"), tokens)
        b = run(make(name, attn_impl="math"), tokens)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_tied_embeddings_share_one_matrix() -> None:
    model = make("encoder_decoder", tie_embeddings=True)
    assert model.lm_head.weight is model.embedding.weight is model.src_embedding.weight
    output_only = make("encoder_decoder", tie_embeddings="output")
    assert output_only.lm_head.weight is output_only.embedding.weight
    assert output_only.src_embedding.weight is not output_only.embedding.weight
    untied = make("decoder_only", tie_embeddings=False)
    assert untied.lm_head.weight is not untied.embedding.weight


def test_embeddings_are_scaled_by_sqrt_d_model() -> None:
    model = make("decoder_only")
    tokens = torch.tensor([[7]])
    expected = model.embedding.weight[7] * 32**0.5
    torch.testing.assert_close(model.embedding(tokens)[0, 0], expected)


def test_pre_ln_stack_ends_with_a_norm_and_post_ln_does_not() -> None:
    assert isinstance(make("decoder_only", norm="pre").decoder.final_norm, torch.nn.LayerNorm)
    assert isinstance(make("decoder_only", norm="post").decoder.final_norm, torch.nn.Identity)


def test_rmsnorm_option_builds_rmsnorm_layers() -> None:
    model = make("decoder_only", norm_type="rmsnorm")
    assert any(isinstance(m, torch.nn.RMSNorm) for m in model.modules())
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())


@pytest.mark.parametrize("name,norm,extra", [
    ("decoder_only", "pre", {}), ("encoder_only", "post", {"embed_norm": True}),
    ("encoder_decoder", "sandwich", {"qk_norm": True}),
    ("decoder_only", "pre", {"block": "parallel"}),
])  # fmt: skip
def test_bias_false_removes_every_bias_of_the_layers_and_leaves_the_weights(
    name: str, norm: str, extra: dict
) -> None:
    with_bias = make(name, norm=norm, **extra)
    without = make(name, norm=norm, bias=False, **extra)
    assert [n for n, _ in without.named_parameters() if n.endswith("bias")] == []
    # the same seed draws the same weights; the biases start at zero, so the outputs agree
    weights = {n: p for n, p in with_bias.state_dict().items() if not n.endswith("bias")}
    assert weights.keys() == without.state_dict().keys()
    for n, p in without.state_dict().items():
        torch.testing.assert_close(p, weights[n], rtol=0, atol=0)
    tokens = torch.randint(6, 20, (2, 9))
    torch.testing.assert_close(run(without, tokens), run(with_bias, tokens))


def test_bias_false_drops_the_counted_biases_and_computes_xw() -> None:
    d, d_ff, layers = 32, 128, 2
    difference = make("decoder_only").num_params() - make("decoder_only", bias=False).num_params()
    # per Pre-LN layer: W_Q, W_K, W_V (3d), W_O (d), W₁ (d_ff), W₂ (d), two norms (2d);
    # the final norm
    assert difference == layers * (3 * d + d + d_ff + d + 2 * d) + d
    ffn = make("decoder_only", bias=False).decoder.layers[0].ffn
    x = torch.randn(3, d)
    expected = torch.relu(x @ ffn.linear1.weight.T) @ ffn.linear2.weight.T  # eq. 2 without b₁, b₂
    torch.testing.assert_close(ffn(x), expected)


def test_gpt2_init_scales_residual_projections() -> None:
    model = make("decoder_only", init="gpt2", n_layers=8, d_model=256, vocab_size=100)
    layer = model.decoder.layers[0]
    assert layer.self_attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert layer.self_attn.out_proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.1)


@pytest.mark.parametrize("N,M", [(6, 6), (12, 6), (100, 50)])
def test_deepnorm_constants_follow_the_paper(N: int, M: int) -> None:
    enc = deepnorm_constants(StackDepth("encoder", N, 0))
    assert enc == pytest.approx(((2 * N) ** 0.25, (8 * N) ** -0.25))
    dec = deepnorm_constants(StackDepth("decoder", 0, M))
    assert dec == pytest.approx(((2 * M) ** 0.25, (8 * M) ** -0.25))
    assert deepnorm_constants(StackDepth("encoder", N, M)) == pytest.approx(
        (0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16))
    )
    assert deepnorm_constants(StackDepth("decoder", N, M)) == pytest.approx(
        ((3 * M) ** 0.25, (12 * M) ** -0.25)
    )


def test_deepnorm_model_uses_alpha_in_its_residuals() -> None:
    model = make("decoder_only", norm="deepnorm", n_layers=6)
    assert model.decoder.layers[0].attn_residual.alpha == pytest.approx(12**0.25)


@pytest.mark.parametrize(
    "overrides,key",
    [
        ({"d_model": 30, "n_heads": 4}, "n_heads"),
        ({"norm": "mid"}, "model.norm"),
        ({"pos": "nonsense"}, "model.pos"),
        ({"ffn": "tanh"}, "model.ffn"),
        ({"n_layers": 0}, "model.n_layers"),
        ({"d_model": -8}, "model.d_model"),
        ({"dropout": 1.5}, "model.dropout"),
        ({"attn_impl": "flash"}, "model.attn_impl"),
        ({"colour": "red"}, "model.colour"),
    ],
)
def test_invalid_model_config_names_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ModelConfig.from_dict({"name": "decoder_only", "vocab_size": 10, **overrides})
