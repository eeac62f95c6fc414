"""Forward FLOPs of the Transformer's matrix products, per example (for MFU and the bench),
and the numbers a decoding cache keeps per token (:func:`cache_elements_per_token`).

Multiply-add = 2 FLOPs. Per layer and token: W_Q, W_K, W_V, W_O (2·4·d², less with
grouped-query attention, whose W_K and W_V have n_kv_heads·d_head rows), the scores
QKᵀ and the weighted sum AV over the keys the query attends (2·2·keys·d), the feed-forward
network (2·2·d·d_ff, or 3 matrices for a gated unit: SwiGLU, GEGLU; a mixture of experts:
its router and the k routed and the shared experts a token runs, :func:`moe_flops`); a
decoder layer with cross-attention adds W_Q, W_O per query, the scores over the memory, and
W_K, W_V once per memory token. For a decoder-only model with d_ff = 4·d_model this is
PaLM's 6·N + 12·L·d·T per token for training (Chowdhery et al. 2022, App. B).

Attention counts the work the model needs, not what a kernel happens to compute —
model FLOPs, as MFU counts them (PaLM, App. B) — per ``model.attention``:

* ``full``: all T keys, even when causal, as PaLM and nanoGPT count, so MFU compares
  with theirs. (Cross-attention is always full: every memory state.)
* ``sliding_window``, ``longformer``, ``bigbird`` and any kind with its own ``pattern``:
  the (query, key) pairs its ``mask()`` allows (``attended_pairs``) — w keys a query for
  a causal window, 2w − 1 for a bidirectional one. Their blocked kernels (attn_impl=sdpa)
  compute more, which is not counted: a block of b queries scores b + w − 1 keys (a
  causal window: (b − 1)/w more), BigBird's gathered blocks are scored whole, and the
  global rows of the bidirectional kinds are computed twice (tests/test_mfu.py bounds it).
* ``linformer``: the k projected keys (k = ``linformer_k``, even when T < k), plus the
  projections E·K and F·V along the sequence (2·2·k·d per token; Wang et al. 2020, eq. 7).
* ``sigmoid``: all T keys, as ``full`` (σ(QKᵀ/√d + b) is computed for every pair and
  masked after; Ramapuram et al. 2025, §2).
* ``differential``: all T keys, as ``full``: the two maps of a pair of heads score d each
  (2·T·d over the heads, QKᵀ's), and A₁ − λA₂ weighs the pair's 2d values once (2·T·d,
  AV's; Ye et al. 2025, eq. 1). The SDPA path multiplies each map by V (twice AV), which
  is not counted.
* ``mla``: all T keys, as ``full``, each query and key n_h·(d_h + d_h^R) wide (the decoupled
  RoPE dimensions, 2·T·(d + n_h·d_h^R) for QKᵀ) and the values d (DeepSeek-V2, eq. 18); its
  projections are the down- and up-projections of eq. 9–15, each token's latent up-projected
  once (a cached decoding step without weight absorption repeats W^UK, W^UV over the
  history, which is not counted).
* ``linear``: φ(K)ᵀV and φ(Q)ᵀS, d_head × d_head per head and token (2·2·d_head·d), and the
  normaliser φ(Q)ᵀZ (2·d; Katharopoulos et al. 2020, eq. 6). The causal kernel's chunks
  (the quadratic form within 64 tokens) are not counted.
* ``mamba2``: the mixer in place of W_Q … W_O and attention (:func:`mamba2_flops`): its
  input and output projections, the depthwise conv1d (2·K per channel and token), and the
  matrix products of the chunked SSD form as computed (Dao & Gu 2024, §6, Listing 1), the
  last chunk's padding included — C Bᵀ within each chunk (once: B and C are shared by the
  heads), (C Bᵀ ∘ L)X, each chunk's state X Bᵀ, the states passed across the n + 1 chunk
  boundaries (a (n + 1)² product, n = ⌈T/Q⌉) and the entering state read out by C.
  Exponentials, cumulative sums and the gated norm are elementwise and not counted.
* ``gated_deltanet``: the mixer in place of W_Q … W_O and attention
  (:func:`gated_deltanet_flops`): its projections, the depthwise conv1d, and the matrix
  products of the chunked form as computed by the PyTorch form (Yang et al. 2025, §3.3),
  padding included — K Kᵀ and Q Kᵀ within each chunk, the UT transform's m = ⌈log₂ Q⌉
  products with [β V, βγ K] and its m − 1 squarings (2·Q³ each), the within-chunk outputs,
  and at each of the n − 1 chunk boundaries the state passed on (Eᵀ K), the values it
  changes (W Sᵀ) and its read-out (Q Sᵀ); training starts from no state and needs no final
  one. flash-linear-attention's kernel computes the inverse otherwise, which is not
  counted.
* ``hybrid``: each layer as its own kind (``model.layer_pattern``): Gemma 3's 5:1 pattern
  over T tokens scores 5 windows of w keys a query and one of all T, per six layers.
"""

from __future__ import annotations

import functools
from collections import Counter

from attnlab.components.attention import layer_kinds
from attnlab.model_config import ModelConfig

_MASK_ELEMENTS = 2**22  # mask entries built at a time when counting a pattern's pairs


def ffn_flops(cfg: ModelConfig) -> int:
    """Forward FLOPs of the feed-forward network per token (its matrices; activations,
    norms and the gate's product are elementwise and not counted, as PaLM's App. B)."""
    if cfg.ffn == "moe":
        return moe_flops(cfg)
    matrices = 3 if cfg.component("ffn").gated else 2
    return 2 * matrices * cfg.d_model * cfg.ff_dim


def moe_flops(cfg: ModelConfig) -> int:
    """A mixture of experts per token: the router (2·d·E) and the SwiGLUs it runs, its k
    experts and the shared ones (2·3·d·d_ff each): active parameters only, as MFU counts."""
    experts = cfg.moe_top_k + cfg.moe_shared_experts
    return 2 * cfg.d_model * cfg.moe_experts + experts * 2 * 3 * cfg.d_model * cfg.ff_dim


def attended_pairs(cfg: ModelConfig, length: int, causal: bool) -> int:
    """(query, key) pairs a self-attention layer over ``length`` tokens scores: length² for
    ``full`` (even when causal), else the True entries of the kind's ``mask(length, length)``
    — counted row by row for the built-in kinds, from the mask itself for a kind of one's own."""
    from attnlab.nn.attention_kinds import ATTENTION_KINDS, AttentionKind

    kind = ATTENTION_KINDS.get(cfg.attention)
    if cfg.attention == "full" or kind.pattern in (None, AttentionKind.pattern):
        return length * length  # linformer and linear are counted by attention_flops
    if cfg.attention in ("sliding_window", "longformer"):
        n_global = cfg.n_global if cfg.attention == "longformer" else 0
        return _window_pairs(length, cfg.window, n_global, causal)
    if cfg.attention == "bigbird":
        return _bigbird_pairs(length, cfg.attn_block, cfg.n_random, causal, kind.seed)
    items = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in cfg.to_dict().items())
    return _mask_count(kind, items, causal, length)  # (a hybrid's pattern is a list)


@functools.lru_cache(maxsize=4096)
def _window_pairs(T: int, window: int, n_global: int, causal: bool) -> int:
    """Query i sees keys lo ≤ j < hi, |i − j| < w (j ≤ i if causal), and the global keys
    j < g left of them; bidirectional global queries i < g see all T (Beltagy et al. 2020)."""
    pairs = 0
    for i in range(T):
        lo, hi = max(0, i - window + 1), i + 1 if causal else min(T, i + window)
        pairs += T if i < n_global and not causal else hi - lo + min(n_global, lo)
    return pairs


@functools.lru_cache(maxsize=4096)
def _bigbird_pairs(T: int, b: int, n_random: int, causal: bool, seed: int) -> int:
    """Each query block sees its key blocks whole (``_bigbird_key_blocks``: global, window,
    random) — its own block below the diagonal if causal; bidirectional, block 0 sees all."""
    from attnlab.nn.attention_kinds import _bigbird_key_blocks

    n = -(-T // b)
    size = [min(b, T - q * b) for q in range(n)]  # the last block may be short
    pairs = 0
    for q in range(n):
        blocks = _bigbird_key_blocks(q, n, causal, n_random, seed)
        if causal:
            pairs += size[q] * sum(size[k] for k in blocks if k < q) + size[q] * (size[q] + 1) // 2
        else:
            pairs += size[q] * (T if q == 0 else sum(size[k] for k in blocks))
    return pairs


@functools.lru_cache(maxsize=4096)
def _mask_count(kind: type, cfg: tuple, causal: bool, length: int) -> int:
    """True entries of ``kind(cfg, causal).mask(length, length)`` (``cfg``: the model config's
    items, hashable for the cache), built a few rows at a time (the whole (T, T) mask is what
    the sparse kinds exist to avoid); O(T²), once per length."""
    attention = kind(ModelConfig(**dict(cfg)), causal)
    rows = max(1, _MASK_ELEMENTS // max(length, 1))
    return sum(
        int(attention.mask(min(rows, length - s), length, q_offset=s).sum())
        for s in range(0, length, rows)
    )


def attention_flops(cfg: ModelConfig, length: int, causal: bool) -> int:
    """Forward FLOPs of one self-attention over ``length`` tokens, all heads, W_Q … W_O excluded."""
    d = cfg.d_model
    if cfg.attention == "mla":  # q·k over n_h·(d_h + d_h^R), AV over d_h per head
        d_rope = cfg.component("attention").sizes(cfg)[2]
        return 2 * attended_pairs(cfg, length, causal) * (2 * d + cfg.n_heads * d_rope)
    if cfg.attention == "linformer":
        k = cfg.linformer_k
        return 2 * 2 * length * k * d + 2 * 2 * k * length * d  # QKᵀ, AV over k rows; E·K, F·V
    if cfg.attention == "linear":
        d_head = d // cfg.n_heads
        return length * (2 * 2 * d_head * d + 2 * d)  # φ(K)ᵀV, φ(Q)ᵀS per head; φ(Q)ᵀZ
    return 2 * 2 * attended_pairs(cfg, length, causal) * d  # QKᵀ, AV


def mamba2_flops(cfg: ModelConfig, length: int) -> int:
    """Forward FLOPs of one Mamba-2 mixer over ``length`` tokens (:mod:`attnlab.nn.mamba2`):
    the projections, the conv and the chunked SSD form's five matrix products."""
    d, N, H = cfg.d_model, cfg.ssm_state, cfg.n_heads
    inner = cfg.ssm_expand * d
    conv_channels = inner + 2 * N
    projections = 2 * d * (inner + conv_channels + H) + 2 * inner * d
    Q = min(cfg.ssm_chunk, length)
    n = -(-length // Q)
    padded = n * Q
    within = 2 * n * Q * Q * N + 2 * n * Q * Q * inner  # C Bᵀ; (C Bᵀ ∘ L) X
    across = 2 * padded * inner * N + 2 * (n + 1) ** 2 * inner * N + 2 * padded * N * inner
    return length * (projections + 2 * cfg.ssm_conv * conv_channels) + within + across


def gated_deltanet_flops(cfg: ModelConfig, length: int) -> int:
    """Forward FLOPs of one Gated DeltaNet mixer over ``length`` tokens
    (:mod:`attnlab.nn.gated_deltanet`): the projections, the conv and the chunked form's
    matrix products (per chunk and head: K Kᵀ, Q Kᵀ, the UT transform and the within-chunk
    outputs; three state products per chunk boundary)."""
    d, H = cfg.d_model, cfg.n_heads
    dk = d // H
    dv = cfg.ssm_expand * dk
    conv_channels = 2 * d + H * dv  # (q, k, v)
    projections = 2 * d * (conv_channels + H * dv + 2 * H) + 2 * H * dv * d
    Q = min(cfg.delta_chunk, length)
    n, m = -(-length // Q), (Q - 1).bit_length()
    ut = m * 2 * Q * Q * (dk + dv) + max(m - 1, 0) * 2 * Q**3  # T·[βV, βγK]; N², N⁴, …
    within = 2 * 2 * Q * Q * dk + ut + 2 * Q * Q * dv  # K Kᵀ, Q Kᵀ; T; (Q Kᵀ ∘ Γ) E
    across = 3 * 2 * Q * dk * dv  # W Sᵀ, Q Sᵀ and Eᵀ K at each of the n − 1 boundaries
    mixing = H * (n * within + (n - 1) * across)
    return length * (projections + 2 * cfg.ssm_conv * conv_channels) + mixing


def self_attention_projection_flops(cfg: ModelConfig) -> int:
    """Per token: W_Q, W_K, W_V, W_O; for mla W^DKV, W^UK, W^UV, W^KR, (W^DQ,) W^UQ, W^QR
    and W^O (DeepSeek-V2, eq. 9–19), each token's latent up-projected once."""
    d = cfg.d_model
    if cfg.attention == "mla":
        d_c, d_cq, d_rope = cfg.component("attention").sizes(cfg)
        query_in = d_cq or d  # W^UQ and W^QR read c^Q, or h without query compression
        keys = d * d_c + 2 * d_c * d + d * d_rope  # W^DKV; W^UK, W^UV; W^KR
        queries = d * (d_cq or 0) + query_in * d + query_in * cfg.n_heads * d_rope
        return 2 * (keys + queries + d * d)  # and W^O
    d_kv = (cfg.n_kv_heads or cfg.n_heads) * (d // cfg.n_heads)
    return 2 * (2 * d * d + 2 * d * d_kv)  # W_Q, W_O; W_K, W_V


def transformer_flops(
    cfg: ModelConfig, length: int, layers: int, memory_len: int = 0, causal: bool | None = None
) -> int:
    """Forward FLOPs of ``layers`` Transformer layers over ``length`` tokens; with
    ``memory_len`` > 0 each layer also cross-attends over that many encoder states.

    ``causal``: the self-attention is masked (a decoder's). None: decoder layers are those
    with cross-attention and all of decoder_only's; others (encoders, ViT) are bidirectional.
    """
    if causal is None:
        causal = memory_len > 0 or cfg.name == "decoder_only"
    if cfg.attention == "hybrid":  # each layer counted as its own kind
        kinds = Counter(layer_kinds(cfg, layers))
        return sum(transformer_flops(cfg.replace(attention=kind), length, n, memory_len, causal)
                   for kind, n in kinds.items())  # fmt: skip
    d = cfg.d_model
    d_kv = (cfg.n_kv_heads or cfg.n_heads) * (d // cfg.n_heads)  # K/V width (GQA: narrower)
    projections = self_attention_projection_flops(cfg)
    mixer = {"mamba2": mamba2_flops, "gated_deltanet": gated_deltanet_flops}.get(cfg.attention)
    if mixer is not None:  # a token mixer in place of W_Q … W_O and attention
        per_layer = length * ffn_flops(cfg) + mixer(cfg, length)
    else:
        per_layer = length * (projections + ffn_flops(cfg)) + attention_flops(cfg, length, causal)
    total = layers * per_layer
    if memory_len:
        queries = length * (2 * 2 * d * d + 2 * 2 * memory_len * d)  # W_Q, W_O; QKᵀ, AV
        memory = memory_len * 2 * 2 * d * d_kv  # W_K, W_V on the encoder output
        total += layers * (queries + memory)
    return total


def output_flops(cfg: ModelConfig, positions: int) -> int:
    """The output projection onto the vocabulary at ``positions`` positions."""
    return positions * 2 * cfg.d_model * cfg.vocab_size


def cache_elements_per_token(cfg: ModelConfig) -> int:
    """Numbers one self-attention layer's decoding cache keeps per token (× the dtype's bytes:
    bytes): 2·n_h·d_h keys and values for multi-head attention, 2·n_kv·d_h for grouped-query
    attention, d_c + d_h^R for ``model.attention=mla`` (DeepSeek-V2, §2.1.4, Table 1). For the
    kinds that keep every token; a sliding window keeps at most w, linear attention sums."""
    if cfg.attention == "mla":
        d_c, _, d_rope = cfg.component("attention").sizes(cfg)
        return d_c + d_rope
    return 2 * (cfg.n_kv_heads or cfg.n_heads) * cfg.d_head
