"""Which keys each query attends to, and how it is computed (``model.attention``).

Every kind replaces the kernel softmax(QKᵀ/√d)V of §3.2 (Vaswani et al. 2017); the
projections around it stay in ``MultiHeadAttention``.

* ``full``            softmax(QKᵀ/√d + M)V, M causal or none.
* ``sliding_window``  query i sees keys |i − j| < w, or i − w < j ≤ i if causal
                      (Beltagy et al. 2020, §3.1; Mistral's SWA).
* ``longformer``      the window plus ``n_global`` global tokens that attend and are
                      attended everywhere (Beltagy et al. 2020, §3.1 "global attention").
* ``bigbird``         blocks: 3 window blocks + 1 global block + r random blocks per
                      query block (Zaheer et al. 2020, §2, Fig. 1).
* ``linformer``       softmax(Q (E K)ᵀ/√d) F V, E, F ∈ R^{k×n} learned (Wang et al. 2020, eq. 7).
* ``linear``          φ(Q)(φ(K)ᵀV) / φ(Q)(φ(K)ᵀ1), φ = elu + 1 (Katharopoulos et al. 2020, eq. 6).
* ``sigmoid``         σ(QKᵀ/√d − log n)V, no softmax (Ramapuram et al. 2025;
                      :mod:`attnlab.nn.sigmoid_attention`).
* ``differential``    (softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))V over pairs of heads (Ye et al.
                      2025, §2.1; :mod:`attnlab.nn.differential_attention`).

Shapes: q (B, H, T_q, d), k and v (B, H, T_k, d) with heads already repeated for GQA.
Positions: queries are q_offset … q_offset + T_q − 1, keys 0 … T_k − 1, so one cached
decoding step is ``attend(q_t, K_≤t, V_≤t, q_offset=t)``. Masks are boolean, ``True``
where a query may attend; ``key_real`` (B, T_k) marks the keys that are not padding.
A query with no visible key gets a zero output, as in ``math_attention``.

Each kind has an efficient ``attend`` and an explicit ``reference`` to test it against:
the sparse kinds compute softmax with the (T_q, T_k) ``mask()``, linformer and linear
their own formula densely. Sparse paths never build (T_q, T_k): queries go in blocks
of ``block``, each against only the keys it may see.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.components.attention import LinformerConfig
from attnlab.errors import ConfigError
from attnlab.nn.kernels import Keeps, math_attention
from attnlab.nn.positions import apply_rotary
from attnlab.nn.visibility import Visibility
from attnlab.registry import Registry

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig


class AttentionKind(nn.Module):
    """Base of every kind: the interface, and the softmax-with-``mask()`` reference.

    ``causal_ok``: the kind can be causal. ``cache_window``: a decoding cache needs only
    the last ``cache_window`` keys (None: all of them). ``has_params``: the kind owns
    learned parameters (it is an ``nn.Module`` for that reason). ``sparse``: a pattern
    that skips keys (full attention is not: it keeps SDPA's flash kernel on CUDA).
    ``rotates_features``: with ``model.pos=rope`` the kind rotates inside its own formula
    (linear attention's features), so it gets q and k unrotated and the rotation as
    ``rope=`` (cos, sin) of the key positions; otherwise q and k arrive rotated.
    """

    causal_ok = True
    has_params = False
    rotates_features = False
    sparse = True
    cache_window: int | None = None
    causal_error = "this attention kind cannot be causal"

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        """``cfg``: the model config, whose keys a kind reads (``window``, ``attn_block``, …);
        ``causal``: queries see no later key (a decoder that is not a prefix-LM)."""
        super().__init__()
        if causal and not self.causal_ok:
            raise ConfigError(self.causal_error)
        self.cfg, self.causal = cfg, causal

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        raise NotImplementedError

    def keeps(self) -> Keeps:
        """What a decoding cache keeps for this kind: the last ``cache_window`` keys."""
        return Keeps(window=self.cache_window)

    def mask(
        self, Tq: int, Tk: int, q_offset: int = 0, device: torch.device | None = None
    ) -> Tensor | None:
        """(Tq, Tk) bool, True where query q_offset + i may see key j; None: every key.

        Built from ``pattern()``, so a new softmax kind defines only its rule; the kinds
        without a pattern (linformer, linear) are causal or see every key."""
        if type(self).pattern is AttentionKind.pattern and not self.causal:
            return None  # full, bidirectional: every key
        dense = self.visibility(Tq, Tk, q_offset, None, device).dense()
        return None if dense is None else dense[0, 0]

    def visibility(
        self, Tq: int, Tk: int, q_offset: int = 0, key_real: Tensor | None = None,
        device: torch.device | None = None,
    ) -> Visibility:  # fmt: skip
        """The rules of ``Tq`` queries at q_offset … over ``Tk`` keys: the kind's pattern (or
        causality, for a kind without one) and the padding."""
        rule = self.pattern(Tq, Tk, q_offset, device) if self.pattern is not None else None
        if rule is None and self.causal:
            rule = _causal
        return Visibility(torch.arange(q_offset, q_offset + Tq, device=device),
                          torch.arange(Tk, device=device), pattern=rule, key_real=key_real)

    def pattern(
        self, Tq: int, Tk: int, q_offset: int = 0, device: torch.device | None = None
    ) -> Rule | None:
        """``mask()`` as a rule on (absolute query position, key position), elementwise on
        tensors of any shape: what FlexAttention's ``mask_mod`` evaluates per block
        (``attnlab.nn.flex``). None: the kind is not a softmax over a key pattern
        (linformer, linear) and has no FlexAttention path."""
        return (lambda i, j: j <= i) if self.causal else (lambda i, j: j >= 0)

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None, q_offset: int = 0
    ) -> Tensor:
        """softmax(QKᵀ/√d + M)V with M = ``mask()`` and padding, computed explicitly."""
        visible = self.visibility(q.size(2), k.size(2), q_offset, key_real, q.device).dense()
        return math_attention(q, k, v, visible)[0]


ATTENTION_KINDS: Registry[type[AttentionKind]] = Registry("model.attention")


def reference_attention(
    kind: AttentionKind, q: Tensor, k: Tensor, v: Tensor,
    key_real: Tensor | None = None, q_offset: int = 0,
) -> Tensor:  # fmt: skip
    """The explicit computation ``kind.attend`` must equal (B, H, Tq, d): softmax with
    ``kind.mask()`` and padding for the softmax kinds, the kind's own dense formula else."""
    return kind.reference(q, k, v, key_real, q_offset)


Rule = Callable[[Tensor, Tensor], Tensor]  # (query positions (Tq, 1), keys (1, Tk)) → mask


def _positions(Tq: int, Tk: int, q_offset: int, device: torch.device | None, rule: Rule) -> Tensor:
    i = torch.arange(q_offset, q_offset + Tq, device=device).unsqueeze(1)  # (Tq, 1)
    j = torch.arange(Tk, device=device).unsqueeze(0)  # (1, Tk)
    return rule(i, j)


def _causal(i: Tensor, j: Tensor) -> Tensor:
    return j <= i


def _window_rule(window: int, causal: bool) -> Rule:
    if causal:
        return lambda i, j: (j <= i) & (j > i - window)
    return lambda i, j: (i - j).abs() < window


def _attend_masked(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, dropout_p: float) -> Tensor:
    """SDPA with a boolean mask; a query row without any visible key outputs zero.

    Such rows attend to every key inside the kernel (finite softmax and gradient) and
    are zeroed after, as ``math_attention`` does.
    """
    no_key = ~mask.any(dim=-1, keepdim=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | no_key, dropout_p=dropout_p)
    return out.masked_fill(no_key, 0.0)


def _windows(x: Tensor, start: int, length: int, step: int, n: int) -> Tensor:
    """Spans x[…, start + s·step : start + s·step + length, :] for s < n, zeros (False)
    outside x: (…, T, d) → (…, n, length, d)."""
    T = x.size(-2)
    left, right = max(0, -start), max(0, start + (n - 1) * step + length - T)
    if left or right:
        pad = x.shape[:-2]
        d = x.size(-1)
        x = torch.cat([x.new_zeros(*pad, left, d), x, x.new_zeros(*pad, right, d)], dim=-2)
    x = x[..., start + left : start + left + (n - 1) * step + length, :]
    return x.unfold(-2, length, step).transpose(-1, -2)


def _window_blocks(
    q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None, q_offset: int,
    window: int, block: int, causal: bool, dropout_p: float, n_global: int = 0,
) -> Tensor:  # fmt: skip
    """Sliding-window attention, one query block of ``block`` rows at a time (batched).

    A block of queries starting at position p sees at most the keys p − w + 1 … p + block − 1
    (+ w − 1 more if bidirectional): L = block + w − 1 (+ w − 1) keys, so the scores are
    (T_q, L), not (T_q, T_k). With ``n_global`` > 0 the first n_global keys are appended
    to every block (Longformer) and removed from the window spans, so none counts twice.
    """
    B, H, Tq, d = q.shape
    Tk = k.size(2)
    before, after = window - 1, 0 if causal else window - 1
    L, n, start = block + before + after, -(-Tq // block), q_offset - before
    blocks = torch.arange(n, device=q.device).unsqueeze(1) * block  # (n, 1)
    qb = _windows(q, 0, block, block, n)  # (B, H, n, block, d)
    kb, vb = _windows(k, start, L, block, n), _windows(v, start, L, block, n)  # (B, H, n, L, d)
    r, c = torch.arange(block, device=q.device).unsqueeze(1), torch.arange(L, device=q.device)
    band = (c >= r) & (c <= r + before + after)  # (block, L): the window, alike in every block
    k_pos = start + blocks + c  # (n, L)
    mask = band & ((k_pos >= n_global) & (k_pos < Tk)).unsqueeze(1)  # (n, block, L)
    mask = mask.unsqueeze(0)  # (1, n, block, L)
    if key_real is not None:
        real = _windows(key_real.unsqueeze(-1), start, L, block, n).squeeze(-1)  # (B, n, L)
        mask = mask & real.unsqueeze(2)
    if n_global and Tk:
        G = min(n_global, Tk)
        q_pos = q_offset + blocks + r.view(1, -1)  # (n, block)
        g_mask = torch.arange(G, device=q.device) <= q_pos.unsqueeze(-1)  # (n, block, G)
        g_mask = g_mask.unsqueeze(0) if causal else torch.ones_like(g_mask).unsqueeze(0)
        if key_real is not None:
            g_mask = g_mask & key_real[:, None, None, :G]
        batch = max(mask.size(0), g_mask.size(0))
        mask = torch.cat([mask.expand(batch, -1, -1, -1), g_mask.expand(batch, -1, -1, -1)], -1)
        kb = torch.cat([kb, k[:, :, None, :G].expand(B, H, n, G, d)], dim=-2)
        vb = torch.cat([vb, v[:, :, None, :G].expand(B, H, n, G, d)], dim=-2)
    out = _attend_masked(qb, kb, vb, mask.unsqueeze(1), dropout_p)  # (B, H, n, block, d)
    return out.reshape(B, H, n * block, d)[:, :, :Tq]


def _window_loop(
    q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None, q_offset: int,
    window: int, block: int, causal: bool, dropout_p: float,
) -> Tensor:  # fmt: skip
    """Sliding-window attention, one query block at a time against a *slice* of the keys.

    The same pattern as ``_window_blocks`` without copying overlapping key spans: each
    block's keys are a view of K and V, and only a (block, L) mask is built, so autograd
    keeps no per-block copy of the keys. Measured at T = 8192, w = 256, 4 heads of 64,
    forward + backward: 104 MiB above the inputs here against 405 MiB for the unfolded
    spans (``attnlab-bench --only long_context`` for the whole model).
    """
    B, H, Tq, d = q.shape
    Tk = k.size(2)
    before, after = window - 1, 0 if causal else window - 1
    outs = []
    for s in range(0, Tq, block):
        e = min(s + block, Tq)
        first, last = q_offset + s, q_offset + e - 1  # the block's query positions
        lo, hi = max(0, first - before), min(Tk, last + after + 1)
        if hi <= lo:
            outs.append(q.new_zeros(B, H, e - s, v.size(-1)))
            continue
        i = torch.arange(first, last + 1, device=q.device).unsqueeze(1)
        j = torch.arange(lo, hi, device=q.device).unsqueeze(0)
        mask = ((j >= i - before) & (j <= i + after))[None, None]  # (1, 1, block, L)
        if key_real is not None:
            mask = mask & key_real[:, None, None, lo:hi]
        outs.append(_attend_masked(q[:, :, s:e], k[:, :, lo:hi], v[:, :, lo:hi], mask, dropout_p))
    return torch.cat(outs, dim=2)


def _global_rows(
    out: Tensor, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None, n_rows: int,
    dropout_p: float,
) -> Tensor:  # fmt: skip
    """``out`` with its first ``n_rows`` query rows (global queries, which attend to every
    key) recomputed densely."""
    n_rows = min(max(n_rows, 0), q.size(2))
    if not n_rows:
        return out
    rows = _dense_rows(q[:, :, :n_rows], k, v, key_real, dropout_p)
    return torch.cat([rows, out[:, :, n_rows:]], dim=2)


def _dense_rows(
    q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None, dropout_p: float
) -> Tensor:
    """Global queries: every (non-padding) key, T_q × T_k with T_q = the few global rows."""
    rows = torch.arange(q.size(2), device=q.device)
    visible = Visibility(rows, torch.arange(k.size(2), device=q.device), key_real=key_real).dense()
    if visible is None:
        visible = torch.ones(1, 1, 1, k.size(2), dtype=torch.bool, device=q.device)
    return _attend_masked(q, k, v, visible, dropout_p)


class FullAttention(AttentionKind):
    """softmax(QKᵀ/√d + M)V over every key (Vaswani et al. 2017, eq. 1): the baseline."""

    sparse = False

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        if key_real is None and (not self.causal or q_offset == 0):
            # no explicit mask: PyTorch may pick the flash or memory-efficient kernel
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=self.causal
            )
        visible = self.visibility(q.size(2), k.size(2), q_offset, key_real, q.device).dense()
        if visible is None:
            visible = torch.ones(1, k.size(2), dtype=torch.bool, device=q.device)
        return _attend_masked(q, k, v, visible, dropout_p)


class SlidingWindowAttention(AttentionKind):
    """Each query sees the w nearest keys: |i − j| < w, or i − w < j ≤ i when causal
    (Longformer, Beltagy et al. 2020, §3.1; Mistral 7B's sliding window, Jiang et al. 2023).

    Memory O(T·(block + 2w)): query blocks against views of their key spans (``_window_loop``).
    A causal decoder's cache needs only the last w keys (``cache_window``).
    """

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__(cfg, causal)
        self.cache_window = cfg.window if causal else None

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        s = self.cfg
        return _window_loop(q, k, v, key_real, q_offset, s.window, s.attn_block, self.causal,
                            dropout_p)

    def pattern(
        self, Tq: int, Tk: int, q_offset: int = 0, device: torch.device | None = None
    ) -> Rule:
        return _window_rule(self.cfg.window, self.causal)


class LongformerAttention(AttentionKind):
    """The sliding window plus g global tokens (Beltagy et al. 2020, §3.1 "global attention"):
    positions < g attend to every key and every query attends to them. Causal: j ≤ i still
    holds, so the global tokens, being first, see only each other.

    Memory O(T·(block + 2w + g) + g·T): window blocks with the g global keys appended, and
    the g global query rows computed densely.
    """

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        s = self.cfg
        out = _window_blocks(
            q, k, v, key_real, q_offset, s.window, s.attn_block, self.causal, dropout_p, s.n_global
        )
        # causal global rows see only earlier keys: the window path is exact for them
        return out if self.causal else _global_rows(out, q, k, v, key_real, s.n_global - q_offset,
                                                   dropout_p)  # fmt: skip

    def pattern(
        self, Tq: int, Tk: int, q_offset: int = 0, device: torch.device | None = None
    ) -> Rule:
        window, g = _window_rule(self.cfg.window, False), self.cfg.n_global
        if self.causal:
            return lambda i, j: (window(i, j) | (j < g)) & (j <= i)
        return lambda i, j: window(i, j) | (j < g) | (i < g)


@functools.lru_cache(maxsize=65536)
def _bigbird_key_blocks(
    q_block: int, n_key_blocks: int, causal: bool, n_random: int, seed: int
) -> tuple[int, ...]:
    """Key blocks of one query block: the global block 0, the window q−1, q, q+1 (q+1 only
    if bidirectional), and ``n_random`` others drawn among the blocks it may see.

    The draw depends on (seed, q_block) and on how many blocks it chooses from — the
    blocks ≤ q if causal, all key blocks if not — so a decoding step, alone or in a
    prompt, sees the same pattern.
    """
    last = q_block if causal else n_key_blocks - 1
    fixed = {b for b in (0, q_block - 1, q_block, q_block + 1) if 0 <= b <= last}
    others = [b for b in range(last + 1) if b not in fixed]
    generator = torch.Generator().manual_seed(seed * 1_000_003 + q_block)
    drawn = torch.randperm(len(others), generator=generator)[:n_random].tolist()
    return tuple(sorted(b for b in fixed | {others[i] for i in drawn} if b < n_key_blocks))


def _gather_blocks(x: Tensor, index: Tensor, block: int, n_blocks: int) -> Tensor:
    """(B, H, T, d) cut into ``n_blocks`` blocks (zeros past T), blocks ``index`` (n, m) of
    it side by side: (B, H, n, m·block, d)."""
    B, H, T, d = x.shape
    x = torch.cat([x, x.new_zeros(B, H, n_blocks * block - T, d)], dim=2)
    return x.view(B, H, n_blocks, block, d)[:, :, index].flatten(3, 4)


class BigBirdAttention(AttentionKind):
    """Block-sparse attention (Zaheer et al. 2020, §2, Fig. 1) with block size b: each query
    block sees its own and the neighbouring key blocks (window of 3 blocks), the global
    first block, and r random blocks (seeded, ≤ the query block if causal); the queries of
    the first block attend everywhere.

    Memory O(T·b·(4 + r)): each query block gathers its ≤ 4 + r key blocks,
    (B, H, n_blocks, (4 + r)·b, d); the global query rows are computed densely.
    """

    seed = 0  # of the random blocks

    def _layout(self, Tq: int, Tk: int, q_offset: int) -> tuple[int, int, int, Tensor]:
        """Queries before q_offset in its block, query and key block counts, and the
        (n, n_sel) key blocks of each query block, padded with n_key_blocks (= none)."""
        s = self.cfg
        lead = q_offset % s.attn_block  # query blocks start at absolute multiples of the block
        n, n_kb = -(-(lead + Tq) // s.attn_block), -(-Tk // s.attn_block)
        rows = [
            _bigbird_key_blocks(q_offset // s.attn_block + i, n_kb, self.causal, s.n_random,
                                self.seed)
            for i in range(n)
        ]
        width = max(len(row) for row in rows)
        index = [row + (n_kb,) * (width - len(row)) for row in rows]
        return lead, n, n_kb, torch.tensor(index, dtype=torch.long)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        B, H, Tq, d = q.shape
        Tk, b, device = k.size(2), self.cfg.attn_block, q.device
        lead, n, n_kb, index = self._layout(Tq, Tk, q_offset)
        index = index.to(device)  # block n_kb: zeros past the keys, masked
        qb = _windows(q, -lead, b, b, n)  # (B, H, n, b, d)
        kb, vb = (_gather_blocks(x, index, b, n_kb + 1) for x in (k, v))  # (B, H, n, S, d)
        k_pos = (index.unsqueeze(-1) * b + torch.arange(b, device=device)).flatten(1)  # (n, S)
        mask = k_pos < Tk  # (n, S)
        q_pos = q_offset - lead + torch.arange(n * b, device=device).view(n, b)
        mask = mask.unsqueeze(1).expand(n, b, -1)  # (n, b, S)
        if self.causal:
            mask = mask & (k_pos.unsqueeze(1) <= q_pos.unsqueeze(-1))
        mask = mask.unsqueeze(0)
        if key_real is not None:
            real = _gather_blocks(key_real[:, None, :, None], index, b, n_kb + 1)  # (B, 1, n, S, 1)
            mask = mask & real[:, 0, :, None, :, 0]
        out = _attend_masked(qb, kb, vb, mask.unsqueeze(1), dropout_p)
        out = out.reshape(B, H, n * b, d)[:, :, lead : lead + Tq]
        return out if self.causal else _global_rows(out, q, k, v, key_real, b - q_offset,
                                                   dropout_p)  # fmt: skip

    def mask(
        self, Tq: int, Tk: int, q_offset: int = 0, device: torch.device | None = None
    ) -> Tensor:
        b = self.cfg.attn_block
        lead, n, n_kb, index = self._layout(Tq, Tk, q_offset)
        blocks = torch.zeros(n, n_kb + 1, dtype=torch.bool).scatter_(1, index, True)[:, :n_kb]
        pattern = blocks.repeat_interleave(b, 0).repeat_interleave(b, 1)[lead : lead + Tq, :Tk]
        pattern = pattern.to(device)
        if self.causal:
            return pattern & _positions(Tq, Tk, q_offset, device, lambda i, j: j <= i)
        return pattern | _positions(Tq, Tk, q_offset, device, lambda i, j: i < b)

    def pattern(
        self, Tq: int, Tk: int, q_offset: int = 0, device: torch.device | None = None
    ) -> Rule:
        """A lookup in the (query block, key block) table of ``_layout``: O(T²/b²) booleans."""
        b = self.cfg.attn_block
        _, n, n_kb, index = self._layout(Tq, Tk, q_offset)
        blocks = torch.zeros(n, n_kb + 1, dtype=torch.bool).scatter_(1, index, True).to(device)
        first = q_offset // b  # the table's row 0 is this absolute query block

        def rule(i: Tensor, j: Tensor) -> Tensor:
            seen = blocks[i // b - first, j // b]
            return seen & (j <= i) if self.causal else seen | (i < b)

        return rule


class LinformerAttention(AttentionKind):
    """Keys and values projected along the sequence to k rows (Wang et al. 2020, eq. 7):

        head = softmax(Q (E K)ᵀ / √d) F V,   E, F ∈ R^{k×n} learned, sliced to E[:, :T].

    One E, F per layer, shared by the heads ("headwise sharing", §4); initialised
    N(0, 1/k) as the random projection of Theorem 1. Padded keys and values are zeroed
    before projecting. Memory O(T·k). Every position enters every projected row, so
    there is no causal form, and ``q_offset`` is ignored.
    """

    causal_ok, has_params = LinformerConfig.causal_ok, True
    pattern = None  # type: ignore[assignment]  # not a softmax over a key pattern
    causal_error = LinformerConfig.causal_error

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__(cfg, causal)
        self.E = nn.Parameter(torch.randn(cfg.linformer_k, cfg.max_len) / cfg.linformer_k**0.5)
        self.F = nn.Parameter(torch.randn(cfg.linformer_k, cfg.max_len) / cfg.linformer_k**0.5)

    def project(self, k: Tensor, v: Tensor, key_real: Tensor | None) -> tuple[Tensor, Tensor]:
        """E K and F V, (B, H, k, d) each."""
        T = k.size(2)
        if T > self.cfg.max_len:
            raise ValueError(f"linformer got {T} keys but E, F cover model.max_len="
                             f"{self.cfg.max_len}; raise model.max_len")  # fmt: skip
        if key_real is not None:
            real = key_real[:, None, :, None].to(k.dtype)
            k, v = k * real, v * real
        return self.E[:, :T].to(k.dtype) @ k, self.F[:, :T].to(v.dtype) @ v

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        k, v = self.project(k, v, key_real)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None, q_offset: int = 0
    ) -> Tensor:
        """Eq. 7 with the softmax written out (no mask: the k projected rows are all real)."""
        k, v = self.project(k, v, key_real)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, §3.2.1): positive, so φ(q)·φ(k) > 0."""
    return F.elu(x) + 1


Rope = tuple[Tensor, Tensor]  # (cos, sin) of positions 0 … T_k − 1, (B|1, 1, T_k, d/2)


class LinearAttention(AttentionKind):
    """Kernelised attention (Katharopoulos et al. 2020, eq. 4–6), φ = ``elu_feature_map``:

        V'_i = φ(Q_i)ᵀ Σ_j φ(K_j) V_jᵀ / φ(Q_i)ᵀ Σ_j φ(K_j)                 (eq. 6)

    Causal (eq. 9–10): S_i = Σ_{j≤i} φ(K_j) V_jᵀ, Z_i = Σ_{j≤i} φ(K_j), V'_i = φ(Q_i)ᵀS_i /
    φ(Q_i)ᵀZ_i, computed in chunks of ``chunk`` queries: the quadratic masked form inside a
    chunk, S and Z of the earlier chunks across — exact, memory O(T·(chunk + d²/chunk)).
    Decoding keeps only (S, Z) (``keeps``): ``attend_after`` the cached sums, O(d²) a step.
    φ of padded keys is zero. There are no attention weights, so ``dropout_p`` is unused.

    With ``model.pos=rope`` the rotation acts on the features, in the numerator only
    (RoFormer, Su et al. 2021, §3.4.3, eq. 19):

        V'_m = Σ_n (R_m φ(q_m))ᵀ (R_n φ(k_n)) v_n / Σ_n φ(q_m)ᵀ φ(k_n)

    so the numerator's weights depend on positions only through m − n, as RoPE's do in
    softmax attention (rotating q and k before φ would not: φ is not linear). S sums the
    rotated φ(K_j) V_jᵀ, Z the unrotated φ(K_j). The rotated weights can be negative; the
    denominator stays a sum of positive terms, so it cannot vanish, and the weights of a
    row need not sum to one — the published form, which RoFormer keeps for that reason.
    ``MultiHeadAttention`` leaves q and k unrotated for this kind (``rotates_features``)
    and its kernel hands the (cos, sin) of the key positions to each method as ``rope``.
    """

    chunk = 64
    pattern = None  # type: ignore[assignment]  # no softmax: no FlexAttention path
    rotates_features = True

    @staticmethod
    def features(x: Tensor, rope: Rope | None, rows: slice = slice(None)) -> tuple[Tensor, Tensor]:
        """(R φ(x), φ(x)): the rotated features of the numerator and the plain ones of the
        denominator, ``x`` at the positions ``rows`` of ``rope`` (the same tensor twice
        without RoPE)."""
        plain = elu_feature_map(x)
        if rope is None:
            return plain, plain
        cos, sin = (t[..., rows, :] for t in rope)
        return apply_rotary(plain, cos, sin), plain

    def phi_keys(
        self, k: Tensor, key_real: Tensor | None, rope: Rope | None = None
    ) -> tuple[Tensor, Tensor]:
        """(R φ(K), φ(K)), zero at padded keys."""
        rotated, plain = self.features(k, rope)
        if key_real is None:
            return rotated, plain
        real = key_real[:, None, :, None].to(k.dtype)
        masked = plain * real
        return (masked if rotated is plain else rotated * real), masked

    def linear_state(
        self, k: Tensor, v: Tensor, key_real: Tensor | None = None, rope: Rope | None = None
    ) -> tuple[Tensor, Tensor]:
        """S = Σ_j R_j φ(K_j)V_jᵀ (B, H, d, d_v) and Z = Σ_j φ(K_j) (B, H, d) over the given
        keys (``rope``: the rotation at their positions).

        Both are sums, so a decoding cache adds the state of each new token to its own.
        """
        rotated, plain = self.phi_keys(k, key_real, rope)
        return rotated.transpose(-2, -1) @ v, plain.sum(dim=-2)

    def attend_with_state(
        self, q: Tensor, S: Tensor, Z: Tensor, rope: Rope | None = None
    ) -> Tensor:
        """(R φ(Q))ᵀS / φ(Q)ᵀZ (B, H, Tq, d_v): every query sees every key summed into (S, Z)."""
        rotated, plain = self.features(q, rope)
        return rotated @ S / _normaliser(plain @ Z.unsqueeze(-1))

    def keeps(self) -> Keeps:
        """A decoding cache keeps the sums (S, Z) in place of the keys (eq. 9–10)."""
        return Keeps(running_state=self.linear_state)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0, rope: Rope | None = None,
    ) -> Tensor:  # fmt: skip
        """``rope``: the rotation at the key positions 0 … T_k − 1; the queries are at
        q_offset … q_offset + T_q − 1."""
        Tq = q.size(2)
        if not self.causal:
            S, Z = self.linear_state(k, v, key_real, rope)
            return self.attend_with_state(q, S, Z, _rows(rope, q_offset, Tq))
        earlier = None if key_real is None else key_real[:, :q_offset]
        state = self.linear_state(
            k[:, :, :q_offset], v[:, :, :q_offset], earlier, _rows(rope, 0, q_offset)
        )
        later = None if key_real is None else key_real[:, q_offset:]
        return self.attend_after(
            q, k[:, :, q_offset:], v[:, :, q_offset:], later, state, _rows(rope, q_offset, Tq)
        )

    def attend_after(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None,
        state: tuple[Tensor, Tensor], rope: Rope | None = None,
    ) -> Tensor:  # fmt: skip
        """Causal outputs of the queries of keys ``k`` (one per query, in order) after the
        keys summed into ``state`` = (S, Z): chunks of ``chunk`` queries, the quadratic
        masked form inside a chunk, S and Z of the earlier keys and chunks across.
        ``rope``: the rotation at these queries' (and keys') positions. With RoPE the
        denominator inside a chunk is a product of its own, not the numerator's row sums."""
        B, H, Tq, d = q.shape
        C, n = self.chunk, -(-Tq // self.chunk)
        keys, plain_keys = self.phi_keys(k, key_real, rope)
        queries, plain_queries = self.features(q, rope)
        S, Z = state

        def chunks(x: Tensor) -> Tensor:
            return _windows(x, 0, C, C, n)  # (B, H, n, C, ·)

        qc, kc, vc = chunks(queries), chunks(keys), chunks(v)
        scores = (qc @ kc.transpose(-2, -1)).tril()  # (B, H, n, C, C): within the chunk
        if plain_keys is keys:
            plain_qc, plain_kc, plain_scores = qc, kc, scores
        else:
            plain_qc, plain_kc = chunks(plain_queries), chunks(plain_keys)
            plain_scores = (plain_qc @ plain_kc.transpose(-2, -1)).tril()
        chunk_S, chunk_Z = kc.transpose(-2, -1) @ vc, plain_kc.sum(-2)  # (B,H,n,d,d_v), (B,H,n,d)
        S = S.unsqueeze(2) + F.pad(chunk_S.cumsum(2), (0, 0, 0, 0, 1, -1))  # earlier chunks
        Z = Z.unsqueeze(2) + F.pad(chunk_Z.cumsum(2), (0, 0, 1, -1))
        numerator = scores @ vc + qc @ S
        denominator = plain_scores.sum(-1, keepdim=True) + plain_qc @ Z.unsqueeze(-1)
        out = numerator / _normaliser(denominator)
        return out.reshape(B, H, n * C, -1)[:, :, :Tq]

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, rope: Rope | None = None,
    ) -> Tensor:  # fmt: skip
        """Eq. 4 densely (eq. 19 of RoFormer with ``rope``): numerator weights
        (R_i φ(Q_i))·(R_j φ(K_j)), denominator Σ_j φ(Q_i)·φ(K_j), zero outside ``mask()``."""
        Tq = q.size(2)
        queries, plain_queries = self.features(q, rope, slice(q_offset, q_offset + Tq))
        keys, plain_keys = self.phi_keys(k, key_real, rope)
        weights = queries @ keys.transpose(-2, -1)
        plain = plain_queries @ plain_keys.transpose(-2, -1)
        mask = self.mask(Tq, k.size(2), q_offset, q.device)
        if mask is not None:
            weights, plain = weights.masked_fill(~mask, 0.0), plain.masked_fill(~mask, 0.0)
        return weights @ v / _normaliser(plain.sum(-1, keepdim=True))


def _rows(rope: Rope | None, start: int, length: int) -> Rope | None:
    """The rotation at positions start … start + length − 1."""
    if rope is None:
        return None
    cos, sin = rope
    return cos[..., start : start + length, :], sin[..., start : start + length, :]


def _normaliser(denominator: Tensor) -> Tensor:
    """φ > 0, so the denominator is 0 only for a query without keys: output 0, not NaN."""
    return denominator.clamp_min(torch.finfo(denominator.dtype).tiny)
