"""The model configuration (``conf/model/*.yaml``) and its up-front validation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from attnlab.errors import ConfigError
from attnlab.nn.attention import ATTN_IMPLS
from attnlab.nn.feedforward import FEEDFORWARDS, default_d_ff
from attnlab.nn.norms import NORM_TYPES, RESIDUALS
from attnlab.nn.positions import POSITIONS

INITS = ("paper", "xavier", "gpt2")
TIE_OPTIONS = {True: "all", False: "none", "all": "all", "none": "none", "output": "output"}
BLOCKS = ("sequential", "parallel")
CELLS = ("lstm", "gru", "rnn")  # model=rnn: torch.nn.LSTM / GRU / RNN (tanh)
RNN_ATTENTIONS = ("bahdanau", "luong_dot", "luong_general", "none")


@dataclass
class ModelConfig:
    """Every architecture accepts every key; see docs/design.md, "Model keys".

    The defaults are those of ``conf/model/_base.yaml`` (a test compares them).
    """

    name: str = "encoder_decoder"
    vocab_size: int = 0  # filled in from the data module
    d_model: int = 64
    n_heads: int = 4
    d_ff: int | None = None  # None: 4·d_model (⅔ of that for swiglu)
    n_layers: int = 2
    n_encoder_layers: int | None = None  # encoder_decoder only; None: n_layers
    n_decoder_layers: int | None = None
    dropout: float = 0.1
    attn_dropout: float = 0.0
    norm: str = "pre"
    norm_type: str = "layernorm"
    pos: str = "sinusoidal"
    ffn: str = "relu"
    attn_impl: str = "sdpa"
    max_len: int = 512
    tie_embeddings: bool | str = True  # true/"all", "output", false/"none"
    scale_embeddings: bool = True  # token embeddings × √d_model (§3.4)
    init: str = "paper"
    prefix_lm: bool = False  # decoder_only seq2seq: bidirectional attention over the source
    pad_id: int = 0
    compile: bool = False
    activation_checkpointing: bool = False
    n_kv_heads: int | None = None  # grouped-query attention; 1: multi-query; None: n_heads
    qk_norm: bool = False  # normalise queries and keys per head (Dehghani et al. 2023)
    block: str = "sequential"  # sequential | parallel (GPT-J / PaLM: attention ∥ FFN)
    attention: str = "full"  # model.attention: full | sliding_window | longformer | bigbird | …
    window: int = 256  # sliding_window, longformer: w
    n_global: int = 1  # longformer: global tokens at the start
    attn_block: int = 64  # query block of the sparse kernels; bigbird's block size
    n_random: int = 2  # bigbird: random key blocks per query block
    linformer_k: int = 256  # linformer: keys and values projected to k rows
    pool: str | None = None  # classification pooling; None: the architecture's default
    # model=vit: filled in from the image data module (data.image_size, channels, patch_size)
    image_size: int = 0
    channels: int = 0
    patch_size: int = 0
    # model=rnn: the recurrent baselines (Bahdanau et al. 2015; Luong et al. 2015)
    cell: str = "lstm"
    rnn_attention: str = "bahdanau"
    input_feeding: bool = False  # Luong §3.3: feed the attentional vector to the next step
    bidirectional: bool = True  # the encoder reads the source both ways

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"model.{unknown[0]} is not a model key; remove it or use one of: "
                f"{', '.join(sorted(known))}"
            )
        return cls(**values).validated()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def encoder_layers(self) -> int:
        return self.n_encoder_layers or self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers or self.n_layers

    @property
    def ff_dim(self) -> int:
        return self.d_ff or default_d_ff(self.ffn, self.d_model)

    @property
    def tie(self) -> str:
        return TIE_OPTIONS[self.tie_embeddings]

    def validated(self) -> ModelConfig:
        """Raise ConfigError naming the key and the fix for any invalid value."""

        def one_of(key: str, value: Any, allowed: Any) -> None:
            if value not in allowed:
                choices = ", ".join(str(a) for a in allowed)
                raise ConfigError(f"model.{key}={value} is not valid; use one of: {choices}")

        from attnlab.models import ARCHITECTURES  # the registry: every model module registered

        architecture = ARCHITECTURES.get(self.name)
        RESIDUALS.get(self.norm)
        NORM_TYPES.get(self.norm_type)
        POSITIONS.get(self.pos)
        FEEDFORWARDS.get(self.ffn)
        one_of("attn_impl", self.attn_impl, ATTN_IMPLS)
        one_of("init", self.init, INITS)
        one_of("block", self.block, BLOCKS)
        from attnlab.nn.attention_kinds import ATTENTION_KINDS

        ATTENTION_KINDS.get(self.attention)
        for key in ("window", "n_global", "attn_block", "linformer_k"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"model.{key}={value} must be a positive integer")
        if not isinstance(self.n_random, int) or self.n_random < 0:
            raise ConfigError(f"model.n_random={self.n_random} must be an integer >= 0")
        one_of("cell", self.cell, CELLS)
        one_of("rnn_attention", self.rnn_attention, RNN_ATTENTIONS)
        if self.tie_embeddings not in TIE_OPTIONS:
            raise ConfigError(
                f"model.tie_embeddings={self.tie_embeddings} is not valid; "
                "use true (all), output, or false"
            )
        for key in ("d_model", "n_heads", "n_layers", "max_len"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"model.{key}={value} must be a positive integer")
        for key in ("image_size", "channels", "patch_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"model.{key}={value} must be a non-negative integer")
        for key in ("d_ff", "n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(f"model.{key}={value} must be a positive integer (or null)")
        for key in ("dropout", "attn_dropout"):
            value = getattr(self, key)
            if not 0.0 <= float(value) < 1.0:
                raise ConfigError(f"model.{key}={value} must be in [0, 1)")
        if architecture.attention_heads:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"model.d_model={self.d_model} is not divisible by "
                    f"model.n_heads={self.n_heads}; choose sizes with d_model % n_heads == 0"
                )
            d_head = self.d_model // self.n_heads
            if self.pos == "rope" and d_head % 2:
                raise ConfigError(
                    f"model.pos=rope needs an even head size, got d_model/n_heads={d_head}; "
                    "change model.d_model or model.n_heads"
                )
            if self.pos in ("sinusoidal", "sinusoidal_concat") and self.d_model % 2:
                raise ConfigError(f"model.pos={self.pos} needs an even model.d_model")
        if self.n_kv_heads is not None and (
            not isinstance(self.n_kv_heads, int) or self.n_kv_heads <= 0
            or self.n_heads % self.n_kv_heads
        ):  # fmt: skip
            raise ConfigError(
                f"model.n_kv_heads={self.n_kv_heads} must divide model.n_heads={self.n_heads} "
                "(1: multi-query attention; null: one K/V head per query head)"
            )
        if self.block == "parallel" and self.norm != "pre":
            raise ConfigError(
                f"model.block=parallel shares one Pre-LN norm between attention and the FFN "
                f"(GPT-J, PaLM); it cannot be combined with model.norm={self.norm}: use "
                "model.norm=pre or model.block=sequential"
            )
        if self.block == "parallel" and self.name == "encoder_decoder":
            raise ConfigError(
                "model.block=parallel has no place for cross-attention; use it with "
                "model=decoder_only, encoder_only or vit, or model.block=sequential"
            )
        if self.attention != "full":
            if self.pos in ("alibi", "t5_relative", "xl_relative"):
                raise ConfigError(
                    f"model.attention={self.attention} builds its own sparse or kernelised "
                    f"pattern and takes no additive position bias (model.pos={self.pos}); use "
                    "model.pos=rope, sinusoidal, learned or none"
                )
            if self.prefix_lm:
                raise ConfigError(
                    f"model.attention={self.attention} has no prefix-LM pattern; use "
                    "model.prefix_lm=false or model.attention=full"
                )
        if self.prefix_lm and self.name != "decoder_only":
            raise ConfigError("model.prefix_lm=true applies to model=decoder_only only; remove it")
        architecture.check(self)
        return self
