"""``model.attention=gated_deltanet``: Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, §3).

The chunked form (the WY representation) and the decoding step equal the gated delta rule
written as a plain loop over t; on CUDA flash-linear-attention's kernel equals the PyTorch
form; the mixer is refused where it cannot apply. Its decoding (step by step = chunked, a
state that does not grow, left padding): tests/test_mixers.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn import gated_deltanet
from attnlab.nn.gated_deltanet import (
    GatedDeltaNetMixer,
    gated_delta_chunked,
    gated_delta_step,
    unit_lower_solve,
)

GDN = {"name": "decoder_only", "vocab_size": 20, "d_model": 16, "n_heads": 2, "n_layers": 2,
       "dropout": 0.0, "attention": "gated_deltanet", "pos": "none", "delta_chunk": 4}  # fmt: skip


def gated_delta_rule(q, k, v, g, beta, state=None):  # type: ignore[no-untyped-def]
    """S_t = S_{t−1}(α_t(I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ, o_t = S_t q_t, one t and one head
    at a time."""
    b, T, H, dk = k.shape
    S = torch.zeros(b, H, v.size(-1), dk, dtype=q.dtype) if state is None else state.clone()
    outputs = torch.zeros(*v.shape, dtype=q.dtype)
    eye = torch.eye(dk, dtype=q.dtype)
    for t in range(T):
        for h in range(H):
            alpha, bt = g[:, t, h].exp()[:, None, None], beta[:, t, h][:, None, None]
            kt = k[:, t, h]
            transition = alpha * (eye - bt * kt[:, :, None] * kt[:, None, :])
            S[:, h] = S[:, h] @ transition + bt * v[:, t, h][:, :, None] * kt[:, None, :]
            outputs[:, t, h] = (S[:, h] @ q[:, t, h][:, :, None]).squeeze(-1)
    return outputs, S


def rule_inputs(T: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> tuple:
    g = torch.Generator().manual_seed(seed)
    b, H, dk, dv = 2, 3, 4, 6
    q = torch.randn(b, T, H, dk, generator=g, dtype=dtype)
    k = F.normalize(torch.randn(b, T, H, dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(b, T, H, dv, generator=g, dtype=dtype)
    log_alpha = -torch.rand(b, T, H, generator=g, dtype=dtype)
    beta = torch.rand(b, T, H, generator=g, dtype=dtype)
    return q, k, v, log_alpha, beta


@pytest.mark.parametrize("T,chunk", [(12, 4), (13, 4), (3, 8), (1, 4), (13, 1)],
                         ids=["whole-chunks", "ragged-last-chunk", "shorter-than-a-chunk",
                              "one-token", "chunks-of-one"])  # fmt: skip
@pytest.mark.parametrize("carried", [False, True], ids=["from-zero", "from-a-state"])
def test_the_chunked_form_equals_the_gated_delta_rule(T: int, chunk: int, carried: bool) -> None:
    q, k, v, g, beta = rule_inputs(T)
    state = torch.randn(2, 3, 6, 4, dtype=torch.float64) if carried else None
    o, final = gated_delta_chunked(q, k, v, g, beta, chunk, state)
    expected_o, expected_final = gated_delta_rule(q, k, v, g, beta, state)
    torch.testing.assert_close(o, expected_o, rtol=0, atol=1e-12)
    torch.testing.assert_close(final, expected_final, rtol=0, atol=1e-12)


def test_the_decoding_step_equals_the_gated_delta_rule() -> None:
    q, k, v, g, beta = rule_inputs(9)
    state = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    expected_o, expected_final = gated_delta_rule(q, k, v, g, beta, state)
    steps = []
    for t in range(9):
        o, state = gated_delta_step(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], state)
        steps.append(o)
    torch.testing.assert_close(torch.stack(steps, dim=1), expected_o, rtol=0, atol=1e-12)
    torch.testing.assert_close(state, expected_final, rtol=0, atol=1e-12)


@pytest.mark.parametrize("Q", [1, 2, 5, 8, 64])
def test_the_ut_transform_solves_the_unit_lower_triangular_system(Q: int) -> None:
    """(I + A)⁻¹ rhs by products of (I + N^{2^i}) = torch's triangular solve."""
    g = torch.Generator().manual_seed(Q)
    A = torch.randn(3, Q, Q, generator=g, dtype=torch.float64).tril(-1) / Q
    rhs = torch.randn(3, Q, 5, generator=g, dtype=torch.float64)
    eye = torch.eye(Q, dtype=torch.float64)
    expected = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    torch.testing.assert_close(unit_lower_solve(A, rhs), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("overrides,needle", [
    ({"name": "encoder_only"},
     "model.attention=gated_deltanet is causal only and model=encoder_only"),
    ({"name": "encoder_decoder"}, "has no cross-attention"),
    ({"pos": "rope"}, "model.pos=rope"),
    ({"n_kv_heads": 1}, "model.n_kv_heads=1"),
    ({"qk_norm": True}, "model.qk_norm=true (it L2-normalises its queries and keys itself)"),
    ({"attn_impl": "math"}, "model.attn_impl=math"),
    ({"norm": "deepnorm"}, "model.norm=deepnorm"),
    ({"param": "mup"}, "model.param=mup"),
    ({"ssm_state": 8}, "model.ssm_state=8 applies to model.attention=mamba2"),
    ({"ssm_chunk": 8}, "model.ssm_chunk=8 applies to model.attention=mamba2"),
    ({"attention": "full"}, "model.delta_chunk=4 applies to model.attention=gated_deltanet"),
])  # fmt: skip
def test_gated_deltanet_is_refused_where_it_does_not_apply_in_one_line(
    overrides: dict, needle: str
) -> None:
    with pytest.raises(ConfigError) as e:
        ModelConfig.from_dict({**GDN, **overrides})
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("init", ["paper", "xavier", "gpt2"])
def test_model_init_sets_the_projections_and_keeps_the_decay_parameters(init: str) -> None:
    """A ∈ [1, 16] and Δ = softplus(dt_bias) ∈ [0.001, 0.1] whatever model.init is; with
    model.zero_init_residual the output projection is W_O: it starts at zero."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**GDN, "init": init, "zero_init_residual": True})
    for layer in build_model(cfg).decoder.layers:
        mixer = layer.self_attn
        A = torch.exp(mixer.A_log.detach())
        dt = F.softplus(mixer.dt_bias.detach())
        assert bool(((A >= 1) & (A <= 16)).all()) and bool(((dt >= 1e-3) & (dt <= 0.1)).all())
        assert not mixer.out_proj.weight.any() and mixer.in_proj.weight.any()


needs_fla = pytest.mark.skipif(not (gated_deltanet.FLA and torch.cuda.is_available()),
                               reason="flash-linear-attention's kernels need the fla extra "
                               "and CUDA")  # fmt: skip


@needs_fla
@pytest.mark.parametrize("carried", [False, True], ids=["from-zero", "from-a-state"])
def test_flash_linear_attention_kernel_equals_the_pytorch_form(carried: bool) -> None:
    """Its chunk_gated_delta_rule (chunks of 64) on CUDA = the chunked form in float64."""
    b, T, H, dk, dv = 2, 200, 2, 64, 128
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(b, T, H, dk, generator=g), dim=-1) / dk**0.5
    k = F.normalize(torch.randn(b, T, H, dk, generator=g), dim=-1)
    v = torch.randn(b, T, H, dv, generator=g)
    log_alpha = -torch.rand(b, T, H, generator=g) * 0.1
    beta = torch.rand(b, T, H, generator=g)
    state = torch.randn(b, H, dv, dk, generator=g) if carried else None
    inputs = (q, k, v, log_alpha, beta)
    o, final = gated_deltanet.fla_chunked(*(t.cuda() for t in inputs),
                                          None if state is None else state.cuda())  # fmt: skip
    expected_o, expected_final = gated_delta_chunked(
        *(t.double() for t in inputs), 64, None if state is None else state.double())
    torch.testing.assert_close(o.cpu().double(), expected_o, rtol=5e-3, atol=5e-3)
    torch.testing.assert_close(final.cpu().double(), expected_final, rtol=5e-3, atol=5e-3)


@needs_fla
def test_the_mixer_on_cuda_goes_through_fla_and_equals_the_cpu_mixer() -> None:
    cfg = ModelConfig.from_dict({**GDN, "d_model": 128, "delta_chunk": 16})
    torch.manual_seed(0)
    mixer = GatedDeltaNetMixer(cfg, causal=True)
    x = torch.randn(2, 100, 128)
    expected = mixer(x, None)
    torch.testing.assert_close(mixer.cuda()(x.cuda(), None).cpu(), expected, rtol=5e-3,
                               atol=5e-3)  # fmt: skip
