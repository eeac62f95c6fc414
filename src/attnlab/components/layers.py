"""The parts of a Transformer layer: residual placement, norm type, feed-forward, block
layout, parametrisation (their configs; the modules are in :mod:`attnlab.nn` and
:mod:`attnlab.models.parametrization`)."""

from __future__ import annotations

from typing import Any

from attnlab.components.core import (
    ComponentConfig,
    Family,
    Key,
    ModelKeys,
    locate,
    positive,
    positive_number,
    positive_or_null,
)
from attnlab.errors import ConfigError


# model.norm --------------------------------------------------------------------------------
class ResidualConfig(ComponentConfig):
    """Base of ``model.norm``: a wrapper R(x, Sublayer) around every sublayer."""

    @classmethod
    def build(cls, cfg: ModelKeys, depth: Any) -> Any:
        """The wrapper of one sublayer in a stack of ``depth`` (``attnlab.nn.norms.StackDepth``)."""
        return cls.target()(cfg.d_model, cfg.norm_type, cfg.dropout, depth)


RESIDUALS = Family("norm", "where the norm sits around each sublayer", "pre", ResidualConfig)


@RESIDUALS.declare
class PostLNConfig(ResidualConfig):
    """LN(x + Dropout(Sublayer(x))) — the original Transformer (Vaswani et al. 2017, §5.4)."""

    name, builds = "post", "attnlab.nn.norms:PostNormResidual"


@RESIDUALS.declare
class PreLNConfig(ResidualConfig):
    """x + Dropout(Sublayer(LN(x))) — an identity path from input to output (Xiong et al. 2020)."""

    name, builds = "pre", "attnlab.nn.norms:PreNormResidual"


@RESIDUALS.declare
class SandwichConfig(ResidualConfig):
    """x + Dropout(LN_out(Sublayer(LN_in(x)))) — CogView's sandwich (Ding et al. 2021), Peri-LN
    (Kim et al. 2025)."""

    name, builds = "sandwich", "attnlab.nn.norms:SandwichNormResidual"


@RESIDUALS.declare
class OLMo2NormConfig(ResidualConfig):
    """x + Dropout(LN(Sublayer(x))) — the norm on the sublayer's output only (OLMo 2, OLMo et
    al. 2025, §3; Swin V2's res-post-norm, Liu et al. 2022)."""

    name, builds = "olmo2", "attnlab.nn.norms:OLMo2NormResidual"


@RESIDUALS.declare
class DeepNormConfig(ResidualConfig):
    """LN(α·x + Dropout(Sublayer(x))): Post-LN with an up-weighted residual (Wang et al. 2022)."""

    name, builds = "deepnorm", "attnlab.nn.norms:DeepNormResidual"

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """DeepNet's init sets the very matrices ``model.zero_init_residual`` zeroes, its gains
        are for attention's W_V and W_O, which a Mamba-2 mixer has not, and for W_Q, W_K,
        W_V, which multi-head latent attention does not have; a token mixer (Mamba-2, Gated
        DeltaNet) has projections of its own that DeepNet's gains were not derived for."""
        if cfg.get("attention") in ("mamba2", "gated_deltanet"):
            raise ConfigError(
                "model.norm=deepnorm initialises attention's W_V and W_O with its gain β (Wang "
                f"et al. 2022) and model.attention={cfg.get('attention')} is a token mixer "
                "without them; use model.norm=pre"
            )
        if cfg.get("zero_init_residual"):
            raise ConfigError(
                "model.zero_init_residual=true zeroes W_O and the FFN's W₂, which "
                "model.norm=deepnorm initialises with its gain β (Wang et al. 2022); use one "
                "of the two"
            )
        if cfg.get("attention") == "mla":
            raise ConfigError(
                "model.norm=deepnorm initialises W_Q, W_K and W_V with its gains (Wang et al. "
                "2022), and model.attention=mla has none; use model.norm=pre or post with mla"
            )


# model.norm_type ---------------------------------------------------------------------------
class NormTypeConfig(ComponentConfig):
    """Base of ``model.norm_type``: any module built as ``cls(width)``."""

    @classmethod
    def build(cls, cfg: ModelKeys, width: int) -> Any:
        return cls.target()(width)


NORM_TYPES = Family("norm_type", "the normalisation layer", "layernorm", NormTypeConfig)


@NORM_TYPES.declare
class LayerNormConfig(NormTypeConfig):
    """LN(x) = g ⊙ (x − μ)/√(σ² + ε) + b (Ba et al. 2016); torch's LayerNorm, ε = 1e-5."""

    name, builds = "layernorm", "torch.nn:LayerNorm"


@NORM_TYPES.declare
class RMSNormConfig(NormTypeConfig):
    """x / RMS(x) · g, RMS(x) = √(mean(x²) + ε)  (Zhang & Sennrich 2019)."""

    name, builds = "rmsnorm", "attnlab.nn.normalization:RMSNorm"


@NORM_TYPES.declare
class DynamicTanhConfig(NormTypeConfig):
    """DyT(x) = γ ⊙ tanh(αx) + β, a learned scalar α from α₀: no normalisation (Zhu et al. 2025)."""

    name, builds = "dyt", "attnlab.nn.normalization:DynamicTanh"
    keys = {"dyt_alpha0": Key(0.5, float, positive_number, "DyT's α at initialisation, in "
                              "every DyT of the model (the paper's default 0.5; its LLMs "
                              "tune it, §7)")}  # fmt: skip


# model.ffn ---------------------------------------------------------------------------------
D_FF = Key(None, int | None, positive_or_null,
           "the hidden width; null: 4·d_model (⅔ of that for a gated unit)")  # fmt: skip


class FeedForwardConfig(ComponentConfig):
    """Base of ``model.ffn``: ``cls(d_model, d_ff, dropout)``. ``gated``: two input maps
    (a GLU), so the default width is ⅔ of 4·d_model and the parameter count stays that of
    the ungated network (Shazeer 2020, §2)."""

    keys = {"d_ff": D_FF}
    gated = False

    @classmethod
    def default_d_ff(cls, d_model: int) -> int:
        return int(2 * 4 * d_model / 3) if cls.gated else 4 * d_model

    @classmethod
    def build(cls, cfg: ModelKeys) -> Any:
        return cls.target()(cfg.d_model, cfg.ff_dim, cfg.dropout)


FEEDFORWARDS = Family("ffn", "the position-wise feed-forward network", "relu",
                      FeedForwardConfig)  # fmt: skip


@FEEDFORWARDS.declare
class ReLUFeedForwardConfig(FeedForwardConfig):
    """FFN(x) = max(0, xW₁ + b₁)W₂ + b₂ (Vaswani et al. 2017, eq. 2)."""

    name, builds = "relu", "attnlab.nn.feedforward:FeedForward"


@FEEDFORWARDS.declare
class GELUFeedForwardConfig(FeedForwardConfig):
    """FFN with the Gaussian error linear unit, exact (Hendrycks & Gimpel 2016)."""

    name, builds = "gelu", "attnlab.nn.feedforward:GELUFeedForward"


@FEEDFORWARDS.declare
class GELUTanhFeedForwardConfig(FeedForwardConfig):
    """FFN with GELU's tanh approximation, GPT-2's and BERT's ``gelu`` (``ffn=gelu`` is exact)."""

    name, builds = "gelu_tanh", "attnlab.nn.feedforward:GELUTanhFeedForward"


@FEEDFORWARDS.declare
class ReLUSquaredFeedForwardConfig(FeedForwardConfig):
    """FFN(x) = max(0, xW₁ + b₁)²W₂ + b₂: Primer's squared ReLU (So et al. 2021, §3)."""

    name, builds = "relu2", "attnlab.nn.feedforward:ReLUSquaredFeedForward"


@FEEDFORWARDS.declare
class SwiGLUConfig(FeedForwardConfig):
    """(Swish(xW₁) ⊙ xV)W₂: a gated linear unit with a Swish gate (Shazeer 2020)."""

    name, builds, gated = "swiglu", "attnlab.nn.feedforward:SwiGLU", True


@FEEDFORWARDS.declare
class GEGLUConfig(FeedForwardConfig):
    """(GELU(xW₁) ⊙ xV)W₂: a gated linear unit with a GELU gate, tanh form (Shazeer 2020, §2)."""

    name, builds, gated = "geglu", "attnlab.nn.feedforward:GEGLU", True


# model.block -------------------------------------------------------------------------------
class BlockConfig(ComponentConfig):
    """Base of ``model.block``: how one layer arranges its sublayers."""

    @classmethod
    def build(cls, cfg: ModelKeys, causal: bool, cross: bool, depth: Any) -> Any:
        raise NotImplementedError


BLOCKS = Family("block", "how a layer arranges its sublayers", "sequential", BlockConfig)


@BLOCKS.declare
class SequentialBlockConfig(BlockConfig):
    """x + Attn(LN(x)), then x + FFN(LN(x)): one sublayer after the other (§3.1)."""

    name = "sequential"

    @classmethod
    def build(cls, cfg: ModelKeys, causal: bool, cross: bool, depth: Any) -> Any:
        if causal:
            return locate("attnlab.nn.layers:DecoderLayer")(cfg, cross, depth)
        return locate("attnlab.nn.layers:EncoderLayer")(cfg, depth)


@BLOCKS.declare
class ParallelBlockConfig(BlockConfig):
    """x + Attn(LN(x)) + FFN(LN(x)) (GPT-J; Chowdhery et al. 2022, §2); one Pre-LN norm."""

    name, builds = "parallel", "attnlab.nn.layers:ParallelLayer"

    @classmethod
    def build(cls, cfg: ModelKeys, causal: bool, cross: bool, depth: Any) -> Any:
        return cls.target()(cfg, causal)


# model.param -------------------------------------------------------------------------------
class ParametrizationConfig(ComponentConfig):
    """Base of ``model.param``: how widths set initialisation, multipliers and learning rates."""

    @classmethod
    def apply(cls, model: Any, cfg: ModelKeys) -> None:
        """Turn a freshly built model into this parametrisation (SP: as built)."""


PARAMETRIZATIONS = Family("param", "the parametrisation", "sp", ParametrizationConfig)


@PARAMETRIZATIONS.declare
class StandardParametrizationConfig(ParametrizationConfig):
    """The standard parametrisation: one learning rate, model.init's initialisation."""

    name = "sp"


@PARAMETRIZATIONS.declare
class MaximalUpdateConfig(ParametrizationConfig):
    """μP (Yang et al. 2022): learning rates, init and multipliers scaled from a base width."""

    name, builds = "mup", "attnlab.models.parametrization:apply_mup"
    keys = {
        "mup_base_width": Key(64, int, positive, "the width at which μP (its multipliers at "
                              "1) equals SP; every other width's rates, init and "
                              "multipliers scale from it"),
        "mup_output_mult": Key(1.0, float, positive_number, "α_output: the readout's "
                               "multiplier at the base width (Tensor Programs V, Fig. 4)"),
        "mup_attn_mult": Key(1.0, float, positive_number, "α_attn: the attention logits' "
                             "multiplier at the base width (Tensor Programs V's attention "
                             "temperature)"),
    }  # fmt: skip

    @classmethod
    def apply(cls, model: Any, cfg: ModelKeys) -> None:
        cls.target()(model, cfg)

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """The model at the base width must exist: heads that divide it, pairs RoPE rotates."""
        if cfg.mup_base_width % cfg.n_heads:
            raise ConfigError(
                f"model.mup_base_width={cfg.mup_base_width} is not divisible by "
                f"model.n_heads={cfg.n_heads}; choose a base width with mup_base_width % "
                "n_heads == 0"
            )
        head_size = cfg.mup_base_width // cfg.n_heads
        if cfg.pos == "rope" and head_size % 2:
            raise ConfigError(
                f"model.mup_base_width={cfg.mup_base_width} gives heads of {head_size}, which "
                "RoPE cannot rotate in pairs; choose a base width whose head size is even"
            )
