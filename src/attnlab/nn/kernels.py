"""Attention kernels: what ``MultiHeadAttention`` computes between its projections.

    Attention(Q, K, V) = softmax(QKᵀ / √d_k + M) V                (Vaswani et al. 2017, eq. 1)

Masks are boolean, ``True`` where a query may attend to a key, broadcastable to
(B, H, T_q, T_k); masked scores become −inf *before* the softmax. Positional
schemes that act inside attention contribute an additive ``bias`` (ALiBi, T5) or a
score term from the layer's own queries and keys (Transformer-XL).

A layer picks its kernel once, when it is built (:func:`choose_kernel`):

=====================  ===========================================================
``ExplicitSoftmax``    ``model.attn_impl=math``: the softmax written out; it can
                       record its weights (attention maps)
``FusedSoftmax``       ``sdpa`` / ``flex`` with full attention:
                       ``F.scaled_dot_product_attention`` (flash / memory-efficient)
``KindKernel``         any other ``model.attention``: the kind's own ``attend``
                       (blocked on a CPU), FlexAttention on CUDA or with
                       ``attn_impl=flex``, its explicit ``reference`` with ``math``
=====================  ===========================================================

``model.attn_softcap`` c bounds the logits before the mask and the softmax (Gemma 2, §2
"logit soft-capping"): ``soft_cap``. SDPA and the blocked kernels have no place for it, so a
capped layer computes its softmax written out, or through FlexAttention's ``score_mod``
(:mod:`attnlab.nn.flex`) where that path is taken.

Every kernel is called as ``kernel(q, past, inputs, dropout_p)``: the queries
(B, H, T_q, d_h), the :class:`Past` it attends over (keys and values with H_kv heads,
as a decoding cache returns them) and the stack's :class:`AttentionInputs`. It also
declares, in ``keeps``, what a decoding cache must keep for it (:class:`Keeps`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.nn import flex


def soft_cap(scores: Tensor, cap: float) -> Tensor:
    """logits ← c · tanh(logits / c): smooth, monotone, bounded in (−c, c) and ≈ the identity
    for |logits| ≪ c (Gemma Team 2024, "Gemma 2", §2 "logit soft-capping": c = 50 for
    attention logits, 30 for the final layer's)."""
    return cap * torch.tanh(scores / cap)


def math_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(QKᵀ/√d_k + bias + M)V computed explicitly; returns (output, weights).

    ``softcap`` c: softmax(c·tanh(QKᵀ/(√d_k·c)) + bias + M)V, the dot-product logits capped
    before the position bias and the mask (Gemma 2, §2).

    A query whose every key is masked (cross-attention over an all-padding source)
    gets zero weights, hence a zero output, as ``F.scaled_dot_product_attention``
    returns, instead of the NaN of a softmax over nothing but −inf.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if softcap is not None:
        scores = soft_cap(scores, softcap)
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
    # that are not padding (B, Tk) over the whole history
    key_real: Tensor | None = None
    # with a static decoding cache: the slots (T,) the new keys and values are written to;
    # the softmax is then written out (compiled, one fused kernel per layer)
    cache_index: Tensor | None = None
    # FlexAttention's BlockMasks by (kind, Tq, Tk, q_offset), built by the first layer that
    # needs one: the layers of one kind share its spec (bigbird's seed too), hence one pattern
    flex_masks: dict[tuple[Any, int, int, int], Any] = field(default_factory=dict)


class Past(NamedTuple):
    """What a kernel attends over: keys and values (B, H_kv, T_k, d_h) and, for linear
    attention continuing a cached sequence, the running sums (S, Z) of the keys before
    them (Katharopoulos et al. 2020, eq. 9–10)."""

    k: Tensor
    v: Tensor
    state: tuple[Tensor, Tensor] | None = None

    def select(self, index: Tensor) -> Past:
        """Batch rows ``index`` of everything held (beam search)."""
        state = None if self.state is None else tuple(t.index_select(0, index) for t in self.state)
        return Past(self.k.index_select(0, index), self.v.index_select(0, index), state)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Keeps:
    """What a decoding cache keeps for a kernel.

    ``window``: only the last ``window`` keys and values (a causal sliding window; None:
    all). ``running_state``: linear attention's (k, v, key_real) → (S, Z), kept as sums in
    place of the keys. ``fixed_slots``: a static cache (every key in preallocated slots,
    the unfilled ones masked) can serve the kernel. ``own_cache``: a mixer that keeps no
    keys (Mamba-2's recurrent state) makes its cache with it and updates it itself.
    """

    window: int | None = None
    running_state: Callable[..., tuple[Tensor, Tensor]] | None = None
    fixed_slots: bool = False
    own_cache: Callable[[], Any] | None = None


class LayerCache(Protocol):
    """One attention layer's decoding cache (implemented in :mod:`attnlab.inference`).

    ``update`` stores the new keys and values — written into buffers, summed into a
    state, or, for cross-attention, the projected encoder output kept once — and returns
    the :class:`Past` the layer's kernel reads; ``past`` is what it holds (None before
    the first update); ``reorder`` keeps batch rows ``index`` (beam search).
    """

    past: Past | None

    def update(self, k: Tensor, v: Tensor, inputs: AttentionInputs) -> Past: ...

    def reorder(self, index: Tensor) -> None: ...


def repeat_kv(k: Tensor, v: Tensor, n_heads: int) -> tuple[Tensor, Tensor]:
    """Each of the H_kv key/value heads repeated for its group of n_heads / H_kv query heads."""
    group = n_heads // k.size(1)
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def fold_groups(q: Tensor, t: Tensor | None, n_kv_heads: int) -> Tensor | None:
    """A mask or bias (B|1, 1|H, T_q, T_k) laid out as the folded queries of
    :func:`grouped_attention`: (B|1, H_kv, g·T_q, T_k)."""
    if t is None:
        return None
    H, Tq = q.size(1), q.size(2)
    return t.expand(t.size(0), H, Tq, t.size(-1)).reshape(t.size(0), n_kv_heads, -1, t.size(-1))


class SoftmaxKernel:
    """Base of the full-attention kernels: softmax(QKᵀ/√d + bias + scores + M)V."""

    keeps = Keeps(fixed_slots=True)
    last_weights: Tensor | None = None  # the recording kernel's

    def __call__(self, q: Tensor, past: Past, inputs: AttentionInputs, dropout_p: float) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def bias(q: Tensor, k: Tensor, inputs: AttentionInputs) -> Tensor | None:
        """The position bias plus the content-dependent score term, if any (repeated K)."""
        if inputs.scores is None:
            return inputs.bias
        term = inputs.scores(q, k)
        return term if inputs.bias is None else inputs.bias + term


class ExplicitSoftmax(SoftmaxKernel):
    """``math_attention``: the softmax written out. ``record``: keep the last weights;
    ``softcap``: cap the logits (``soft_cap``)."""

    def __init__(self, record: bool = False, softcap: float | None = None) -> None:
        self.record, self.softcap = record, softcap

    def __call__(self, q: Tensor, past: Past, inputs: AttentionInputs, dropout_p: float) -> Tensor:
        k, v = repeat_kv(past.k, past.v, q.size(1))
        bias = self.bias(q, k, inputs)
        out, weights = math_attention(
            q, k, v, inputs.mask, bias, dropout_p, inputs.is_causal, self.softcap
        )
        if self.record:
            self.last_weights = weights.detach()
        return out


class FusedSoftmax(SoftmaxKernel):
    """``F.scaled_dot_product_attention``. Grouped-query attention (Ainslie et al. 2023,
    §2.2) reads each K/V head once where it can: the g = H / H_kv query heads that share
    K/V head j are g·T_q query rows of head j, so one call over (B, H_kv, g·T_q, d_h)
    queries computes the products of repeating each K/V head g times. A step over a
    static cache (``inputs.cache_index``) writes the softmax out: compiled, it becomes one
    fused kernel per layer, faster on a CPU than SDPA's for one query over masked slots."""

    def __call__(self, q: Tensor, past: Past, inputs: AttentionInputs, dropout_p: float) -> Tensor:
        explicit = inputs.cache_index is not None
        if self.folds_groups(q, past, inputs):
            return self.grouped(q, past, inputs, dropout_p, explicit)
        k, v = repeat_kv(past.k, past.v, q.size(1))
        bias = self.bias(q, k, inputs)
        if explicit:
            return math_attention(q, k, v, inputs.mask, bias, dropout_p, inputs.is_causal)[0]
        return fused_attention(q, k, v, inputs.mask, bias, dropout_p, inputs.is_causal)

    @staticmethod
    def folds_groups(q: Tensor, past: Past, inputs: AttentionInputs) -> bool:
        """Grouped queries, no causal flag and no score hook, and either one query row (a
        decoding step) or neither mask nor bias (nothing to repeat per head)."""
        if past.k.size(1) == q.size(1) or inputs.is_causal or inputs.scores is not None:
            return False
        extra = [t for t in (inputs.mask, inputs.bias) if t is not None]
        return all(t.dim() == 4 for t in extra) and (q.size(2) == 1 or not extra)

    @staticmethod
    def grouped(
        q: Tensor, past: Past, inputs: AttentionInputs, dropout_p: float, explicit: bool
    ) -> Tensor:
        B, H, Tq, Dh = q.shape
        Hkv = past.k.size(1)
        folded = q.reshape(B, Hkv, (H // Hkv) * Tq, Dh)
        mask, bias = fold_groups(q, inputs.mask, Hkv), fold_groups(q, inputs.bias, Hkv)
        if explicit:
            out = math_attention(folded, past.k, past.v, mask, bias, dropout_p)[0]
        else:
            out = fused_attention(folded, past.k, past.v, mask, bias, dropout_p)
        return out.view(B, H, Tq, Dh)


class KindKernel:
    """Self-attention through a ``model.attention`` kind (:mod:`attnlab.nn.attention_kinds`).

    The queries follow the keys (q_offset = T_k − T_q: a cached decoding step sees the
    history); ``inputs.key_real`` covers the whole history. ``impl=math`` takes the kind's
    explicit reference; the sparse kinds go through FlexAttention on CUDA or with
    ``attn_impl=flex`` (:mod:`attnlab.nn.flex`), through their blocked kernels otherwise.
    Linear attention continuing a cache reads the running sums of ``past.state``.
    ``softcap``: capped logits, through FlexAttention's ``score_mod`` where that path is
    taken and written out (``capped``) where the reference or a blocked kernel would be.
    """

    def __init__(self, kind: Any, impl: str, softcap: float | None = None) -> None:
        self.kind, self.impl, self.softcap = kind, impl, softcap
        self.keeps: Keeps = kind.keeps()
        self.last_weights: Tensor | None = None  # a kind records no weights

    def __call__(self, q: Tensor, past: Past, inputs: AttentionInputs, dropout_p: float) -> Tensor:
        kind, T = self.kind, q.size(2)
        k, v = repeat_kv(past.k, past.v, q.size(1))
        real = inputs.key_real
        # a kind that rotates inside its formula takes the rotation of the new positions
        rope = {"rope": inputs.rope} if kind.rotates_features else {}
        if past.state is not None:  # linear attention after a cached prefix: the new keys only
            group = q.size(1) // past.k.size(1)  # the sums, like K and V, per K/V head
            state = tuple(t.repeat_interleave(group, dim=1) for t in past.state)
            return kind.attend_after(q, k, v, None if real is None else real[:, -T:], state, **rope)
        q_offset = k.size(2) - T  # the keys end with the queries' own
        if rope and inputs.rope is not None and q_offset:
            raise ValueError("a kind that rotates its features attends over the new keys only")
        if real is not None:
            real = real[:, -k.size(2) :]
        if self.impl == "math" and self.softcap is None:
            return kind.reference(q, k, v, real, q_offset, **rope)
        if flex.uses_flex(kind, self.impl, q, dropout_p, decoding=q_offset > 0):
            key = (type(kind), T, k.size(2), q_offset)  # a hybrid's kinds: a mask each
            if key not in inputs.flex_masks:
                inputs.flex_masks[key] = flex.block_mask(kind, *key[1:], real, q.device)
            mask = inputs.flex_masks[key]
            return flex.flex_attend(kind, q, k, v, real, q_offset, mask, self.softcap)
        if self.softcap is not None:
            return self.capped(q, k, v, real, q_offset, dropout_p)
        return kind.attend(q, k, v, real, q_offset, dropout_p, **rope)

    def capped(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None, q_offset: int,
        dropout_p: float,
    ) -> Tensor:  # fmt: skip
        """softmax(c·tanh(QKᵀ/(√d·c)) + M)V, M = the kind's pattern and padding, written out."""
        visible = self.kind.visibility(q.size(2), k.size(2), q_offset, key_real, q.device).dense()
        return math_attention(q, k, v, visible, dropout_p=dropout_p, softcap=self.softcap)[0]


Kernel = SoftmaxKernel | KindKernel


def choose_kernel(impl: str, kind: Any = None, softcap: float | None = None) -> Kernel:
    """The kernel of one attention layer: ``kind`` (an attention kind, None for full
    attention) computed the way ``model.attn_impl`` says; capped logits (``softcap``) take
    the written-out softmax for full attention, which SDPA cannot cap."""
    if kind is not None:
        return KindKernel(kind, impl, softcap)
    if impl == "math" or softcap is not None:
        return ExplicitSoftmax(softcap=softcap)
    return FusedSoftmax()
