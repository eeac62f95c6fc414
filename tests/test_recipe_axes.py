"""The recipe axes of recent LLMs: squared ReLU, GEGLU, DyT, OLMo 2's norm placement, Peri-LN.

Each against a hand computation: Primer's max(0, xW₁ + b₁)²W₂ + b₂ (So et al. 2021, §3),
(GELU_tanh(xW₁) ⊙ xV)W₂ (Shazeer 2020, §2), γ ⊙ tanh(αx) + β (Zhu et al. 2025) and
x + LN(Sublayer(x)) (OLMo et al. 2025, §3).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.cli.listing import registry_rows
from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn.feedforward import FEEDFORWARDS
from attnlab.nn.normalization import DynamicTanh, make_norm
from attnlab.nn.norms import RESIDUALS


def test_relu2_squares_the_relu_between_the_two_maps() -> None:
    torch.manual_seed(0)
    ffn = FEEDFORWARDS.get("relu2")(8, 32).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    hidden = (x @ ffn.linear1.weight.T + ffn.linear1.bias).clamp(min=0) ** 2
    torch.testing.assert_close(ffn(x), hidden @ ffn.linear2.weight.T + ffn.linear2.bias)


def test_geglu_gates_the_linear_path_with_the_tanh_gelu() -> None:
    torch.manual_seed(0)
    ffn = FEEDFORWARDS.get("geglu")(8, 16).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    gate, up = x @ ffn.gate.weight.T, x @ ffn.linear1.weight.T
    expected = (F.gelu(gate, approximate="tanh") * up) @ ffn.linear2.weight.T
    torch.testing.assert_close(ffn(x), expected)
    assert not torch.allclose(ffn(x), (F.gelu(gate) * up) @ ffn.linear2.weight.T)  # exact erf
    assert all(m.bias is None for m in ffn.modules() if isinstance(m, nn.Linear))


def test_dyt_is_gamma_tanh_of_alpha_x_plus_beta_from_alpha_half() -> None:
    torch.manual_seed(0)
    dyt = make_norm("dyt", 6)
    assert isinstance(dyt, DynamicTanh) and dyt.alpha.tolist() == [0.5]
    with torch.no_grad():
        dyt.alpha.fill_(1.5)
        dyt.weight.copy_(torch.randn(6))
        dyt.bias.copy_(torch.randn(6))
    x = torch.randn(3, 6)
    torch.testing.assert_close(dyt(x), dyt.weight * torch.tanh(1.5 * x) + dyt.bias)


def test_dyt_is_elementwise_where_a_norm_mixes_the_features() -> None:
    x = torch.randn(4, 16)
    changed = x.clone()
    changed[:, 0] *= 10  # one feature: a norm's statistics move every output
    for name, others_move in (("dyt", False), ("layernorm", True), ("rmsnorm", True)):
        norm = make_norm(name, 16)
        moved = not torch.allclose(norm(x)[:, 1:], norm(changed)[:, 1:])
        assert moved == others_move, name


def tiny(**values: object) -> ModelConfig:
    return ModelConfig.from_dict({"name": "decoder_only", "vocab_size": 20, "d_model": 16,
                                  "n_heads": 2, "n_layers": 2, **values})  # fmt: skip


def test_dyt_loses_its_bias_with_the_other_norms_under_bias_false() -> None:
    cfg = tiny(norm_type="dyt", qk_norm=True, bias=False)
    norms = [m for m in build_model(cfg).modules() if isinstance(m, DynamicTanh)]
    assert len(norms) == 2 * 2 * 2 + 1  # two per layer around sublayers, q and k, the final
    assert all(norm.bias is None for norm in norms)
    assert all(norm.weight is not None for norm in norms)


def test_dyt_alpha0_starts_every_dyt_of_the_model_from_it() -> None:
    cfg = tiny(name="encoder_decoder", norm_type="dyt", dyt_alpha0=0.2, qk_norm=True,
               embed_norm=True)  # fmt: skip
    alphas = [m.alpha for m in build_model(cfg).modules() if isinstance(m, DynamicTanh)]
    # per stack the embedding and final norms; per layer its residuals' and each attention's q, k
    assert len(alphas) == 2 * (1 + 1) + 2 * (2 + 2) + 2 * (3 + 2 * 2)
    assert {round(a.item(), 6) for a in alphas} == {0.2}


def test_dyt_alpha0_is_refused_without_dyt() -> None:
    with pytest.raises(ConfigError, match="model.dyt_alpha0=0.2 applies to model.norm_type=dyt"):
        tiny(norm_type="rmsnorm", dyt_alpha0=0.2)


@pytest.mark.parametrize("alpha0", [0.0, -1.0, float("inf")])
def test_dyt_alpha0_must_be_a_finite_positive_number(alpha0: float) -> None:
    with pytest.raises(ConfigError, match="must be a finite number > 0"):
        tiny(norm_type="dyt", dyt_alpha0=alpha0)


def test_olmo2_norms_the_sublayer_output_and_not_its_input() -> None:
    torch.manual_seed(0)
    wrapper = RESIDUALS.get("olmo2")(16, "rmsnorm", 0.0)
    x = torch.randn(2, 3, 16) * 5 + 3
    seen = []

    def sublayer(h: torch.Tensor) -> torch.Tensor:
        seen.append(h)
        return 7 * h

    torch.testing.assert_close(wrapper(x, sublayer), x + wrapper.norm(7 * x))
    assert seen[0] is x  # the raw residual stream


def test_olmo2_stack_ends_with_a_norm() -> None:
    assert isinstance(build_model(tiny(norm="olmo2")).decoder.final_norm, nn.LayerNorm)


def test_options_list_the_recipe_axes_with_their_papers() -> None:
    rows = {(key, value): summary for key, value, summary in registry_rows()}
    assert "So et al. 2021" in rows[("model.ffn", "relu2")]
    assert "Shazeer 2020" in rows[("model.ffn", "geglu")]
    assert "Zhu et al. 2025" in rows[("model.norm_type", "dyt")]
    assert "OLMo et al. 2025" in rows[("model.norm", "olmo2")]
    assert "Peri-LN (Kim et al. 2025)" in rows[("model.norm", "sandwich")]


@pytest.mark.parametrize("zero", [True, False])
def test_zero_init_residual_starts_every_layer_as_the_identity(zero: bool) -> None:
    torch.manual_seed(0)
    model = build_model(tiny(zero_init_residual=zero, dropout=0.0)).eval()
    tokens = torch.randint(6, 20, (2, 8))
    changed = tokens.clone()
    changed[:, :4] = torch.randint(6, 20, (2, 4))  # earlier tokens, seen by later positions
    with torch.no_grad():
        later = model(tokens)[:, 4:], model(changed)[:, 4:]
    # identity layers: each position's logits read only its own token and position
    assert torch.allclose(*later) == zero


def test_zero_init_residual_projections_still_get_gradients() -> None:
    torch.manual_seed(0)
    model = build_model(tiny(zero_init_residual=True, ffn="geglu", param="mup",
                             mup_base_width=8))  # fmt: skip
    layer = model.decoder.layers[0]
    assert not layer.self_attn.out_proj.weight.any() and not layer.ffn.linear2.weight.any()
    model(torch.randint(6, 20, (2, 8))).logsumexp(-1).sum().backward()
    assert layer.self_attn.out_proj.weight.grad.any() and layer.ffn.linear2.weight.grad.any()


def test_zero_init_residual_is_refused_with_deepnorm_init() -> None:
    with pytest.raises(ConfigError, match="model.norm=deepnorm initialises"):
        tiny(zero_init_residual=True, norm="deepnorm")
