"""``model.attention=mamba2``: Mamba-2's SSD mixer (Dao & Gu 2024, §6–7).

The chunked SSD form equals the recurrence written as a plain loop over t; the mixer is
refused where it cannot apply. Its decoding (step by step = chunked, a state that does not
grow, left padding): tests/test_mixers.py.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn.mamba2 import ssd_chunked

MAMBA2 = {"name": "decoder_only", "vocab_size": 20, "d_model": 16, "n_heads": 2,
          "n_layers": 2, "dropout": 0.0, "attention": "mamba2", "pos": "none",
          "ssm_state": 8, "ssm_chunk": 4}  # fmt: skip


def recurrence(x, dt, A, B, C, state=None):  # type: ignore[no-untyped-def]
    """h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·x_t B_tᵀ, y_t = h_t C_t, one t at a time."""
    b, T, H, P = x.shape
    h = torch.zeros(b, H, P, B.size(-1), dtype=x.dtype) if state is None else state.clone()
    ys = []
    for t in range(T):
        for head in range(H):
            decay = torch.exp(dt[:, t, head] * A[head])[:, None, None]
            inflow = (dt[:, t, head, None] * x[:, t, head])[:, :, None] * B[:, t, None, :]
            h[:, head] = decay * h[:, head] + inflow
        ys.append(h @ C[:, t, None, :, None])
    return torch.stack(ys, dim=1).squeeze(-1), h


def ssm_inputs(T: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    b, H, P, N = 2, 3, 4, 5
    x = torch.randn(b, T, H, P, generator=g, dtype=torch.float64)
    dt = torch.nn.functional.softplus(torch.randn(b, T, H, generator=g, dtype=torch.float64))
    A = -torch.rand(H, generator=g, dtype=torch.float64) * 2
    B, C = (torch.randn(b, T, N, generator=g, dtype=torch.float64) for _ in range(2))
    return x, dt, A, B, C


@pytest.mark.parametrize("T,chunk", [(12, 4), (13, 4), (3, 8), (1, 4)],
                         ids=["whole-chunks", "ragged-last-chunk", "shorter-than-a-chunk",
                              "one-token"])  # fmt: skip
@pytest.mark.parametrize("carried", [False, True], ids=["from-zero", "from-a-state"])
def test_the_chunked_ssd_form_equals_the_recurrence(T: int, chunk: int, carried: bool) -> None:
    x, dt, A, B, C = ssm_inputs(T)
    state = torch.randn(2, 3, 4, 5, dtype=torch.float64) if carried else None
    y, final = ssd_chunked(x, dt, A, B, C, chunk, state)
    expected_y, expected_final = recurrence(x, dt, A, B, C, state)
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(final, expected_final)


@pytest.mark.parametrize("overrides,needle", [
    ({"name": "encoder_only"}, "model.attention=mamba2 is causal only and model=encoder_only"),
    ({"name": "encoder_decoder"}, "has no cross-attention"),
    ({"name": "vit"}, "model=vit is bidirectional"),
    ({"pos": "rope"}, "model.pos=rope"),
    ({"pos": "learned"}, "model.pos=learned"),
    ({"n_kv_heads": 1}, "model.n_kv_heads=1"),
    ({"qk_norm": True}, "model.qk_norm=true"),
    ({"attn_impl": "math"}, "model.attn_impl=math"),
    ({"norm": "deepnorm"}, "model.norm=deepnorm"),
    ({"param": "mup"}, "model.param=mup"),
    ({"attention": "full"}, "model.ssm_state=8 applies to model.attention=mamba2"),
])  # fmt: skip
def test_mamba2_is_refused_where_it_does_not_apply_in_one_line(
    overrides: dict, needle: str
) -> None:
    values = {**MAMBA2, **overrides}
    if values["name"] == "vit":
        values.pop("vocab_size")
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")) as e:
        ModelConfig.from_dict(values)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("init", ["paper", "xavier", "gpt2"])
def test_model_init_sets_the_projections_and_keeps_the_ssm_parameters_of_mamba_ssm(
    init: str,
) -> None:
    """A ∈ [1, 16], Δ = softplus(dt_bias) ∈ [0.001, 0.1], D = 1 whatever model.init is; with
    model.zero_init_residual the output projection is W_O: it starts at zero."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**MAMBA2, "init": init, "zero_init_residual": True})
    for layer in build_model(cfg).decoder.layers:
        mixer = layer.self_attn
        A = torch.exp(mixer.A_log.detach())
        dt = torch.nn.functional.softplus(mixer.dt_bias.detach())
        assert bool(((A >= 1) & (A <= 16)).all()) and bool(((dt >= 1e-3) & (dt <= 0.1)).all())
        assert bool((mixer.D == 1).all())
        assert not mixer.out_proj.weight.any() and mixer.in_proj.weight.any()
