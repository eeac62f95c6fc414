"""Attention: the projections every Transformer layer has, the kind (which keys a query
sees and how the softmax is computed) and the kernel (the configs; the modules are in
:mod:`attnlab.nn.attention`, :mod:`attnlab.nn.attention_kinds`, :mod:`attnlab.nn.kernels`)."""

from __future__ import annotations

from typing import Any

from attnlab.components.core import (
    ComponentConfig,
    Family,
    Key,
    ModelKeys,
    at_least_zero,
    positive,
    positive_number_or_null,
    positive_or_null,
    probability,
)
from attnlab.errors import ConfigError


class MultiHeadAttentionConfig(ComponentConfig):
    """MultiHead(Q, K, V) = Concat(head_1 … head_h) W_O (Vaswani et al. 2017, §3.2.2), with
    grouped-query heads (Ainslie et al. 2023) and query-key normalisation (Dehghani et al.
    2023): a part of every Transformer layer."""

    name = "attention heads"
    keys = {
        "n_heads": Key(4, int, positive, "attention heads h; d_model/h each"),
        "n_kv_heads": Key(None, int | None, positive_or_null,
                          "key/value heads: 1 = multi-query; null = n_heads (multi-head)"),
        "qk_norm": Key(False, bool, None, "normalise queries and keys per head (Dehghani et al. "
                       "2023; OLMo 2)"),
        "attn_dropout": Key(0.0, float, probability, "dropout on the attention weights"),
    }  # fmt: skip

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """h heads of d_model/h each, and key/value heads that divide the query heads."""
        if cfg.d_model % cfg.n_heads:
            raise ConfigError(
                f"model.d_model={cfg.d_model} is not divisible by "
                f"model.n_heads={cfg.n_heads}; choose sizes with d_model % n_heads == 0"
            )
        n_kv = cfg.n_kv_heads
        if n_kv is not None and cfg.n_heads % n_kv:
            raise ConfigError(
                f"model.n_kv_heads={n_kv} must divide model.n_heads={cfg.n_heads} "
                "(1: multi-query attention; null: one K/V head per query head)"
            )


# model.attention ---------------------------------------------------------------------------
WINDOW = Key(256, int, positive, "sliding_window, longformer: each query sees w neighbours")
ATTN_BLOCK = Key(64, int, positive, "the query block of the sparse kernels; bigbird's block")


class AttentionKindConfig(ComponentConfig):
    """Base of ``model.attention``: ``cls(cfg, causal)``, the kernel between the projections.

    ``causal_ok``: it has a causal form (a decoder can use it). ``sparse``: a pattern that
    skips keys, or a kernel of its own: no additive position bias on the full score matrix,
    no prefix-LM mask. ``softcap_ok``: a softmax over a key pattern, whose logits
    ``model.attn_softcap`` can cap (written out or through FlexAttention)."""

    causal_ok = True
    sparse = True
    softcap_ok = False
    mixer = False  # a whole token mixer in the attention's place, projections included
    causal_error = "this attention kind cannot be causal"

    @classmethod
    def build(cls, cfg: ModelKeys, causal: bool) -> Any:
        return cls.target()(cfg, causal)


ATTENTION_KINDS = Family("attention", "which keys a query sees", "full", AttentionKindConfig)


@ATTENTION_KINDS.declare
class FullAttentionConfig(AttentionKindConfig):
    """softmax(QKᵀ/√d + M)V over every key (Vaswani et al. 2017, eq. 1): the baseline."""

    name, builds, sparse = "full", "attnlab.nn.attention_kinds:FullAttention", False
    softcap_ok = True


@ATTENTION_KINDS.declare
class SlidingWindowConfig(AttentionKindConfig):
    """Each query sees the w nearest keys: |i − j| < w, or i − w < j ≤ i when causal
    (Beltagy et al. 2020, §3.1; Mistral's SWA)."""

    name, builds = "sliding_window", "attnlab.nn.attention_kinds:SlidingWindowAttention"
    softcap_ok = True
    keys = {"window": WINDOW, "attn_block": ATTN_BLOCK}


@ATTENTION_KINDS.declare
class LongformerConfig(AttentionKindConfig):
    """The sliding window plus g global tokens that attend and are attended everywhere
    (Beltagy et al. 2020, §3.1 "global attention")."""

    name, builds = "longformer", "attnlab.nn.attention_kinds:LongformerAttention"
    softcap_ok = True
    keys = {"window": WINDOW, "attn_block": ATTN_BLOCK,
            "n_global": Key(1, int, positive, "the first n_global positions attend and are "
                            "attended everywhere")}  # fmt: skip


@ATTENTION_KINDS.declare
class BigBirdConfig(AttentionKindConfig):
    """Blocks of b: 3 window blocks, 1 global block and r random blocks per query block
    (Zaheer et al. 2020, §2, Fig. 1)."""

    name, builds = "bigbird", "attnlab.nn.attention_kinds:BigBirdAttention"
    softcap_ok = True
    keys = {"attn_block": ATTN_BLOCK,
            "n_random": Key(2, int, at_least_zero, "random key blocks per query block "
                            "(seeded)")}  # fmt: skip


@ATTENTION_KINDS.declare
class LinformerConfig(AttentionKindConfig):
    """softmax(Q (E K)ᵀ/√d) F V: keys and values projected along the sequence to k rows
    (Wang et al. 2020, eq. 7); not causal."""

    name, builds = "linformer", "attnlab.nn.attention_kinds:LinformerAttention"
    keys = {"linformer_k": Key(256, int, positive, "keys and values projected along the "
                               "sequence to k rows")}  # fmt: skip
    causal_ok = False
    causal_error = (
        "model.attention=linformer mixes every position into its k projections, so it "
        "cannot be causal; use it with model=encoder_only or vit, or choose "
        "sliding_window/linear for decoders"
    )


@ATTENTION_KINDS.declare
class LinearAttentionConfig(AttentionKindConfig):
    """φ(Q)(φ(K)ᵀV) / φ(Q)(φ(K)ᵀ1), φ = elu + 1 (Katharopoulos et al. 2020, eq. 4–6)."""

    name, builds = "linear", "attnlab.nn.attention_kinds:LinearAttention"


@ATTENTION_KINDS.declare
class SigmoidAttentionConfig(AttentionKindConfig):
    """σ(QKᵀ/√d + b)V, b = −log n, n = model.max_len: each key weighed on its own, no softmax
    (Ramapuram et al. 2025, §2)."""

    name, builds = "sigmoid", "attnlab.nn.sigmoid_attention:SigmoidAttention"


def lambda_init_rule(key: str, value: Any) -> None:
    if value is not None and not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"model.{key}={value} must be in [0, 1), or null for the paper's "
                          "0.8 − 0.6·exp(−0.3·(l − 1)) at layer l")  # fmt: skip


@ATTENTION_KINDS.declare
class DifferentialAttentionConfig(AttentionKindConfig):
    """(softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))V over pairs of heads, each pair RMS-normed
    and scaled by 1 − λ_init (Ye et al. 2025, "Differential Transformer", §2.1)."""

    name, builds = "differential", "attnlab.nn.differential_attention:DifferentialAttention"
    keys = {"lambda_init": Key(None, float | None, lambda_init_rule, "λ_init of every layer; "
                               "null: 0.8 − 0.6·exp(−0.3·(l − 1)) at layer l")}  # fmt: skip

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """Heads 2i and 2i + 1 form pair i, each with its own keys and values."""
        if cfg.n_heads % 2:
            raise ConfigError(
                f"model.attention=differential pairs heads (2i, 2i + 1) and model.n_heads="
                f"{cfg.n_heads} is odd; choose an even model.n_heads"
            )
        if cfg.n_kv_heads not in (None, cfg.n_heads):
            raise ConfigError(
                "model.attention=differential pairs each head's own keys and values, and "
                f"model.n_kv_heads={cfg.n_kv_heads} shares them; set model.n_kv_heads=null"
            )


class MixerConfig(AttentionKindConfig):
    """Base of the kinds that are a whole token mixer, a recurrence with a state of its own:
    causal, no cross-attention, no positions, and none of softmax attention's keys.
    ``refusals``: why this mixer does not take model.n_kv_heads and model.qk_norm."""

    mixer = True
    refusals = {"n_kv_heads": "it has no keys or values", "qk_norm": "it has no queries or keys"}

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """Causal, no cross-attention, no positions, and none of softmax attention's keys."""
        kind = f"model.attention={cls.name}"
        if not cfg.architecture.causal:
            raise ConfigError(f"{kind} is causal only and model={cfg.name} is bidirectional; "
                              "use model=decoder_only")  # fmt: skip
        if cfg.name == "encoder_decoder":
            raise ConfigError(f"{kind} has no cross-attention and model=encoder_decoder's "
                              "encoder is bidirectional; use model=decoder_only")  # fmt: skip
        # in a hybrid these keys are the attention layers' (model.layer_pattern): not refused
        alone = cfg.get("layer_pattern") is None
        refused = [  # (key, refused?, the fix, why)
            ("pos", alone and cfg.pos != "none", "none", "a recurrence orders the tokens itself"),
            ("n_kv_heads", alone and cfg.n_kv_heads is not None, "null",
             cls.refusals["n_kv_heads"]),
            ("qk_norm", alone and cfg.qk_norm, "false", cls.refusals["qk_norm"]),
            ("attn_dropout", alone and cfg.attn_dropout > 0, "0.0", "it has no attention weights"),
            ("attn_impl", alone and cfg.attn_impl != "sdpa", "sdpa", "it has no softmax"),
            ("param", cfg.get("param") == "mup", "sp", "μP scales softmax logits"),
        ]  # fmt: skip
        for key, wrong, fix, why in refused:
            if wrong:
                value = cfg.get(key)
                shown = "null" if value is None else value  # qk_norm: true, not True
                shown = str(shown).lower() if isinstance(shown, bool) else shown
                raise ConfigError(f"{kind} does not take model.{key}={shown} ({why}); set "
                                  f"model.{key}={fix}")  # fmt: skip


SSM_CONV = Key(4, int, positive, "mamba2, gated_deltanet: kernel of the causal depthwise conv1d")
SSM_EXPAND = Key(2, int, positive, "mamba2: d_inner = ssm_expand·d_model, in model.n_heads "
                 "heads; gated_deltanet: d_v = ssm_expand·d_k")  # fmt: skip


@ATTENTION_KINDS.declare
class Mamba2Config(MixerConfig):
    """Mamba-2's SSD layer, a selective state-space token mixer in the attention slot:
    h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·x_t B_tᵀ, y_t = h_t C_t + D·x_t, chunked for training,
    a constant-size state for decoding (Dao & Gu 2024, "Transformers are SSMs", §6–7)."""

    name, builds = "mamba2", "attnlab.nn.mamba2:Mamba2Mixer"
    keys = {
        "ssm_state": Key(128, int, positive, "mamba2: state size N of each head"),
        "ssm_conv": SSM_CONV,
        "ssm_expand": SSM_EXPAND,
        "ssm_chunk": Key(256, int, positive, "mamba2: tokens per chunk of the SSD "
                         "block decomposition (training and prompts)"),
    }  # fmt: skip


@ATTENTION_KINDS.declare
class GatedDeltaNetConfig(MixerConfig):
    """Gated DeltaNet, a linear-RNN token mixer in the attention slot: the gated delta rule
    S_t = S_{t−1}(α_t(I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ, o_t = S_t q_t, chunked (the WY
    representation) for training, a constant-size state for decoding (Yang et al. 2025,
    "Gated Delta Networks: Improving Mamba2 with Delta Rule", §3)."""

    name, builds = "gated_deltanet", "attnlab.nn.gated_deltanet:GatedDeltaNetMixer"
    refusals = {"n_kv_heads": "its keys and values have one head per query head",
                "qk_norm": "it L2-normalises its queries and keys itself"}  # fmt: skip
    keys = {
        "ssm_conv": SSM_CONV,
        "ssm_expand": SSM_EXPAND,
        "delta_chunk": Key(64, int, positive, "gated_deltanet: tokens per chunk of the "
                           "chunked (WY) form (training and prompts)"),
    }  # fmt: skip


def even_or_null(key: str, value: Any) -> None:
    positive_or_null(key, value)
    if value is not None and value % 2:
        raise ConfigError(f"model.{key}={value} must be even (RoPE rotates pairs), or null")


@ATTENTION_KINDS.declare
class MultiHeadLatentAttentionConfig(AttentionKindConfig):
    """Multi-head latent attention: keys and values up-projected from one latent c_KV = W_DKV·h
    of d_c, plus one shared RoPE key k^R = RoPE(W_KR·h) of d_h^R; decoding keeps only
    [c_KV; k^R] per token (DeepSeek-AI 2024, "DeepSeek-V2", §2.1).

    With a model.pos other than rope there is no decoupled part (no k^R, q^R): the cache
    keeps c_KV only and the positions act as they do for full attention."""

    name, builds, sparse = "mla", "attnlab.nn.latent_attention:LatentSoftmax", False
    # self-attention is this module, not MultiHeadAttention's projections around a kind
    heads = "attnlab.nn.latent_attention:MultiHeadLatentAttention"
    keys = {
        "kv_latent_rank": Key(None, int | None, positive_or_null, "mla: d_c, the rank of the "
                              "joint key/value latent c_KV; null: 4·d_head (DeepSeek-V2's)"),
        "q_latent_rank": Key(None, int | None, positive_or_null, "mla: d_c', the rank of the "
                             "query latent c_Q; null: no query compression"),
        "rope_head_dim": Key(None, int | None, even_or_null, "mla: d_h^R, the decoupled RoPE "
                             "dimensions of each query head and the shared key; null: d_head/2"),
    }  # fmt: skip

    @classmethod
    def sizes(cls, cfg: ModelKeys) -> tuple[int, int | None, int]:
        """(d_c, d_c', d_h^R), the nulls resolved: d_c' None is no query compression, d_h^R
        is 0 without model.pos=rope (no decoupled part)."""
        d_c = cfg.kv_latent_rank if cfg.kv_latent_rank is not None else 4 * cfg.d_head
        d_rope = cfg.rope_head_dim if cfg.rope_head_dim is not None else cfg.d_head // 2
        return d_c, cfg.q_latent_rank, d_rope if cfg.pos == "rope" else 0

    @classmethod
    def rotary_dim(cls, cfg: ModelKeys) -> int:
        """d_h^R: RoPE acts on the decoupled dimensions only (read with model.pos=rope)."""
        return cls.sizes(cfg)[2]

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """Decoupled RoPE with model.pos=rope only (other schemes: no k^R, no q^R)."""
        if cfg.pos != "rope" and cfg.rope_head_dim is not None:
            raise ConfigError(
                f"model.rope_head_dim={cfg.rope_head_dim} sizes MLA's decoupled RoPE key, and "
                f"model.pos={cfg.pos} rotates nothing; set model.pos=rope or "
                "model.rope_head_dim=null"
            )
        if cfg.pos == "rope" and cfg.get("rotary_fraction", 1.0) != 1.0:
            raise ConfigError(
                f"model.rotary_fraction={cfg.rotary_fraction} rotates part of each head, and "
                "model.attention=mla rotates its own decoupled dimensions whole; size them with "
                "model.rope_head_dim and set model.rotary_fraction=1.0"
            )
        if cfg.pos == "rope" and cfg.rope_head_dim is None and (cfg.d_head // 2) % 2:
            raise ConfigError(
                f"model.attention=mla rotates d_head/2 = {cfg.d_head // 2} dimensions by "
                "default, an odd number; set an even model.rope_head_dim"
            )


# model.attention=hybrid --------------------------------------------------------------------
def pattern_rule(key: str, value: Any) -> None:
    """A non-empty list of kinds, each ``name`` or ``name*count`` (count ≥ 1)."""
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(f"model.{key}={value} must be a non-empty list of attention kinds, "
                          "e.g. [sliding_window*5,full]")  # fmt: skip
    for entry in value:
        pattern_entry(key, entry)


def pattern_entry(key: str, entry: Any) -> tuple[str, int]:
    """``"sliding_window*5"`` → ("sliding_window", 5); a kind that is no layer's refused."""
    name, _, count = str(entry).partition("*")
    if count and not (count.isdigit() and int(count) > 0):
        raise ConfigError(f"model.{key} entry {entry} must be a kind or kind*count with a "
                          "count >= 1, e.g. sliding_window*5")  # fmt: skip
    if name == HybridConfig.name or name not in ATTENTION_KINDS:
        kinds = [n for n in ATTENTION_KINDS.names() if n != HybridConfig.name]
        raise ConfigError(f"model.{key} entry {entry} is not an attention kind a layer can "
                          f"have; use one of: {', '.join(kinds)}")  # fmt: skip
    return name, int(count or 1)


def expand_pattern(pattern: Any) -> list[str]:
    """``[sliding_window*5, full]`` → the six kinds, one a layer."""
    return [name for entry in pattern for name, count in [pattern_entry("layer_pattern", entry)]
            for _ in range(count)]  # fmt: skip


def layer_kinds(cfg: ModelKeys, n_layers: int) -> list[str]:
    """The attention kind of each of ``n_layers`` layers: ``model.attention``, or with
    ``hybrid`` the pattern repeated and cut at n_layers (as Gemma 3's ``layer_types``)."""
    if cfg.attention != HybridConfig.name:
        return [cfg.attention] * n_layers
    kinds = expand_pattern(cfg.layer_pattern)
    return [kinds[i % len(kinds)] for i in range(n_layers)]


def reads_window(kind: str) -> bool:
    """A local kind: one whose config reads ``model.window`` (sliding_window, longformer)."""
    return "window" in ATTENTION_KINDS.get(kind).keys


@ATTENTION_KINDS.declare
class HybridConfig(AttentionKindConfig):
    """Each layer its own kind: layer l takes layer_pattern[l mod p] — Gemma 3's five local
    (sliding-window) layers to one global, RoPE θ 10k local and 1M global (Gemma Team 2025,
    "Gemma 3 Technical Report", §2), ModernBERT's global layer every third, local window
    128, θ 10k local and 160k global (Warner et al. 2024, §2.1 "Alternating Attention"),
    or a mixer per layer (Jamba's Mamba and attention layers, Lieber et al. 2024).

    ``layer_pattern`` lists the kinds, ``name*count`` repeating one; each entry is checked as
    ``model.attention`` would be, with the keys of every kind it names. ``rope_theta_local``:
    the RoPE base of the local layers (a kind that reads ``model.window``), ``rope_theta``
    the others'. A decoding cache keeps the last ``window`` keys of a local layer and every
    key of a global one (:mod:`attnlab.inference.caches`)."""

    name, builds = "hybrid", "attnlab.models.stack:LayerPattern"
    # each layer's own kind is checked (a decoder's causality, the soft-cap) and built
    sparse, softcap_ok = False, True
    keys = {
        "layer_pattern": Key(["sliding_window*5", "full"], list[str], pattern_rule,
                             "hybrid: the kind of each layer, repeated to n_layers; "
                             "name*count repeats one (Gemma 3: [sliding_window*5,full])",
                             cite="Gemma Team 2025, Gemma 3 §2; Warner et al. 2024 "
                             "(ModernBERT) §2.1"),
        "rope_theta_local": Key(None, float | None, positive_number_or_null,
                                "hybrid, pos=rope: the RoPE base of the local (windowed) "
                                "layers; null: model.rope_theta (Gemma 3: 10000, rope_theta "
                                "1000000)", cite="Gemma Team 2025, Gemma 3 §2"),
    }  # fmt: skip

    @classmethod
    def also_reads(cls, given: dict[str, Any]) -> list[type[ComponentConfig]]:
        """The kinds the pattern names: their keys are this model's too."""
        pattern = given.get("layer_pattern", cls.keys["layer_pattern"].default)
        if not isinstance(pattern, list | tuple):
            return []  # its type is refused when the keys are checked
        return [ATTENTION_KINDS.get(name) for name in dict.fromkeys(expand_pattern(pattern))]

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """Every kind of the pattern as ``model.attention`` (the rules between components
        and its own check); θ_local with RoPE and a local layer only."""
        kinds = list(dict.fromkeys(expand_pattern(cfg.layer_pattern)))
        for kind in kinds:
            try:  # the whole model as if every layer had this kind
                cfg.replace(attention=kind).validated()  # type: ignore[attr-defined]
            except ConfigError as refusal:
                raise ConfigError(f"model.layer_pattern has {kind}: {refusal}") from None
        if "mla" in kinds and cfg.pos == "rope" and len(kinds) > 1:
            raise ConfigError("model.layer_pattern mixes mla, which rotates its own decoupled "
                              "dimensions, with kinds that rotate whole heads; use "
                              "model.pos=none, or mla in every layer")  # fmt: skip
        theta = cfg.rope_theta_local
        if theta is not None and cfg.pos != "rope":
            raise ConfigError(f"model.rope_theta_local={theta} is a RoPE base and model.pos="
                              f"{cfg.pos} rotates nothing; set model.pos=rope or "
                              "model.rope_theta_local=null")  # fmt: skip
        if theta is not None and not any(reads_window(kind) for kind in kinds):
            raise ConfigError(f"model.rope_theta_local={theta} sets the RoPE base of the local "
                              f"layers and model.layer_pattern={list(cfg.layer_pattern)} has "
                              "none (sliding_window, longformer); add one or set "
                              "model.rope_theta_local=null")  # fmt: skip


# model.attn_impl ---------------------------------------------------------------------------
class AttentionImplConfig(ComponentConfig):
    """Base of ``model.attn_impl``: how ``MultiHeadAttention`` computes its kind
    (:func:`attnlab.nn.kernels.choose_kernel`)."""


ATTN_IMPLS = Family("attn_impl", "how attention is computed", "sdpa", AttentionImplConfig)

# Gemma 2 caps its attention logits at 50; SDPA's fused kernels have no place for the cap
ATTN_SOFTCAP = Key(None, float | None, positive_number_or_null,
                   "attention logits ← c·tanh(logits/c) before the mask and softmax; null: off",
                   cite="Gemma Team 2024, Gemma 2 §2 \"logit soft-capping\", c = 50")  # fmt: skip


@ATTN_IMPLS.declare
class FusedImplConfig(AttentionImplConfig):
    """torch's fused scaled_dot_product_attention (flash / memory-efficient); the sparse kinds
    through FlexAttention on CUDA, their blocked kernels on a CPU."""

    name = "sdpa"


@ATTN_IMPLS.declare
class ExplicitImplConfig(AttentionImplConfig):
    """softmax(QKᵀ/√d_k)V written out (Vaswani et al. 2017, eq. 1); the kinds' references.

    ``attn_softcap`` c: softmax(c·tanh(QKᵀ/(√d_k·c)) + M)V (Gemma 2, §2)."""

    name = "math"
    keys = {"attn_softcap": ATTN_SOFTCAP}


@ATTN_IMPLS.declare
class FlexImplConfig(AttentionImplConfig):
    """FlexAttention for every softmax kind (Dong et al. 2024); trains on CUDA only.

    ``attn_softcap`` c: a ``score_mod`` c·tanh(s/c) on each score s = qᵀk/√d (Gemma 2,
    §2); full attention, decoding steps and attention dropout, which do not take
    FlexAttention, write the capped softmax out."""

    name = "flex"
    keys = {"attn_softcap": ATTN_SOFTCAP}
