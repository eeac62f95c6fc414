"""``model.pos``: how a model knows where a token is (the configs; the modules are in
:mod:`attnlab.nn.positions`)."""

from __future__ import annotations

from typing import Any

from attnlab.components.core import ComponentConfig, Family, Key, ModelKeys, positive_number
from attnlab.errors import ConfigError


class PositionsConfig(ComponentConfig):
    """Base of ``model.pos``: ``cls(d_model, n_heads, max_len, causal)``.

    Where a scheme acts decides which models can take it: ``in_attention`` (it rotates
    queries and keys or adds to the scores: a model without dot-product self-attention
    has nowhere to put it), ``score_bias`` (an additive bias on the full score matrix,
    which a sparse or kernelised attention kind does not have), ``needs_grid`` (it places
    image patches on their grid: ``model=vit``).
    """

    in_attention = False
    score_bias = False
    needs_grid = False

    @classmethod
    def build(cls, cfg: ModelKeys, causal: bool, grid: tuple[int, int] | None = None) -> Any:
        args = (cfg.d_model, cfg.get("n_heads", 1), cfg.max_len, causal)
        return cls.target()(*args, grid=grid) if cls.needs_grid else cls.target()(*args)


POSITIONS = Family("pos", "where a token is", "sinusoidal", PositionsConfig)


@POSITIONS.declare
class NoPositionsConfig(PositionsConfig):
    """No positional information: attention alone sees a bag of tokens (a decoder's causal
    mask still orders them; Haviv et al. 2022)."""

    name, builds = "none", "attnlab.nn.positions:Positions"


class EvenWidth(PositionsConfig):
    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        if cfg.d_model % 2:  # a sin and a cos per frequency
            raise ConfigError(f"model.pos={cfg.pos} needs an even model.d_model")


@POSITIONS.declare
class SinusoidalConfig(EvenWidth):
    """PE(pos, 2i) = sin(pos/10000^(2i/d_model)), PE(pos, 2i+1) = cos(…)  (§3.5)."""

    name, builds = "sinusoidal", "attnlab.nn.positions:SinusoidalPositions"


@POSITIONS.declare
class SinusoidalConcatConfig(EvenWidth):
    """The tensor2tensor layout of §3.5's frequencies: all sines, then all cosines."""

    name, builds = "sinusoidal_concat", "attnlab.nn.positions:SinusoidalConcatPositions"


@POSITIONS.declare
class LearnedConfig(PositionsConfig):
    """A trained embedding per absolute position (BERT, GPT-2): a table of model.max_len."""

    name, builds = "learned", "attnlab.nn.positions:LearnedPositions"


class GridConfig(PositionsConfig):
    needs_grid = True

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        if cfg.d_model % 4:
            raise ConfigError(f"model.pos={cfg.pos}: a 2-D position scheme needs model.d_model "
                              f"divisible by 4, got {cfg.d_model}")  # fmt: skip


@POSITIONS.declare
class Learned2DConfig(GridConfig):
    """Learned row and column embeddings of d_model/2 each, concatenated (Dosovitskiy et al.
    2021, App. D.4); model=vit."""

    name, builds = "learned_2d", "attnlab.nn.positions:Learned2DPositions"


@POSITIONS.declare
class Sinusoidal2DConfig(GridConfig):
    """Fixed 2-D sinusoids: §3.5's encoding of the row and of the column, d_model/2 each (MAE,
    He et al. 2022); model=vit."""

    name, builds = "sinusoidal_2d", "attnlab.nn.positions:Sinusoidal2DPositions"


def fraction(key: str, value: Any) -> None:
    if not 0.0 < float(value) <= 1.0:
        raise ConfigError(f"model.{key}={value} must be in (0, 1] (1: every feature rotates)")


@POSITIONS.declare
class RoPEConfig(PositionsConfig):
    """Rotary position embedding (Su et al. 2021): rotate Q and K of every head by m·θ_i,
    θ_i = rope_theta^(−2i/r) over the first r = ⌊rotary_fraction·d_head⌋ features."""

    name, builds, in_attention = "rope", "attnlab.nn.positions:RotaryPositions", True
    keys = {
        "rope_theta": Key(10000.0, float, positive_number,
                          "the base of θ_i = base^(−2i/r); Llama 3 uses 500000",
                          cite="Su et al. 2021 (RoFormer), eq. 15; Llama's rope_theta"),
        "rotary_fraction": Key(1.0, float, fraction,
                               "rotate only the first ⌊f·d_head⌋ features of each head, the "
                               "rest carry no position",
                               cite="Black et al. 2022 (GPT-NeoX), rotary_pct"),
    }  # fmt: skip

    @classmethod
    def build(cls, cfg: ModelKeys, causal: bool, grid: tuple[int, int] | None = None) -> Any:
        args = (cfg.d_model, cfg.get("n_heads", 1), cfg.max_len, causal)
        return cls.target()(*args, theta=cfg.rope_theta, fraction=cfg.rotary_fraction)

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        if cfg.rotary_fraction == 1.0 and cfg.d_head % 2:  # rotations act on pairs
            raise ConfigError(
                f"model.pos=rope needs an even head size, got d_model/n_heads={cfg.d_head}; "
                "change model.d_model or model.n_heads"
            )
        rotated = int(cfg.d_head * cfg.rotary_fraction)
        if rotated % 2 or rotated == 0:
            raise ConfigError(
                f"model.rotary_fraction={cfg.rotary_fraction} rotates ⌊{cfg.rotary_fraction}·"
                f"{cfg.d_head}⌋ = {rotated} features of each head, and RoPE rotates pairs; "
                "choose a fraction that gives an even number of at least 2"
            )


@POSITIONS.declare
class ALiBiConfig(PositionsConfig):
    """Attention with linear biases: score_ij −= m_h · |i − j| (Press et al. 2022)."""

    name, builds = "alibi", "attnlab.nn.positions:ALiBiPositions"
    in_attention = score_bias = True


@POSITIONS.declare
class T5RelativeConfig(PositionsConfig):
    """Learned scalar bias per head and relative-distance bucket (Raffel et al. 2020, §2.1)."""

    name, builds = "t5_relative", "attnlab.nn.positions:T5RelativePositions"
    in_attention = score_bias = True


@POSITIONS.declare
class XLRelativeConfig(PositionsConfig):
    """Transformer-XL's relative positional attention (Dai et al. 2019, §3.3): content and
    position terms of every query–key pair."""

    name, builds = "xl_relative", "attnlab.nn.positions:XLRelativePositions"
    in_attention = score_bias = True
