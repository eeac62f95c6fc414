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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ATTN_IMPLS = ("sdpa", "math", "flex")  # flex: the sparse kinds through FlexAttention


def math_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """softmax(QKᵀ/√d_k + bias + M)V computed explicitly; returns (output, weights).

    A query whose every key is masked (cross-attention over an all-padding source)
    gets zero weights, hence a zero output, as ``F.scaled_dot_product_attention``
    returns, instead of the NaN of a softmax over nothing but −inf.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if is_causal:
        Tq, Tk = scores.shape[-2:]
        mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(Tk - Tq)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        no_key = ~mask.any(dim=-1, keepdim=True)  # (…, Tq, 1)
        # score 0 there keeps the softmax (and its gradient) finite; zeroed below
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(no_key, 0.0)
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(no_key, 0.0)
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
    # a score term from the layer's own q and k (Transformer-XL): (q, k) -> (B, H, Tq, Tk)
    scores: Callable[[Tensor, Tensor], Tensor] | None = None
    # for model.attention kinds other than full, which build their own pattern: the keys
    # that are not padding (B, Tk) over the whole history, and the first query's key index
    key_real: Tensor | None = None
    q_offset: int = 0
    # with a static decoding cache: the slots (T,) the new keys and values are written to
    cache_index: Tensor | None = None
    # FlexAttention's BlockMasks by (Tq, Tk, q_offset), built by the first layer that needs
    # one: the layers of a stack share one kind spec (bigbird's seed too), hence one pattern
    flex_masks: dict[tuple[int, int, int], Any] = field(default_factory=dict)


class ProjectionRows:
    """W_Q, W_K or W_V as rows of the stacked input projection (views, no copies)."""

    def __init__(self, stacked: nn.Linear, rows: slice) -> None:
        self.stacked, self.rows = stacked, rows

    @property
    def weight(self) -> Tensor:
        return self.stacked.weight[self.rows]

    @property
    def bias(self) -> Tensor:
        return self.stacked.bias[self.rows]


def append_to_cache(cache: dict[str, Tensor], k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Keys/values of every step so far, ``k``/``v`` (B, H, T_new, d_head) appended.

    The cache keeps them in buffers with room to spare, doubled when full, so one
    decoding step writes its new keys in place instead of copying the whole history
    (``torch.cat`` per step made decoding quadratic in memory traffic).
    ``cache["k"]``/``cache["v"]`` are views of the filled part.
    """
    if "k" not in cache:  # the prompt: no buffer until the first appended step
        cache["k"], cache["v"] = k, v
        return k, v
    n, t = cache["k"].size(2), k.size(2)
    for name, new in (("k", k), ("v", v)):
        buffer = cache.get(f"{name}_buffer")
        if buffer is None or buffer.size(2) < n + t:  # DecodingCache.reorder keeps rows in step
            B, H, _, D = new.shape
            grown = new.new_empty(B, H, max(2 * (n + t), 64), D)
            grown[:, :, :n] = cache[name]
            cache[f"{name}_buffer"] = buffer = grown
        buffer[:, :, n : n + t] = new
        cache[name] = buffer[:, :, : n + t]
    return cache["k"], cache["v"]


class StaticLayerCache(dict):
    """One layer's keys and values in buffers allocated once, (B, H_kv, capacity, d_head)
    (gpt-fast's static cache): a decoding step writes its keys into the slots
    ``AttentionInputs.cache_index`` and attends over every slot, the unfilled ones masked,
    so every step has the same shapes (one compiled graph, CUDA-graph replay). As a dict
    it also holds the projected encoder keys/values of cross-attention."""

    def __init__(self, k: Tensor, v: Tensor) -> None:
        super().__init__()
        self.k_buffer, self.v_buffer = k, v

    def write(self, index: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k_buffer[:, :, index] = k
        self.v_buffer[:, :, index] = v
        return self.k_buffer, self.v_buffer

    def reorder(self, index: Tensor) -> None:
        """Select batch rows in place (the buffers keep their addresses)."""
        for buffer in (self.k_buffer, self.v_buffer):
            buffer.copy_(buffer.index_select(0, index))
        for name, tensor in self.items():
            self[name] = tensor.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections W_Q, W_K, W_V and output projection W_O.

    Self-attention when ``memory`` is None; cross-attention otherwise, with
    K and V projected from the encoder output (§3.2.3). ``cache`` (a dict per
    layer) holds keys/values of earlier steps for incremental decoding, and the
    projected encoder K/V so they are computed once per sequence.

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
        kind: Any = None,
    ) -> None:  # fmt: skip
        """``kind``: a :mod:`attnlab.nn.attention_kinds` kernel for self-attention (None:
        full attention through the fused or the explicit path)."""
        super().__init__()
        self.kind = kind
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        assert n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        self.d_kv = self.n_kv_heads * self.d_head
        self.impl = impl
        self.in_proj = nn.Linear(d_model, d_model + 2 * self.d_kv)  # [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(d_model, d_model)  # W_O
        self.dropout = dropout
        self.q_norm = self.k_norm = None
        if qk_norm:
            from attnlab.nn.norms import make_norm

            self.q_norm, self.k_norm = (
                make_norm(norm_type, self.d_head),
                make_norm(norm_type, self.d_head),
            )
        self.last_weights: Tensor | None = None  # filled when record_weights is set
        self.record_weights = False

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
                parts = [state_dict.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
                state_dict[f"{prefix}in_proj.{kind}"] = torch.cat(parts)
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]

    def _heads(self, x: Tensor) -> Tensor:
        B, T, width = x.shape
        return x.view(B, T, width // self.d_head, self.d_head).transpose(1, 2)  # (B, H, T, d_h)

    def forward(
        self,
        x: Tensor,
        inputs: AttentionInputs,
        memory: Tensor | None = None,
        cache: dict[str, Tensor] | None = None,
    ) -> Tensor:
        d, weight, bias = self.d_model, self.in_proj.weight, self.in_proj.bias
        if memory is None:  # self-attention: Q, K, V in one matrix product
            q, k, v = (self._heads(t) for t in self.in_proj(x).split(self.split_sizes, dim=-1))
            if self.q_norm is not None:  # CUDA autocast runs the norms in fp32: back to v's
                q, k = self.q_norm(q).to(v.dtype), self.k_norm(k).to(v.dtype)  # type: ignore[misc]
            if inputs.rope is not None:
                q, k = apply_rotary(q, *inputs.rope), apply_rotary(k, *inputs.rope)
            if self.kind is not None:
                return self._output(self._attend_kind(q, k, v, inputs, cache))
            if isinstance(cache, StaticLayerCache):
                k, v = cache.write(inputs.cache_index, k, v)  # type: ignore[arg-type]
            elif cache is not None:
                k, v = append_to_cache(cache, k, v)
        else:  # cross-attention: K, V from the encoder output
            q = self._heads(F.linear(x, weight[:d], bias[:d]))
            if self.q_norm is not None:
                q = self.q_norm(q).to(q.dtype)
            if cache is not None and "cross_k" in cache:
                k, v = cache["cross_k"], cache["cross_v"]
            else:
                kv = F.linear(memory, weight[d:], bias[d:]).split(self.d_kv, dim=-1)
                k, v = (self._heads(t) for t in kv)
                if self.k_norm is not None:
                    k = self.k_norm(k).to(v.dtype)
                if cache is not None:
                    cache["cross_k"], cache["cross_v"] = k, v
        dropout_p = self.dropout if self.training else 0.0
        bias = inputs.bias
        # a static-cache step writes the softmax out: compiled, it becomes one fused kernel
        # per layer, faster on a CPU than SDPA's kernel for one query over masked slots
        explicit = inputs.cache_index is not None
        if self._folds_groups(q, inputs, memory):
            out = self._grouped_attention(q, k, v, inputs.mask, bias, dropout_p, explicit)
            return self._output(out)
        k, v = self._repeat_kv(k, v)  # each K/V head serves a group of query heads
        if inputs.scores is not None and memory is None:
            term = inputs.scores(q, k)
            bias = term if bias is None else bias + term
        if self.impl == "math" or self.record_weights or explicit:
            out, weights = math_attention(q, k, v, inputs.mask, bias, dropout_p, inputs.is_causal)
            if self.record_weights:
                self.last_weights = weights.detach()
        else:
            out = fused_attention(q, k, v, inputs.mask, bias, dropout_p, inputs.is_causal)
        return self._output(out)

    def _output(self, out: Tensor) -> Tensor:
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh))

    def _folds_groups(self, q: Tensor, inputs: AttentionInputs, memory: Tensor | None) -> bool:
        """Whether grouped-query attention can skip copying K and V (``_grouped_attention``):
        the fused path, no causal flag and no score hook, and either one query row (a
        decoding step) or neither mask nor bias (nothing to repeat per head)."""
        if self.n_kv_heads == self.n_heads or self.impl == "math" or self.record_weights:
            return False
        if inputs.is_causal or (inputs.scores is not None and memory is None):
            return False
        extra = [t for t in (inputs.mask, inputs.bias) if t is not None]
        return all(t.dim() == 4 for t in extra) and (q.size(2) == 1 or not extra)

    def _grouped_attention(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None,
        dropout_p: float, explicit: bool = False,
    ) -> Tensor:  # fmt: skip
        """Grouped-query attention without repeating K and V (Ainslie et al. 2023, §2.2):
        the g = H / H_kv query heads that share K/V head j are g·T_q query rows of head j,
        so one SDPA call over (B, H_kv, g·T_q, d_h) queries computes the same products as
        repeating each K/V head g times, while reading the cache once per K/V head. The
        mask and bias, (B|1, 1|H, T_q, T_k), are laid out the same way."""
        B, H, Tq, Dh = q.shape
        Hkv = self.n_kv_heads

        def fold(t: Tensor | None) -> Tensor | None:
            if t is None:
                return None
            return t.expand(t.size(0), H, Tq, t.size(-1)).reshape(t.size(0), Hkv, -1, t.size(-1))

        q = q.reshape(B, Hkv, (H // Hkv) * Tq, Dh)
        if explicit:
            out = math_attention(q, k, v, fold(mask), fold(bias), dropout_p)[0]
        else:
            out = fused_attention(q, k, v, fold(mask), fold(bias), dropout_p)
        return out.view(B, H, Tq, Dh)

    def _repeat_kv(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.n_kv_heads == self.n_heads:
            return k, v
        group = self.n_heads // self.n_kv_heads
        return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

    def _attend_kind(
        self, q: Tensor, k: Tensor, v: Tensor, inputs: AttentionInputs,
        cache: dict[str, Tensor] | None,
    ) -> Tensor:  # fmt: skip
        """Self-attention through ``self.kind``; with a cache, what the kind needs of the past:
        (S, Z) for linear attention, the last ``window`` keys for a causal sliding window,
        every key otherwise. ``attn_impl=math`` takes the kind's explicit reference; the
        sparse kinds go through FlexAttention on CUDA or with ``attn_impl=flex``
        (:mod:`attnlab.nn.flex`), through their blocked kernels otherwise."""
        kind, real = self.kind, inputs.key_real
        dropout_p = self.dropout if self.training else 0.0
        T = q.size(2)
        if cache is not None and hasattr(kind, "linear_state"):  # only (S, Z) are kept
            new_real = None if real is None else real[:, -T:]
            k, v = self._repeat_kv(k, v)
            S, Z = kind.linear_state(k, v, new_real)
            if "S" in cache:  # one more token: add its state, attend with the sums
                cache["S"], cache["Z"] = cache["S"] + S, cache["Z"] + Z
                return kind.attend_with_state(q, cache["S"], cache["Z"])
            cache["S"], cache["Z"] = S, Z  # the prompt: its causal outputs, then its state
            return kind.attend(q, k, v, new_real, 0)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            window = kind.cache_window
            cache["k"], cache["v"] = (k[:, :, -window:], v[:, :, -window:]) if window else (k, v)
        q_offset = k.size(2) - T  # the keys end with the queries' own
        if real is not None:
            real = real[:, -k.size(2) :]
        k, v = self._repeat_kv(k, v)
        if self.impl == "math":
            from attnlab.nn.attention_kinds import reference_attention

            return reference_attention(kind, q, k, v, real, q_offset)
        from attnlab.nn import flex

        if flex.uses_flex(kind, self.impl, q, dropout_p, decoding=q_offset > 0):
            key = (T, k.size(2), q_offset)
            if key not in inputs.flex_masks:
                inputs.flex_masks[key] = flex.block_mask(kind, *key, real, q.device)
            return flex.flex_attend(kind, q, k, v, real, q_offset, inputs.flex_masks[key])
        return kind.attend(q, k, v, real, q_offset, dropout_p)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x_2i, x_2i+1) by position·θ_i (RoFormer, Su et al. 2021, eq. 34)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)
