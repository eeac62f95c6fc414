"""Scaled dot-product and multi-head attention (Vaswani et al. 2017, §3.2).

    Attention(Q, K, V) = softmax(QKᵀ / √d_k + M) V                      (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W_O,
        head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i)

Masks are boolean, ``True`` where a query may attend to a key, broadcastable to
(B, H, T_q, T_k); masked scores become −inf *before* the softmax. Positional
schemes that act inside attention contribute an additive ``bias`` (ALiBi, T5)
or rotate queries and keys (RoPE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ATTN_IMPLS = ("sdpa", "math")


def math_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """softmax(QKᵀ/√d_k + bias + M)V computed explicitly; returns (output, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if is_causal:
        Tq, Tk = scores.shape[-2:]
        mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, p=dropout_p) @ v if dropout_p > 0 else weights @ v
    return out, weights


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> Tensor:
    """The same computation through ``F.scaled_dot_product_attention``.

    With no mask and no bias, ``is_causal`` lets PyTorch pick the flash or
    memory-efficient kernel without materialising a (T, T) mask.
    """
    if bias is None and mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    attn_mask: Tensor | None = mask
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


@dataclass
class AttentionInputs:
    """What a stack computes once and hands to every self-attention layer."""

    mask: Tensor | None = None  # bool, True = may attend, (B|1, 1, Tq, Tk)
    bias: Tensor | None = None  # additive position bias, (B|1, H, Tq, Tk)
    rope: tuple[Tensor, Tensor] | None = None  # (cos, sin) for the new positions
    is_causal: bool = False  # pure causal, no padding: the fused kernel's fast path


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections W_Q, W_K, W_V and output projection W_O.

    Self-attention when ``memory`` is None; cross-attention otherwise, with
    K and V projected from the encoder output (§3.2.3). ``cache`` (a dict per
    layer) holds keys/values of earlier steps for incremental decoding, and the
    projected encoder K/V so they are computed once per sequence.
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout: float = 0.0, impl: str = "sdpa"
    ) -> None:
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads, self.d_head, self.impl = n_heads, d_model // n_heads, impl
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)  # W_O
        self.dropout = dropout
        self.last_weights: Tensor | None = None  # filled when record_weights is set
        self.record_weights = False

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d_head)

    def forward(
        self,
        x: Tensor,
        inputs: AttentionInputs,
        memory: Tensor | None = None,
        cache: dict[str, Tensor] | None = None,
    ) -> Tensor:
        q = self._heads(self.q_proj(x))
        if memory is not None:  # cross-attention: K, V from the encoder output
            if cache is not None and "cross_k" in cache:
                k, v = cache["cross_k"], cache["cross_v"]
            else:
                k, v = self._heads(self.k_proj(memory)), self._heads(self.v_proj(memory))
                if cache is not None:
                    cache["cross_k"], cache["cross_v"] = k, v
        else:
            k, v = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
            if inputs.rope is not None:
                q, k = apply_rotary(q, *inputs.rope), apply_rotary(k, *inputs.rope)
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        dropout_p = self.dropout if self.training else 0.0
        if self.impl == "math" or self.record_weights:
            out, weights = math_attention(
                q, k, v, inputs.mask, inputs.bias, dropout_p, inputs.is_causal
            )
            if self.record_weights:
                self.last_weights = weights.detach()
        else:
            out = fused_attention(q, k, v, inputs.mask, inputs.bias, dropout_p, inputs.is_causal)
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh))


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x_2i, x_2i+1) by position·θ_i (RoFormer, Su et al. 2021, eq. 34)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)
