"""Forward FLOPs of the Transformer's matrix products, per example (for MFU and the bench).

Multiply-add = 2 FLOPs. Per layer and token: W_Q, W_K, W_V, W_O (2·4·d², less with
grouped-query attention, whose W_K and W_V have n_kv_heads·d_head rows), the scores
QKᵀ and the weighted sum AV over ``length`` keys (2·2·length·d), the feed-forward
network (2·2·d·d_ff, or 3 matrices for SwiGLU); a decoder layer with cross-attention
adds W_Q, W_O per query, the scores over the memory, and W_K, W_V once per memory
token. For a decoder-only model with d_ff = 4·d_model this is PaLM's
6·N + 12·L·d·T per token for training (Chowdhery et al. 2022, App. B). Like PaLM
and nanoGPT, attention counts the full T×T score matrix even when causal.
"""

from __future__ import annotations

from attnlab.models.config import ModelConfig


def ffn_flops(cfg: ModelConfig) -> int:
    """Forward FLOPs of the feed-forward network per token."""
    matrices = 3 if cfg.ffn == "swiglu" else 2
    return 2 * matrices * cfg.d_model * cfg.ff_dim


def transformer_flops(cfg: ModelConfig, length: int, layers: int, memory_len: int = 0) -> int:
    """Forward FLOPs of ``layers`` Transformer layers over ``length`` tokens; with
    ``memory_len`` > 0 each layer also cross-attends over that many encoder states."""
    d = cfg.d_model
    d_kv = (cfg.n_kv_heads or cfg.n_heads) * (d // cfg.n_heads)  # K/V width (GQA: narrower)
    projections = 2 * (2 * d * d + 2 * d * d_kv)  # W_Q, W_O; W_K, W_V
    per_token = projections + 2 * 2 * length * d + ffn_flops(cfg)  # + QKᵀ, AV; FFN
    total = layers * length * per_token
    if memory_len:
        queries = length * (2 * 2 * d * d + 2 * 2 * memory_len * d)  # W_Q, W_O; QKᵀ, AV
        memory = memory_len * 2 * 2 * d * d_kv  # W_K, W_V on the encoder output
        total += layers * (queries + memory)
    return total


def output_flops(cfg: ModelConfig, positions: int) -> int:
    """The output projection onto the vocabulary at ``positions`` positions."""
    return positions * 2 * cfg.d_model * cfg.vocab_size
