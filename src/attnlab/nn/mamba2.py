"""Mamba-2's SSD mixer (``model.attention=mamba2``; Dao & Gu 2024, ICML, "Transformers are
SSMs: Generalized Models and Efficient Algorithms Through Structured State Space Duality",
§6–7): a selective state-space model in the attention slot of a decoder layer — a token
mixer with projections of its own, not a kernel between W_Q, W_K, W_V and W_O.

The selective SSM h_t = A_t h_{t−1} + B_t x_t, y_t = C_tᵀ h_t (eq. 2, §2.1) with SSD's
scalar-times-identity A_t = a_t·I (§5.1), discretised as in Mamba (the paper omits it, §2.1
Remark 1; ``mamba_ssm`` uses a_t = exp(Δ_t·A) and Δ_t·B_t), per head — H heads of P =
expand·d_model/H channels, A = −exp(A_log) a scalar per head, B, C ∈ R^N shared by the heads
(one group, Fig. 6):

    h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·x_t B_tᵀ          h ∈ R^{P×N}
    y_t = h_t C_t + D·x_t

Unrolled, y = M x with M_{ij} = C_iᵀB_j·exp(Δ_{j+1}A + … + Δ_iA)·Δ_j for j ≤ i (the matrix
form, eq. 3): a 1-semiseparable mask times C Bᵀ, a masked and decayed "attention". The
SSD algorithm (§6, Listing 1 ``ssd_minimal``) computes it in chunks of Q tokens:

    1. within a chunk, the quadratic form (C Bᵀ ∘ L) X, L_{ij} = exp(segsum(ΔA))_{ij}
    2. each chunk's final state from its own inputs, Σ_j exp(Σ_{k>j} Δ_kA)·X_j B_jᵀ
    3. the states passed across chunks (the same recurrence, over chunk boundaries)
    4. the state entering a chunk read out by each position, C_i·exp(Σ_{k≤i} Δ_kA)·h

(X = Δ·x.) Mamba-2's block around the SSM (§7.1, Fig. 6): one input projection to (z, x, B,
C, Δ); a causal depthwise conv1d of kernel ``ssm_conv`` over (x, B, C) and SiLU; Δ =
softplus(Δ + dt_bias); the extra normalisation RMSNorm(y·SiLU(z)) before the output
projection; the output projection.

Decoding (:func:`ssd_step`) keeps a constant-size state per layer (:class:`Mamba2State`): h
(H, P, N) and the conv's last ``ssm_conv`` − 1 inputs. This is PyTorch only; the fused
CUDA/Triton kernels of ``mamba_ssm`` and flash-linear-attention are not used. Padded
positions (a left-padded prompt) get Δ = 0 and zero inputs, so they carry the state through
unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import ConfigError
from attnlab.nn.kernels import Keeps

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig


def segsum(a: Tensor) -> Tensor:
    """(…, T) → (…, T, T): out[i, j] = a_{j+1} + … + a_i for j ≤ i, −inf above the
    diagonal, so exp(segsum(ΔA)) is the decay mask L of the 1-SS matrix (Listing 1)."""
    T = a.size(-1)
    a = a[..., None, :].expand(*a.shape, T).transpose(-1, -2)  # [..., i, j] = a_i
    below = torch.ones(T, T, dtype=torch.bool, device=a.device).tril(-1)
    sums = a.masked_fill(~below, 0.0).cumsum(dim=-2)
    return sums.masked_fill(~torch.ones_like(below).tril(), float("-inf"))


def ssd_chunked(
    x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk: int,
    state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The SSD block decomposition (§6, Listing 1): x (b, T, H, P), Δ (b, T, H), A (H,),
    B and C (b, T, N), the state before the first token (b, H, P, N) or None (zeros) →
    (y (b, T, H, P) without D·x, the state after the last token).

    The sequence is cut in chunks of min(chunk, T) tokens; the last one is padded with
    Δ = 0 and zero inputs, which leave the state as it is."""
    b, T, H, P = x.shape
    Q = min(chunk, T)
    n, pad = -(-T // Q), -T % Q
    X = F.pad(x * dt[..., None], (0, 0, 0, 0, 0, pad))  # Δ_t·x_t
    a = F.pad(dt * A, (0, 0, 0, pad))  # Δ_t·A, (b, T', H)
    X = X.view(b, n, Q, H, P).permute(0, 3, 1, 2, 4)  # (b, H, n, Q, P)
    a = a.view(b, n, Q, H).permute(0, 3, 1, 2)  # (b, H, n, Q)
    Bc, Cc = (F.pad(t, (0, 0, 0, pad)).view(b, 1, n, Q, -1) for t in (B, C))  # (b, 1, n, Q, N)
    a_cum = a.cumsum(dim=-1)
    # 1. within each chunk: (C Bᵀ ∘ L) X
    L = torch.exp(segsum(a))  # (b, H, n, Q, Q)
    y_diag = ((Cc @ Bc.transpose(-1, -2)) * L) @ X  # (b, H, n, Q, P)
    # 2. each chunk's own final state: Σ_j exp(Σ_{k>j} Δ_kA) X_j B_jᵀ
    decay_to_end = torch.exp(a_cum[..., -1:] - a_cum)  # (b, H, n, Q)
    states = (X * decay_to_end[..., None]).transpose(-1, -2) @ Bc  # (b, H, n, P, N)
    # 3. across chunks: the state entering each chunk, then the final one
    if state is None:
        state = x.new_zeros(b, H, P, Bc.size(-1))
    states = torch.cat([state[:, :, None], states], dim=2)  # (b, H, n + 1, P, N)
    decay_chunks = torch.exp(segsum(F.pad(a_cum[..., -1], (1, 0))))  # (b, H, n + 1, n + 1)
    states = (decay_chunks @ states.flatten(-2)).view_as(states)
    entering, final = states[:, :, :-1], states[:, :, -1]
    # 4. the entering state read out at each position: C_i exp(Σ_{k≤i} Δ_kA) h
    y_off = (Cc @ entering.transpose(-1, -2)) * torch.exp(a_cum)[..., None]  # (b, H, n, Q, P)
    y = (y_diag + y_off).reshape(b, H, n * Q, P)[:, :, :T]
    return y.transpose(1, 2), final


def ssd_step(
    x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """One token of the recurrence (eq. 2 with A_t = exp(Δ_t·A)·I): x (b, H, P), Δ (b, H), B
    and C (b, N), h (b, H, P, N) → (y = h_t C_t (b, H, P), h_t = exp(Δ_t·A)·h_{t−1} +
    Δ_t·x_t B_tᵀ)."""
    decay = torch.exp(dt * A)[..., None, None]
    state = decay * state + (dt[..., None] * x)[..., None] * B[:, None, None, :]
    return (state @ C[:, None, :, None]).squeeze(-1), state


@dataclass
class Mamba2State:
    """A Mamba-2 (or Gated DeltaNet) layer's decoding cache, the same size after every token:
    ``conv``, the last ``ssm_conv`` − 1 inputs of the conv (b, conv channels, K − 1), and
    ``ssm``, the recurrent state (Mamba-2's h (b, H, P, N); Gated DeltaNet's S (b, H, d_v,
    d_k)). None before the prompt."""

    conv: Tensor | None = None
    ssm: Tensor | None = None
    past: Any = None  # the LayerCache protocol's; a state has no keys

    def update(self, *args: object) -> Any:
        raise TypeError("a recurrent state is updated by its layer, not with keys and values")

    def reorder(self, index: Tensor) -> None:
        """Batch rows ``index`` (beam search)."""
        if self.conv is not None and self.ssm is not None:
            self.conv, self.ssm = self.conv.index_select(0, index), self.ssm.index_select(0, index)

    def tensors(self) -> list[Tensor]:
        return [t for t in (self.conv, self.ssm) if t is not None]


class Mamba2Mixer(nn.Module):
    """Mamba-2's block (§7.1, Fig. 6) in the attention slot of a decoder layer:
    ``forward(x, inputs, cache=…)`` as ``MultiHeadAttention``'s, (b, T, d_model) → same.

    Sizes: d_inner = ``ssm_expand``·d_model, H = ``model.n_heads`` heads of P = d_inner/H,
    N = ``ssm_state``, conv kernel K = ``ssm_conv``, chunks of ``ssm_chunk`` tokens.
    Initialisation as ``mamba_ssm``'s ``Mamba2``: A ~ U[1, 16] (A_log = log A), Δ's bias
    the inverse softplus of Δ ~ logU[0.001, 0.1], D = 1; ``model.init`` sets the two
    projections only (the output one as a residual output projection).
    """

    mixer = True
    causal_ok = True
    pattern = None  # no softmax: no FlexAttention path
    # no attention weights: attention maps (attnlab.callbacks.attention_maps) record none,
    # as for the other kinds
    record_weights = False
    last_weights = None

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        if not causal:
            raise ConfigError("model.attention=mamba2 is causal only; use model=decoder_only")
        d_inner = cfg.ssm_expand * cfg.d_model
        self.H, self.N, self.K, self.chunk = cfg.n_heads, cfg.ssm_state, cfg.ssm_conv, cfg.ssm_chunk
        self.d_inner, self.P = d_inner, d_inner // cfg.n_heads
        self.conv_dim = d_inner + 2 * self.N  # the conv runs over (x, B, C)
        self.in_proj = nn.Linear(cfg.d_model, d_inner + self.conv_dim + self.H, bias=cfg.bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.K, groups=self.conv_dim)
        dt = torch.exp(torch.empty(self.H).uniform_(math.log(1e-3), math.log(1e-1))).clamp(1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(Δ)
        self.A_log = nn.Parameter(torch.empty(self.H).uniform_(1, 16).log())
        self.D = nn.Parameter(torch.ones(self.H))
        self.norm = nn.RMSNorm(d_inner, eps=1e-5)  # the gated RMSNorm's scale
        self.out_proj = nn.Linear(d_inner, cfg.d_model, bias=cfg.bias)

    @property
    def keeps(self) -> Keeps:
        """A decoding cache of its own: the constant-size :class:`Mamba2State`."""
        return Keeps(own_cache=Mamba2State)

    def own_init(self) -> list[nn.Parameter]:
        """The parameters ``model.init`` leaves as initialised here."""
        return [self.dt_bias, self.A_log, self.D, *self.conv1d.parameters(), self.norm.weight]

    def forward(
        self, x: Tensor, inputs: Any, memory: Tensor | None = None,
        cache: Mamba2State | None = None,
    ) -> Tensor:  # fmt: skip
        b, T, _ = x.shape
        z, xBC, dt = self.in_proj(x).split([self.d_inner, self.conv_dim, self.H], dim=-1)
        real = getattr(inputs, "key_real", None)
        keep = None if real is None else real[:, -T:, None].to(x.dtype)  # padding: no input
        if keep is not None:
            xBC = xBC * keep
        xBC = F.silu(self.conv(xBC, cache))
        dt = F.softplus(dt + self.dt_bias)
        if keep is not None:
            xBC, dt = xBC * keep, dt * keep  # Δ = 0: the state passes a padded position as is
        xs, B, C = xBC.split([self.d_inner, self.N, self.N], dim=-1)
        xs = xs.view(b, T, self.H, self.P)
        A = -torch.exp(self.A_log)
        state = None if cache is None else cache.ssm
        if state is not None and T == 1:  # a decoding step: the recurrence itself
            y, state = ssd_step(xs[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], state)
            y = y[:, None]
        else:
            y, state = ssd_chunked(xs, dt, A, B, C, self.chunk, state)
        if cache is not None:
            cache.ssm = state
        y = y + xs * self.D[:, None]  # + D·x
        y = self.norm(y.reshape(b, T, self.d_inner) * F.silu(z)).to(y.dtype)  # RMSNorm(y·SiLU(z))
        return self.out_proj(y)

    def conv(self, xBC: Tensor, cache: Mamba2State | None) -> Tensor:
        """The causal depthwise conv1d over (x, B, C): :func:`causal_conv`."""
        return causal_conv(xBC, self.conv1d, cache)


def causal_conv(x: Tensor, conv1d: nn.Conv1d, cache: Mamba2State | None) -> Tensor:
    """A causal depthwise conv1d over (b, T, channels) → same: the K − 1 inputs before the
    first (zeros, or the cached ones) prepended; the cache keeps the last K − 1."""
    window = x.transpose(1, 2)  # (b, channels, T)
    channels, K = conv1d.in_channels, conv1d.kernel_size[0]
    before = None if cache is None else cache.conv
    if before is None:
        before = window.new_zeros(window.size(0), channels, K - 1)
    window = torch.cat([before, window], dim=-1)
    if cache is not None:
        cache.conv = window[..., window.size(-1) - (K - 1) :]
    out = F.conv1d(window, conv1d.weight, conv1d.bias, groups=channels)
    return out.transpose(1, 2)
