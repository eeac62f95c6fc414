"""Gated DeltaNet (``model.attention=gated_deltanet``; Yang, Kautz & Hatamizadeh 2025, ICLR,
"Gated Delta Networks: Improving Mamba2 with Delta Rule", §3): a linear-RNN token mixer in
the attention slot of a decoder layer, projections of its own included.

The gated delta rule (§3.1), per head, with a matrix state S ∈ R^{d_v×d_k}:

    S_t = S_{t−1}·(α_t(I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ,      o_t = S_t q_t

α_t ∈ (0, 1) decays the whole memory (Mamba-2's gate), β_t ∈ (0, 1) writes v_t at key k_t
in place of what S_{t−1} held there (the delta rule: S_t k_t = (1 − β_t)·α_t S_{t−1}k_t +
β_t v_t for a unit k_t).

Chunked form (§3.3, the WY representation by the UT transform, extended with the decay):
within a chunk of Q tokens entering with state S₀, γ_r = α_1⋯α_r, Γ_{rj} = γ_r/γ_j (j ≤ r),
the values the chunk writes E (rows e_r = β_r(v_r − α_r S_{r−1} k_r)) solve a unit lower
triangular system (I + A)E = diag(β)(V − diag(γ) K S₀ᵀ), A = tril₋₁(diag(β)KKᵀ ∘ Γ):

    U = T diag(β) V,   W = T diag(βγ) K,   T = (I + A)⁻¹,   E = U − W S₀ᵀ
    O = diag(γ) Q S₀ᵀ + (Q Kᵀ ∘ Γ) E,       S_Q = γ_Q S₀ + Eᵀ diag(γ_Q/γ) K

U, W, T and Q Kᵀ ∘ Γ are computed for all chunks at once; only E, O and S pass from chunk
to chunk. T = Π_i (I + N^{2^i}) for the nilpotent N = −A (N^Q = 0): matrix products only.

The block around the rule (§3.4, fla's ``GatedDeltaNet`` layer): q, k, v = SiLU(causal
depthwise conv1d of kernel ``ssm_conv``) of their projections; q and k L2-normalised per
head, q scaled by 1/√d_k; β_t = σ(W_β x_t); α_t = exp(−exp(A_log)·softplus(W_α x_t +
dt_bias)), Mamba-2's decay; the output RMSNorm(o_t)·SiLU(W_g x_t) per head, then W_O.

Decoding (:func:`gated_delta_step`) keeps a constant-size state per layer
(:class:`~attnlab.nn.mamba2.Mamba2State`): S (H, d_v, d_k) and the conv's last K − 1 inputs.
On CUDA, with flash-linear-attention installed (the ``fla`` extra), training and prompts go
through its ``chunk_gated_delta_rule`` kernel (its own chunks of 64 tokens); elsewhere this
PyTorch form. Padded positions (a left-padded prompt) get α = 1, β = 0 and zero inputs: the
state passes them unchanged.
"""

from __future__ import annotations

import importlib.util
import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import ConfigError
from attnlab.nn.kernels import Keeps
from attnlab.nn.mamba2 import Mamba2State, causal_conv, segsum

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig

FLA = importlib.util.find_spec("fla") is not None  # the optional ``fla`` extra


def l2_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x/√(‖x‖² + ε) over the last dimension, as flash-linear-attention's ``l2norm`` (and
    transformers' Gated DeltaNet) compute it: a zero vector (a padded position) stays 0."""
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


def unit_lower_solve(A: Tensor, rhs: Tensor) -> Tensor:
    """(I + A)⁻¹ rhs for A (…, Q, Q) strictly lower triangular: with N = −A nilpotent,
    (I − N)⁻¹ = I + N + … + N^{Q−1} = Π_{i<m} (I + N^{2^i}), 2^m ≥ Q — m products with
    rhs and m − 1 squarings."""
    steps = (A.size(-1) - 1).bit_length()
    N = -A
    for i in range(steps):
        rhs = rhs + N @ rhs
        if i < steps - 1:
            N = N @ N
    return rhs


def gated_delta_chunked(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, chunk: int,
    state: Tensor | None = None, final: bool = True,
) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """The chunked form (§3.3): q, k (b, T, H, d_k), v (b, T, H, d_v), g = log α and β
    (b, T, H), the state before the first token (b, H, d_v, d_k) or None (zeros) →
    (o (b, T, H, d_v), the state after the last token, or None when not ``final``: training
    needs only the states passed across the chunk boundaries).

    Chunks of min(chunk, T) tokens; the last one is padded with α = 1, β = 0 and zero
    inputs, which leave the state as it is."""
    b, T, H, dk = k.shape
    dv = v.size(-1)
    Q = min(chunk, T)
    n, pad = -(-T // Q), -T % Q
    q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).view(b, n, Q, H, -1).permute(0, 3, 1, 2, 4)
               for t in (q, k, v))  # (b, H, n, Q, ·)  # fmt: skip
    g, beta = (F.pad(t, (0, 0, 0, pad)).view(b, n, Q, H).permute(0, 3, 1, 2) for t in (g, beta))
    log_gamma = g.cumsum(dim=-1)  # log γ_r within each chunk, (b, H, n, Q)
    decay = torch.exp(segsum(g))  # Γ_{rj} = γ_r/γ_j for j ≤ r, 0 above, (b, H, n, Q, Q)
    kk = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)  # A
    UW = unit_lower_solve(kk, torch.cat([beta[..., None] * v,  # U = T diag(β) V
                                         (beta * log_gamma.exp())[..., None] * k], -1))  # W
    U, W = UW.split([dv, dk], dim=-1)
    scores = (q @ k.transpose(-1, -2)) * decay  # Q Kᵀ ∘ Γ, (b, H, n, Q, Q)
    S, outputs = state, []  # None: zeros, whose products are skipped
    for i in range(n):  # the state passes from chunk to chunk
        E, read = U[:, :, i], 0.0  # E: the values written, (b, H, Q, d_v)
        gamma = log_gamma[:, :, i].exp()[..., None]
        if S is not None:
            E = E - W[:, :, i] @ S.transpose(-1, -2)
            read = (gamma * q[:, :, i]) @ S.transpose(-1, -2)  # diag(γ) Q S₀ᵀ
        outputs.append(read + scores[:, :, i] @ E)
        if i < n - 1 or final:
            to_end = (log_gamma[:, :, i, -1:] - log_gamma[:, :, i]).exp()[..., None]  # γ_Q/γ_r
            written = (E * to_end).transpose(-1, -2) @ k[:, :, i]
            S = written if S is None else gamma[:, :, -1:] * S + written
    o = torch.stack(outputs, dim=2).reshape(b, H, n * Q, dv)[:, :, :T]
    return o.transpose(1, 2), S


def gated_delta_step(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """One token of the rule: q, k (b, H, d_k), v (b, H, d_v), g = log α and β (b, H), S
    (b, H, d_v, d_k) → (o_t = S_t q_t (b, H, d_v), S_t = S' + β(v − S'k)kᵀ with S' = α S)."""
    S = g.exp()[..., None, None] * state
    error = v - (S @ k[..., None]).squeeze(-1)  # v_t − α_t S_{t−1} k_t
    S = S + (beta[..., None] * error)[..., None] * k[:, :, None, :]
    return (S @ q[..., None]).squeeze(-1), S


def fla_chunked(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """:func:`gated_delta_chunked` by flash-linear-attention's Triton kernel (CUDA only).
    Its state is (…, d_k, d_v), the transpose of S; q arrives scaled (scale 1)."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    initial = None if state is None else state.transpose(-1, -2).float().contiguous()
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    o, final = chunk_gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta, scale=1.0,
                                      initial_state=initial, output_final_state=True)  # fmt: skip
    return o, final.transpose(-1, -2).to(v.dtype)


class GatedDeltaNetMixer(nn.Module):
    """Gated DeltaNet's block (§3.4) in the attention slot of a decoder layer:
    ``forward(x, inputs, cache=…)`` as ``MultiHeadAttention``'s, (b, T, d_model) → same.

    Sizes: H = ``model.n_heads`` heads, d_k = d_model/H, d_v = ``ssm_expand``·d_k, conv
    kernel K = ``ssm_conv``, chunks of ``delta_chunk`` tokens. Initialisation as fla's
    layer for Δ's bias (the inverse softplus of Δ ~ logU[0.001, 0.1]) and the unbiased conv;
    A ~ U[1, 16] as ``mamba_ssm``'s Mamba-2 (fla draws U[0, 16]); ``model.init`` sets the
    two projections only (the output one as a residual output projection).
    """

    mixer = True
    causal_ok = True
    pattern = None  # no softmax: no FlexAttention path
    record_weights = False  # no attention weights for the attention maps
    last_weights = None

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        if not causal:
            raise ConfigError("model.attention=gated_deltanet is causal only; use "
                              "model=decoder_only")  # fmt: skip
        self.H, self.K, self.chunk = cfg.n_heads, cfg.ssm_conv, cfg.delta_chunk
        self.dk = cfg.d_model // cfg.n_heads
        self.dv = cfg.ssm_expand * self.dk
        self.key_dim, self.value_dim = self.H * self.dk, self.H * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim  # the conv runs over (q, k, v)
        self.split_sizes = [self.conv_dim, self.value_dim, self.H, self.H]  # (q, k, v), g, α, β
        self.in_proj = nn.Linear(cfg.d_model, sum(self.split_sizes), bias=cfg.bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.K, groups=self.conv_dim,
                                bias=False)  # fmt: skip
        dt = torch.exp(torch.empty(self.H).uniform_(math.log(1e-3), math.log(1e-1))).clamp(1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(Δ)
        self.A_log = nn.Parameter(torch.empty(self.H).uniform_(1, 16).log())
        self.norm = nn.RMSNorm(self.dv, eps=1e-5)  # per head, before the output gate
        self.out_proj = nn.Linear(self.value_dim, cfg.d_model, bias=cfg.bias)

    @property
    def keeps(self) -> Keeps:
        """A decoding cache of its own: the constant-size state (S, the conv's window)."""
        return Keeps(own_cache=Mamba2State)

    def own_init(self) -> list[nn.Parameter]:
        """The parameters ``model.init`` leaves as initialised here."""
        return [self.dt_bias, self.A_log, self.conv1d.weight, self.norm.weight]

    def forward(
        self, x: Tensor, inputs: Any, memory: Tensor | None = None,
        cache: Mamba2State | None = None,
    ) -> Tensor:  # fmt: skip
        b, T, _ = x.shape
        qkv, gate, a, beta = self.in_proj(x).split(self.split_sizes, dim=-1)
        real = getattr(inputs, "key_real", None)
        keep = None if real is None else real[:, -T:, None].to(x.dtype)  # padding: no input
        if keep is not None:
            qkv = qkv * keep
        q, k, v = F.silu(causal_conv(qkv, self.conv1d, cache)).split(
            [self.key_dim, self.key_dim, self.value_dim], dim=-1)  # fmt: skip
        q = l2_normalize(q.view(b, T, self.H, self.dk)) / math.sqrt(self.dk)
        k = l2_normalize(k.view(b, T, self.H, self.dk))
        v = v.view(b, T, self.H, self.dv)
        g = -torch.exp(self.A_log) * F.softplus(a + self.dt_bias)  # log α_t, (b, T, H)
        beta = torch.sigmoid(beta)
        if keep is not None:  # α = 1, β = 0: the state passes a padded position as is
            g, beta = g * keep, beta * keep
        state = None if cache is None else cache.ssm
        if state is not None and T == 1:  # a decoding step: the recurrence itself
            o, state = gated_delta_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], state)
            o = o[:, None]
        elif FLA and x.is_cuda:
            o, state = fla_chunked(q, k, v, g, beta, state)
        else:
            o, state = gated_delta_chunked(q, k, v, g, beta, self.chunk, state,
                                           final=cache is not None)  # fmt: skip
        if cache is not None:
            cache.ssm = state
        o = self.norm(o) * F.silu(gate.view(b, T, self.H, self.dv))  # RMSNorm(o)·SiLU(W_g x)
        return self.out_proj(o.reshape(b, T, self.value_dim))
