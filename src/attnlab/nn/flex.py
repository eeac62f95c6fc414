"""The sparse attention kinds through FlexAttention (``torch.nn.attention.flex_attention``).

A kind's ``pattern()`` — which key j an absolute query position i may see — becomes
FlexAttention's ``mask_mod``; ``create_block_mask`` evaluates it once per (128 × 128)
tile and keeps only the tiles with a visible key, so the compiled kernel skips the others
and never materialises (T_q, T_k) (Dong et al. 2024, "Flex Attention", §3). Padding
(``key_real``) joins the pattern as a lookup per batch row.

Where it runs: ``model.attn_impl=sdpa`` (the default) sends the sparse kinds
(sliding_window, longformer, bigbird) here on CUDA when no attention dropout is
asked for and at least ``MIN_QUERIES`` queries come at once (a decoding step takes the
blocked kernel, whose per-step cost is smaller than a new block mask's).
``model.attn_impl=flex`` sends every softmax kind here on any device, but for decoding steps
of fewer than ``MIN_QUERIES`` queries (the blocked kernel, as above): on CPU torch 2.13
computes FlexAttention's forward pass only (no backward), which is how the tests check
it against the explicit reference. FlexAttention has no dropout; with ``attn_dropout``
> 0 the blocked kernels are used.

``model.attn_softcap`` joins as FlexAttention's ``score_mod`` (``soft_cap_mod``), which
rewrites each score QKᵀ/√d before the mask, in the fused kernel (Gemma 2, §2).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from attnlab.errors import ConfigError

# a kind (attnlab.nn.attention_kinds) is read through its pattern(), sparse and spec only
AttentionKind = Any

MIN_QUERIES = 128  # fewer queries at once (decoding): the blocked kernel
CPU_BACKWARD = (
    "model.attn_impl=flex has no backward pass on CPU (torch's FlexAttention computes "
    "only the forward there); train with model.attn_impl=sdpa (the blocked kernels) on "
    "CPU, or on a CUDA device"
)


@functools.cache
def available() -> bool:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:  # torch < 2.5
        return False
    return True


@functools.cache
def _kernel(device_type: str) -> Any:
    """flex_attention, compiled on CUDA (the fused kernel); eager elsewhere (CPU inference).

    Static shapes at first, dynamic from the first new (B, T) on (``dynamic=None``), so
    bucketed batches do not each compile again until Dynamo's recompile limit sends
    every call to the eager, unfused flex_attention."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention) if device_type == "cuda" else flex_attention


def uses_flex(
    kind: AttentionKind, impl: str, q: Tensor, dropout_p: float, decoding: bool = False
) -> bool:
    """Whether ``MultiHeadAttention`` computes this kind through FlexAttention.

    ``decoding``: the queries follow cached keys; fewer than ``MIN_QUERIES`` of them take
    the blocked kernel with either impl (a new block mask per step costs more)."""
    if kind.pattern is None or not available():
        return False
    if impl == "flex":  # FlexAttention has no dropout: attention dropout takes the blocked kernel
        return dropout_p == 0.0 and (not decoding or q.size(2) >= MIN_QUERIES)
    # full attention (not sparse) keeps SDPA's flash kernel
    enough = q.size(2) >= MIN_QUERIES
    return impl == "sdpa" and kind.sparse and q.is_cuda and dropout_p == 0.0 and enough


def block_mask(
    kind: AttentionKind, Tq: int, Tk: int, q_offset: int, key_real: Tensor | None,
    device: torch.device,
) -> Any:  # fmt: skip
    """FlexAttention's BlockMask of ``kind``'s rules (its ``pattern()`` and the padding,
    :meth:`~attnlab.nn.attention_kinds.AttentionKind.visibility`)."""
    from torch.nn.attention.flex_attention import create_block_mask

    assert kind.pattern is not None
    rules = kind.visibility(Tq, Tk, q_offset, key_real, device)
    batch = None if key_real is None else key_real.size(0)
    return create_block_mask(rules.mask_mod(), batch, None, Tq, Tk, device=device)


def soft_cap_mod(cap: float) -> Any:
    """FlexAttention's ``score_mod`` of ``model.attn_softcap``: score ← c·tanh(score/c), the
    score being QKᵀ/√d of one (batch, head, query, key) (Gemma 2, §2 "logit soft-capping")."""

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return cap * torch.tanh(score / cap)

    return score_mod


def flex_attend(
    kind: AttentionKind, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
    q_offset: int = 0, mask: Any = None, softcap: float | None = None,
) -> Tensor:  # fmt: skip
    """softmax(QKᵀ/√d + M)V with M = ``kind.pattern()`` and padding, (B, H, T_q, d);
    ``softcap``: the scores capped first (``soft_cap_mod``).

    A query that sees no key gets a zero output, as in the other paths. ``mask``: the
    BlockMask of ``block_mask()`` when the caller shares one among layers (built here
    otherwise).
    """
    if q.device.type != "cuda" and torch.is_grad_enabled() and q.requires_grad:
        raise ConfigError(CPU_BACKWARD)
    if mask is None:
        mask = block_mask(kind, q.size(2), k.size(2), q_offset, key_real, q.device)
    capped = {} if softcap is None else {"score_mod": soft_cap_mod(softcap)}  # uncapped: as ever
    out = _kernel(q.device.type)(q, k, v, block_mask=mask, **capped)
    return out.to(q.dtype)
