"""Differential attention (``model.attention=differential``; Ye et al. 2025, ICLR,
"Differential Transformer", §2.1): the difference of two softmax maps cancels the
attention that both give to irrelevant context.

    [Q₁; Q₂] = X W_Q,  [K₁; K₂] = X W_K,  V = X W_V
    DiffAttn(X) = (softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d)) V                    (eq. 1)
    λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init                                 (eq. 2)
    λ_init = 0.8 − 0.6·exp(−0.3·(l − 1)) at layer l ∈ [1, L]
    head_i = (1 − λ_init)·GroupNorm(DiffAttn_i(X))                                (eq. 3)

attnlab's ``model.n_heads`` heads of d = d_model/n_heads form n_heads/2 pairs: heads 2i and
2i + 1 give pair i its (Q₁, K₁) and (Q₂, K₂), and their values side by side its V of 2d,
as the paper's code lays them out (``multihead_diffattn.py``: Q and K viewed as 2h heads
of d, V as h heads of 2d). The paper compares h pairs with a Transformer of 2h heads, the
same projections. GroupNorm is the per-head normalisation of that code: an RMSNorm over
each pair's 2d outputs (ε = 1e-5, a learned scale shared by the pairs of a layer). λ_q1,
λ_k1, λ_q2, λ_k2 ∈ R^d are learned per layer, drawn N(0, 0.1²).

Both maps see the same keys (causality, padding), so decoding keeps every key and value
(the default cache) and a cached step computes its row of the whole sequence.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.attention_kinds import AttentionKind, _attend_masked

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig


def default_lambda_init(layer: int) -> float:
    """λ_init = 0.8 − 0.6·exp(−0.3·(l − 1)) for layer l ≥ 1 (Ye et al. 2025, §2.1)."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


class DifferentialAttention(AttentionKind):
    """(softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))V per pair of heads, RMS-normed and scaled by
    1 − λ_init (eq. 1–3); queries, keys and values (B, H, T, d) in, (B, H, T, d) out.

    ``layer_number``: l, this layer's number in its stack (1 first), set by the stack that holds
    it; ``model.lambda_init`` fixes λ_init for every layer instead. ``attend`` computes
    each map's product with V through SDPA (the flash kernels on CUDA: A₁V and A₂V, then
    their difference); ``reference`` writes both maps out and forms A₁ − λA₂ first, as
    eq. 1 does.
    """

    has_params = True
    pattern = None  # type: ignore[assignment]  # two maps, not one softmax: no FlexAttention path

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__(cfg, causal)
        d = cfg.d_model // cfg.n_heads
        self.layer_number = 1
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.zeros(d).normal_(mean=0.0, std=0.1)) for _ in range(4)
        )
        self.head_norm = nn.RMSNorm(2 * d, eps=1e-5)  # the paper's per-head GroupNorm

    @property
    def lambda_init(self) -> float:
        fixed = self.cfg.get("lambda_init")
        return default_lambda_init(self.layer_number) if fixed is None else float(fixed)

    def lam(self) -> Tensor:
        """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init (eq. 2), a scalar."""
        first = torch.exp((self.lambda_q1 * self.lambda_k1).sum())
        return first - torch.exp((self.lambda_q2 * self.lambda_k2).sum()) + self.lambda_init

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        pair_v = _pair_values(v)  # (B, H/2, T_k, 2d)
        visible = None
        if key_real is not None or (self.causal and q_offset > 0):
            visible = self.visibility(q.size(2), k.size(2), q_offset, key_real, q.device).dense()
        maps = []
        for half in (0, 1):  # softmax(Q_h K_hᵀ/√d) V for h = 1, 2
            qh, kh = q[:, half::2], k[:, half::2]
            if visible is None:
                maps.append(F.scaled_dot_product_attention(
                    qh, kh, pair_v, dropout_p=dropout_p, is_causal=self.causal))  # fmt: skip
            else:
                maps.append(_attend_masked(qh, kh, pair_v, visible, dropout_p))
        return self.heads(maps[0] - self.lam().to(q.dtype) * maps[1])

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None, q_offset: int = 0
    ) -> Tensor:
        """Eq. 1–3 written out: the 2·(H/2) maps, A₁ − λA₂, then × V, the norm and 1 − λ_init."""
        B, H, Tq, d = q.shape
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, T_q, T_k)
        visible = self.visibility(Tq, k.size(2), q_offset, key_real, q.device).dense()
        if visible is not None:
            no_key = ~visible.any(dim=-1, keepdim=True)  # a row without keys: output 0
            scores = scores.masked_fill(~visible, float("-inf")).masked_fill(no_key, 0.0)
        weights = scores.softmax(dim=-1)
        if visible is not None:
            weights = weights.masked_fill(no_key, 0.0)
        weights = weights.unflatten(1, (H // 2, 2))  # (B, H/2, 2, T_q, T_k): the pairs
        difference = weights[:, :, 0] - self.lam().to(q.dtype) * weights[:, :, 1]
        return self.heads(difference @ _pair_values(v))

    def heads(self, pairs: Tensor) -> Tensor:
        """(1 − λ_init)·RMSNorm of each pair's output (eq. 3), (B, H/2, T, 2d) → (B, H, T, d):
        pair i's 2d outputs as heads 2i and 2i + 1, so W_O reads them where the paper's
        concatenation puts them."""
        out = (self.head_norm(pairs) * (1.0 - self.lambda_init)).to(pairs.dtype)
        d = out.size(-1) // 2
        return out.unflatten(-1, (2, d)).transpose(2, 3).flatten(1, 2)


def _pair_values(v: Tensor) -> Tensor:
    """(B, H, T, d) → (B, H/2, T, 2d): heads 2i and 2i + 1 side by side, pair i's V."""
    B, H, T, d = v.shape
    return v.unflatten(1, (H // 2, 2)).transpose(2, 3).reshape(B, H // 2, T, 2 * d)
