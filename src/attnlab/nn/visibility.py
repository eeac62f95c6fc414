"""Which keys each query may see: the rules of one attention call, described once.

Query i may see key j (``i``, ``j``: their indices in the sequence) when every rule holds:

* **causal**: j ≤ i; with a prefix (a prefix LM, Raffel et al. 2020, §3.2.1) also every
  j < prefix_len of the query's row;
* **documents**: j is in i's document (document masking, Dubey et al. 2024, §3.2);
* **pattern**: the attention kind's own rule on (i, j) — a window, global tokens, random
  blocks (:mod:`attnlab.nn.attention_kinds`);
* **padding**: key j is real (``key_real``).

``sees_itself``: with padding, a query also sees its own key whatever the rest says, so no
softmax row is empty (full attention's dense paths; a kind gives such a row a zero output).

A stack and its decoding caches say where the queries and keys are (their indices, which
keys are real: a static cache's slots, a dynamic cache's history); this class holds the
rules and lowers them, here and nowhere else, to what a kernel takes: SDPA's ``is_causal``
(the fused causal kernel, no mask), a dense boolean mask (B|1, 1, T_q, T_k), or
FlexAttention's ``mask_mod`` (:mod:`attnlab.nn.flex`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Rule = Callable[[Tensor, Tensor], Tensor]  # (query indices, key indices) → bool, elementwise


@dataclass
class Visibility:
    """The rules of one attention call (module docstring). ``q_index`` (T_q,) and ``k_index``
    (T_k,): the queries' and keys' indices; ``fresh``: the queries are the keys, a sequence
    read from its start (no cached history); ``documents`` (B, T): each position's document,
    for a fresh sequence."""

    q_index: Tensor
    k_index: Tensor
    causal: bool = False
    prefix_len: Tensor | None = None  # (B,)
    documents: Tensor | None = None  # (B, T)
    key_real: Tensor | None = None  # (B, T_k)
    pattern: Rule | None = None
    sees_itself: bool = False
    fresh: bool = False

    @classmethod
    def real_keys(cls, key_real: Tensor | None) -> Visibility:
        """Every query sees every real key (cross-attention over a padded memory)."""
        no_index = torch.zeros(0, dtype=torch.long)  # read only by causal and pattern rules
        return cls(no_index, no_index, key_real=key_real)

    @property
    def plain_causal(self) -> bool:
        """Causality alone over a fresh sequence: SDPA's ``is_causal``, no mask built."""
        others = (self.prefix_len, self.documents, self.key_real, self.pattern)
        return self.causal and self.fresh and all(rule is None for rule in others)

    def dense(self) -> Tensor | None:
        """(B|1, 1, T_q, T_k) bool, True where a query may see a key; None: every key."""
        i, j = self.q_index.view(-1, 1), self.k_index.view(1, -1)  # (T_q, 1), (1, T_k)
        mask: Tensor | None = None
        if self.causal:
            mask = (j <= i).unsqueeze(0)  # (1, T_q, T_k)
            if self.prefix_len is not None:
                mask = mask | (j.unsqueeze(0) < self.prefix_len.view(-1, 1, 1))
        if self.pattern is not None:
            own = self.pattern(i, j).expand(i.size(0), j.size(1)).unsqueeze(0)
            mask = own if mask is None else mask & own
        if self.documents is not None:
            same = self.documents.unsqueeze(2) == self.documents.unsqueeze(1)  # (B, T, T)
            mask = same if mask is None else mask & same
        if self.key_real is not None:
            real = self.key_real.unsqueeze(1)  # (B, 1, T_k)
            mask = real if mask is None else mask & real
            if self.sees_itself:
                mask = mask | (j == i).unsqueeze(0)
        return None if mask is None else mask.unsqueeze(1)

    def mask_mod(self) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
        """The rules as FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)`` (the tile-level
        evaluation of :func:`torch.nn.attention.flex_attention.create_block_mask`)."""
        q_index, k_index = self.q_index, self.k_index

        def allowed(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            i, j = q_index[q_idx], k_index[kv_idx]
            seen = j == j  # every key, as a tensor of the right shape
            if self.causal:
                seen = j <= i
                if self.prefix_len is not None:
                    seen = seen | (j < self.prefix_len[b])
            if self.pattern is not None:
                seen = seen & self.pattern(i, j)
            if self.documents is not None:
                seen = seen & (self.documents[b, q_idx] == self.documents[b, kv_idx])
            if self.key_real is not None:
                seen = seen & self.key_real[b, kv_idx]
                if self.sees_itself:
                    seen = seen | (j == i)
            return seen

        return allowed
