"""The model configuration (``conf/model/*.yaml``): one object, passed whole to every part.

It needs no torch. Each key declares its own rule (``rule``) next to its default; the
registry-backed keys are read against :mod:`attnlab.catalog`; what involves a component's
equations (a head size RoPE can rotate, the norm a parallel block shares, the biases a
sparse pattern cannot take) is checked by the component itself, through the
architecture's ``check`` (:meth:`attnlab.models.interface.Architecture.check`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from attnlab.catalog import MODEL_KEYS, locate, registry
from attnlab.errors import ConfigError

ATTN_IMPLS = ("sdpa", "math", "flex")  # flex: the sparse kinds through FlexAttention
INITS = ("paper", "xavier", "gpt2")
TIE_OPTIONS = {True: "all", False: "none", "all": "all", "none": "none", "output": "output"}
BLOCKS = ("sequential", "parallel")
CELLS = ("lstm", "gru", "rnn")  # model=rnn: torch.nn.LSTM / GRU / RNN (tanh)
RNN_ATTENTIONS = ("bahdanau", "luong_dot", "luong_general", "none")
PARAMETRIZATIONS = ("sp", "mup")  # model.param

Rule = Callable[[str, Any], None]  # (key, value): raise ConfigError naming both


def positive(key: str, value: Any) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"model.{key}={value} must be a positive integer")


def positive_or_null(key: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or value <= 0):
        raise ConfigError(f"model.{key}={value} must be a positive integer (or null)")


def at_least_zero(key: str, value: Any) -> None:
    if not isinstance(value, int) or value < 0:
        raise ConfigError(f"model.{key}={value} must be an integer >= 0")


def non_negative(key: str, value: Any) -> None:
    if not isinstance(value, int) or value < 0:
        raise ConfigError(f"model.{key}={value} must be a non-negative integer")


def probability(key: str, value: Any) -> None:
    if not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"model.{key}={value} must be in [0, 1)")


def one_of(*allowed: Any) -> Rule:
    def check(key: str, value: Any) -> None:
        if value not in allowed:
            choices = ", ".join(str(a) for a in allowed)
            raise ConfigError(f"model.{key}={value} is not valid; use one of: {choices}")

    return check


def tie_option(key: str, value: Any) -> None:
    if value not in TIE_OPTIONS:
        raise ConfigError(f"model.{key}={value} is not valid; use true (all), output, or false")


def rule(default: Any, check: Rule) -> Any:
    """A key with a default and the rule its value must meet."""
    return field(default=default, metadata={"rule": check})


@dataclass
class ModelConfig:
    """Every architecture accepts every key; see docs/design.md, "Model keys".

    The defaults are those of ``conf/model/_base.yaml`` (a test compares them). The
    registry-backed keys (``name``, ``norm``, ``norm_type``, ``pos``, ``ffn``,
    ``attention``) take any name of :mod:`attnlab.catalog` or one registered at run time.
    """

    name: str = "encoder_decoder"
    vocab_size: int = 0  # filled in from the data module
    d_model: int = rule(64, positive)
    n_heads: int = rule(4, positive)
    d_ff: int | None = rule(None, positive_or_null)  # None: 4·d_model (⅔ of that gated)
    n_layers: int = rule(2, positive)
    n_encoder_layers: int | None = rule(None, positive_or_null)  # encoder_decoder; None: n_layers
    n_decoder_layers: int | None = rule(None, positive_or_null)
    dropout: float = rule(0.1, probability)
    attn_dropout: float = rule(0.0, probability)
    norm: str = "pre"
    norm_type: str = "layernorm"
    pos: str = "sinusoidal"
    ffn: str = "relu"
    attn_impl: str = rule("sdpa", one_of(*ATTN_IMPLS))
    max_len: int = rule(512, positive)
    tie_embeddings: bool | str = rule(True, tie_option)  # true/"all", "output", false/"none"
    scale_embeddings: bool = True  # token embeddings × √d_model (§3.4)
    embed_norm: bool = False  # a norm over token + position embeddings (BERT)
    bias: bool = True  # false: no biases in the Transformer layers' linear maps and norms
    init: str = rule("paper", one_of(*INITS))
    prefix_lm: bool = False  # decoder_only seq2seq: bidirectional attention over the source
    pad_id: int = 0
    compile: bool = False
    activation_checkpointing: bool = False
    n_kv_heads: int | None = None  # grouped-query attention; 1: multi-query; None: n_heads
    qk_norm: bool = False  # normalise queries and keys per head (Dehghani et al. 2023)
    block: str = rule("sequential", one_of(*BLOCKS))  # parallel: GPT-J / PaLM, attention ∥ FFN
    attention: str = "full"  # model.attention: full | sliding_window | longformer | bigbird | …
    window: int = rule(256, positive)  # sliding_window, longformer: w
    n_global: int = rule(1, positive)  # longformer: global tokens at the start
    attn_block: int = rule(64, positive)  # query block of the sparse kernels; bigbird's block
    n_random: int = rule(2, at_least_zero)  # bigbird: random key blocks per query block
    linformer_k: int = rule(256, positive)  # linformer: keys and values projected to k rows
    pool: str | None = None  # classification pooling; None: the architecture's default
    # model=vit: filled in from the image data module (data.image_size, channels, patch_size)
    image_size: int = rule(0, non_negative)
    channels: int = rule(0, non_negative)
    patch_size: int = rule(0, non_negative)
    # model=rnn: the recurrent baselines (Bahdanau et al. 2015; Luong et al. 2015)
    cell: str = rule("lstm", one_of(*CELLS))
    rnn_attention: str = rule("bahdanau", one_of(*RNN_ATTENTIONS))
    input_feeding: bool = False  # Luong §3.3: feed the attentional vector to the next step
    bidirectional: bool = True  # the encoder reads the source both ways
    # model=conv: ConvS2S (Gehring et al. 2017) and the gated convolutional LM
    kernel_size: int = rule(3, positive)  # k: each convolution's width
    conv_channels: int | None = rule(None, positive_or_null)  # the blocks' width; None: d_model
    # the parametrisation (attnlab.models.parametrization): sp, or μP (Yang et al. 2022)
    # relative to the model at d_model = mup_base_width
    param: str = rule("sp", one_of(*PARAMETRIZATIONS))
    mup_base_width: int = rule(64, positive)

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

    def with_data(self, values: dict[str, Any]) -> ModelConfig:
        """This (validated) config with the keys only the data knows (``vocab_size``, an
        image data module's sizes), each checked by its own rule."""
        unknown = sorted(set(values) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigError(f"model.{unknown[0]} is not a model key; remove it")
        filled = replace(self, **values)
        for f in fields(filled):
            if f.name in values and "rule" in f.metadata:
                f.metadata["rule"](f.name, values[f.name])
        return filled

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def encoder_layers(self) -> int:
        return self.n_encoder_layers or self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers or self.n_layers

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or locate("attnlab.nn.feedforward:default_d_ff")(self.ffn, self.d_model)

    @property
    def tie(self) -> str:
        return TIE_OPTIONS[self.tie_embeddings]

    def validated(self) -> ModelConfig:
        """Raise ConfigError naming the key and the fix for any invalid value: each key's
        rule, the registries' names, then the architecture's check of what it builds."""
        for f in fields(self):
            if "rule" in f.metadata:
                f.metadata["rule"](f.name, getattr(self, f.name))
        for key, attribute in MODEL_KEYS.items():
            registry(key).get(getattr(self, attribute))
        registry("model").get(self.name).check(self)
        return self
