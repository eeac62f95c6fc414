"""Multi-head latent attention (``model.attention=mla``; DeepSeek-AI 2024, "DeepSeek-V2",
§2.1): keys and values are up-projected from one low-rank latent per token, so a decoding
cache keeps that latent and one small rotary key instead of every head's K and V.

    c_t^KV = W^DKV h_t                                   (eq. 9)   d_c
    k_t^C = W^UK c_t^KV,   v_t^C = W^UV c_t^KV            (eq. 10, 11)   n_h·d_h each
    c_t^Q = W^DQ h_t,      q_t^C = W^UQ c_t^Q             (eq. 12, 13)   d_c', n_h·d_h
    q_t^R = RoPE(W^QR c_t^Q)                             (eq. 14)   n_h·d_h^R, per head
    k_t^R = RoPE(W^KR h_t)                               (eq. 15)   d_h^R, shared by the heads
    q_t,i = [q_t,i^C; q_t,i^R],  k_t,i = [k_t,i^C; k_t^R]  (eq. 16, 17)
    o_t,i = Σ_j softmax_j(q_t,iᵀ k_j,i / √(d_h + d_h^R)) v_j,i^C    (eq. 18)
    u_t = W^O [o_t,1; …; o_t,n_h]                        (eq. 19)

d_h = d_model/n_heads; d_c = ``model.kv_latent_rank`` (null: 4·d_h, DeepSeek-V2's 512 for
d_h = 128), d_c' = ``model.q_latent_rank`` (null: no query compression, c_t^Q = h_t, as
DeepSeek-V2-Lite), d_h^R = ``model.rope_head_dim`` (null: d_h/2, DeepSeek-V2's 64). RoPE
rotates only the decoupled d_h^R dimensions (its frequencies 10000^(−2i/d_h^R)): a rotation
between W^UK and the query would keep W^UK from being absorbed into W^UQ (§2.1.3). With another
``model.pos`` there is no decoupled part (d_h^R = 0: no q^R, no k^R, the cache keeps c^KV
alone) and positions act as they do in full attention (added to the embeddings, or a bias
on the scores). The
latents have no RMSNorm: the equations have none (DeepSeek-V2's released model adds one
after c^KV and c^Q).

Decoding keeps [c_t^KV; k_t^R], d_c + d_h^R numbers a token and layer (eq. 9, 15), in the
cache's (keys, values) slots as one head each; each step up-projects the cached latents
again (eq. 10, 11). The weight absorption of §2.1.2 (W^UK into W^UQ, W^UV into W^O, so a
step attends in the latent space) is not done: the step computes exactly eq. 10–19.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from attnlab.components.attention import MultiHeadLatentAttentionConfig
from attnlab.nn.attention import KernelSwitch
from attnlab.nn.attention_kinds import FullAttention
from attnlab.nn.kernels import (
    AttentionInputs,
    ExplicitSoftmax,
    Kernel,
    LayerCache,
    Past,
    choose_kernel,
)
from attnlab.nn.positions import apply_rotary

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig


class LatentSoftmax(FullAttention):
    """Eq. 18, the softmax over every key of the up-projected heads: full attention, whose
    queries and keys are d_h + d_h^R wide and values d_h (:class:`MultiHeadLatentAttention`
    forms them). No FlexAttention path of its own: the module computes eq. 18 with full
    attention's kernels (``model.attn_impl``)."""

    pattern = None  # type: ignore[assignment]


class MultiHeadLatentAttention(KernelSwitch, nn.Module):
    """Self-attention of eq. 9–19: the down- and up-projections named as in the paper
    (``w_dkv`` is W^DKV, …), the softmax of eq. 18 by the ``model.attn_impl`` kernel of full
    attention. ``cache`` keeps (c^KV, k^R) as (B, 1, T, d_c) and (B, 1, T, d_h^R)."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        d, self.n_heads, self.d_head = cfg.d_model, cfg.n_heads, cfg.d_head
        d_c, d_cq, self.d_rope = MultiHeadLatentAttentionConfig.sizes(cfg)
        self.d_model, self.causal = d, causal
        self.w_dkv = nn.Linear(d, d_c)  # eq. 9
        self.w_uk = nn.Linear(d_c, d)  # eq. 10: n_h·d_h = d_model
        self.w_uv = nn.Linear(d_c, d)  # eq. 11
        self.w_dq = nn.Linear(d, d_cq) if d_cq is not None else None  # eq. 12
        self.w_uq = nn.Linear(d_cq or d, d)  # eq. 13
        if self.d_rope:  # the decoupled RoPE part, with model.pos=rope
            self.w_qr = nn.Linear(d_cq or d, self.n_heads * self.d_rope)  # eq. 14
            self.w_kr = nn.Linear(d, self.d_rope)  # eq. 15
        self.out_proj = nn.Linear(d, d)  # W^O, eq. 19
        self.dropout = cfg.attn_dropout
        self.kernel: Kernel = choose_kernel(cfg.attn_impl)
        self._chosen = self.kernel

    @KernelSwitch.record_weights.setter
    def record_weights(self, on: bool) -> None:
        """Keep the softmax weights (eq. 18) of the last forward in ``last_weights``: the
        explicit kernel runs while set, as in ``MultiHeadAttention``."""
        self.kernel = ExplicitSoftmax(record=True) if on else self._chosen

    def _heads(self, x: Tensor) -> Tensor:
        B, T, width = x.shape
        return x.view(B, T, self.n_heads, width // self.n_heads).transpose(1, 2)  # (B, H, T, ·)

    def forward(
        self, x: Tensor, inputs: AttentionInputs, memory: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:  # fmt: skip
        assert memory is None, "MLA is self-attention; cross-attention stays multi-head"
        latent = self.w_dkv(x).unsqueeze(1)  # c^KV (B, 1, T, d_c), eq. 9
        c_q = x if self.w_dq is None else self.w_dq(x)  # eq. 12
        q = self._heads(self.w_uq(c_q))  # q^C (B, H, T, d_h), eq. 13
        k_rope = latent[..., :0]  # k^R (B, 1, T, d_h^R): empty without RoPE
        if self.d_rope:
            assert inputs.rope is not None, "rope_head_dim > 0 is read with model.pos=rope"
            cos, sin = inputs.rope  # (B|1, 1, T, d_h^R/2)
            k_rope = apply_rotary(self.w_kr(x).unsqueeze(1), cos, sin)  # eq. 15
            q_rope = apply_rotary(self._heads(self.w_qr(c_q)), cos, sin)  # eq. 14
            q = torch.cat([q, q_rope], dim=-1)  # eq. 16
        past = Past(latent, k_rope) if cache is None else cache.update(latent, k_rope, inputs)
        keys_latent = past.k[:, 0]  # every cached token's c^KV (B, T_k, d_c)
        k_content, v = self._heads(self.w_uk(keys_latent)), self._heads(self.w_uv(keys_latent))
        k = torch.cat([k_content, past.v.expand(-1, self.n_heads, -1, -1)], dim=-1)  # eq. 17
        # eq. 18: the kernel's 1/√(q's width) is 1/√(d_h + d_h^R)
        out = self.kernel(q, Past(k, v), inputs, self.dropout if self.training else 0.0)
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh))  # eq. 19
