"""Multi-head attention (Vaswani et al. 2017, §3.2.2): projections around a kernel.

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W_O,
        head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i)

The kernel — Attention(·) itself, eq. 1 — is chosen once per layer
(:mod:`attnlab.nn.kernels`); a decoding cache is anything that answers
:class:`~attnlab.nn.kernels.LayerCache` (:mod:`attnlab.inference.caches`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model_config import ATTN_IMPLS
from attnlab.nn.kernels import (
    AttentionInputs,
    ExplicitSoftmax,
    Kernel,
    LayerCache,
    Past,
    choose_kernel,
    fused_attention,
    math_attention,
)
from attnlab.nn.normalization import make_norm
from attnlab.nn.positions import apply_rotary

__all__ = [
    "ATTN_IMPLS",
    "AttentionInputs",
    "MultiHeadAttention",
    "apply_rotary",
    "fused_attention",
    "math_attention",
]

class ProjectionRows:
    """W_Q, W_K or W_V as rows of the stacked input projection (views, no copies)."""

    def __init__(self, stacked: nn.Linear, rows: slice) -> None:
        self.stacked, self.rows = stacked, rows

    @property
    def weight(self) -> Tensor:
        return self.stacked.weight[self.rows]

    @property
    def bias(self) -> Tensor | None:
        return None if self.stacked.bias is None else self.stacked.bias[self.rows]


class KernelSwitch:
    """What an attention module with a ``kernel`` (and ``_chosen``, the one its
    ``attn_impl`` picked) shows outside: whether it records weights (the explicit kernel runs
    in the chosen one's place while set), the last recorded ones, and what a decoding cache
    keeps for it (:class:`~attnlab.nn.kernels.Keeps`)."""

    kernel: Kernel
    _chosen: Kernel

    @property
    def record_weights(self) -> bool:
        return self.kernel is not self._chosen

    @property
    def last_weights(self) -> Tensor | None:
        return self.kernel.last_weights

    @last_weights.setter
    def last_weights(self, weights: Tensor | None) -> None:
        self.kernel.last_weights = weights

    @property
    def keeps(self) -> Any:
        """What a decoding cache keeps for this layer (:class:`~attnlab.nn.kernels.Keeps`)."""
        return self.kernel.keeps


class MultiHeadAttention(KernelSwitch, nn.Module):
    """Multi-head attention with projections W_Q, W_K, W_V and output projection W_O.

    Self-attention when ``memory`` is None; cross-attention otherwise, with
    K and V projected from the encoder output (§3.2.3). ``cache`` (a
    :class:`~attnlab.nn.kernels.LayerCache`) holds what decoding keeps of earlier steps —
    keys and values, a window of them, linear attention's running sums — and, for
    cross-attention, the projected encoder K/V so they are computed once per sequence.

    W_Q, W_K and W_V are stored stacked in one matrix, as in GPT-2 and
    ``nn.MultiheadAttention``, so self-attention projects with one matrix product;
    ``q_proj``, ``k_proj``, ``v_proj`` give each as a view.

    ``n_kv_heads`` < ``n_heads`` shares each key/value head among a group of
    n_heads / n_kv_heads query heads: grouped-query attention (Ainslie et al. 2023),
    multi-query attention at 1 (Shazeer 2019). W_K and W_V then have
    n_kv_heads · d_head rows, and the decoding cache keeps only those heads.
    ``qk_norm`` normalises every head's queries and keys (over d_head, with
    ``norm_type``) before the scores, so the logits cannot grow without bound
    (Dehghani et al. 2023, §3.1.1; OLMo 2).
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout: float = 0.0, impl: str = "sdpa",
        n_kv_heads: int | None = None, qk_norm: bool = False, norm_type: str = "layernorm",
        kind: Any = None, softcap: float | None = None,
    ) -> None:  # fmt: skip
        """``kind``: a :mod:`attnlab.nn.attention_kinds` kind for self-attention (None:
        full attention); with ``impl`` it chooses the kernel (:func:`choose_kernel`).
        ``softcap``: ``model.attn_softcap``, logits ← c·tanh(logits/c) (Gemma 2, §2)."""
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        assert n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        self.d_kv = self.n_kv_heads * self.d_head
        self.impl, self.kind = impl, kind  # the kind is a submodule (linformer's E, F)
        self.in_proj = nn.Linear(d_model, d_model + 2 * self.d_kv)  # [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model)  # W_O
        self.dropout = dropout
        self.q_norm = make_norm(norm_type, self.d_head) if qk_norm else None
        self.k_norm = make_norm(norm_type, self.d_head) if qk_norm else None
        # linear attention rotates its features, not q and k (RoFormer §3.4.3)
        self.rotates_inside = bool(getattr(kind, "rotates_features", False))
        self.softcap = softcap
        self.kernel: Kernel = choose_kernel(impl, kind, softcap)
        self._chosen = self.kernel
        # queries × this before the kernel's 1/√d_head: μP's 1/d_head logits
        # (attnlab.models.parametrization); 1 under SP
        self.query_scale = 1.0

    @KernelSwitch.record_weights.setter
    def record_weights(self, on: bool) -> None:
        """Keep the last forward's weights in ``last_weights`` (full attention only: it runs
        the explicit kernel while set; the kinds record nothing)."""
        recording = on and self.kind is None
        self.kernel = ExplicitSoftmax(True, self.softcap) if recording else self._chosen

    @property
    def split_sizes(self) -> tuple[int, int, int]:
        """Rows of W_Q, W_K, W_V in the stacked projection."""
        return self.d_model, self.d_kv, self.d_kv

    @property
    def q_proj(self) -> ProjectionRows:
        return ProjectionRows(self.in_proj, slice(0, self.d_model))

    @property
    def k_proj(self) -> ProjectionRows:
        return ProjectionRows(self.in_proj, slice(self.d_model, self.d_model + self.d_kv))

    @property
    def v_proj(self) -> ProjectionRows:
        return ProjectionRows(self.in_proj, slice(self.d_model + self.d_kv, None))

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object) -> None:
        # checkpoints written before W_Q, W_K, W_V were stacked
        if f"{prefix}q_proj.weight" in state_dict:
            for kind in ("weight", "bias"):
                if f"{prefix}q_proj.{kind}" not in state_dict:
                    continue  # model.bias=false
                parts = [state_dict.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
                state_dict[f"{prefix}in_proj.{kind}"] = torch.cat(parts)
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def _heads(self, x: Tensor) -> Tensor:
        B, T, width = x.shape
        return x.view(B, T, width // self.d_head, self.d_head).transpose(1, 2)  # (B, H, T, d_h)

    def _normed(self, t: Tensor, norm: nn.Module | None, dtype: torch.dtype) -> Tensor:
        # CUDA autocast runs the norms in fp32: back to the values' dtype
        return t if norm is None else norm(t).to(dtype)

    def forward(
        self,
        x: Tensor,
        inputs: AttentionInputs,
        memory: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        d, weight, bias = self.d_model, self.in_proj.weight, self.in_proj.bias
        q_bias, kv_bias = (None, None) if bias is None else (bias[:d], bias[d:])
        if memory is None:  # self-attention: Q, K, V in one matrix product
            q, k, v = (self._heads(t) for t in self.in_proj(x).split(self.split_sizes, dim=-1))
            q, k = self._normed(q, self.q_norm, v.dtype), self._normed(k, self.k_norm, v.dtype)
            if inputs.rope is not None and not self.rotates_inside:
                q, k = apply_rotary(q, *inputs.rope), apply_rotary(k, *inputs.rope)
            past = Past(k, v) if cache is None else cache.update(k, v, inputs)
        else:  # cross-attention: K, V from the encoder output, once per sequence
            q = self._normed(self._heads(F.linear(x, weight[:d], q_bias)), self.q_norm, x.dtype)
            past = cache.past if cache is not None else None
            if past is None:
                kv = F.linear(memory, weight[d:], kv_bias).split(self.d_kv, dim=-1)
                k, v = (self._heads(t) for t in kv)
                k = self._normed(k, self.k_norm, v.dtype)
                past = Past(k, v) if cache is None else cache.update(k, v, inputs)
        if self.query_scale != 1.0:
            q = q * self.query_scale
        out = self.kernel(q, past, inputs, self.dropout if self.training else 0.0)
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh))

