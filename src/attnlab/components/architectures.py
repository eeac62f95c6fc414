"""``model=…``: each architecture's config — the keys it reads itself, the parts it always
has, the families it chooses from, and how each task feeds it (the modules are in
:mod:`attnlab.models`)."""

from __future__ import annotations

from typing import Any, ClassVar

from attnlab.components.attention import MultiHeadAttentionConfig
from attnlab.components.core import (
    ComponentConfig,
    Family,
    Key,
    ModelKeys,
    at_least_zero,
    one_of,
    positive,
    positive_number_or_null,
    positive_or_null,
    probability,
)
from attnlab.components.feeding import Feeding
from attnlab.errors import ConfigError

INITS = ("paper", "xavier", "gpt2")
TIE_OPTIONS = {True: "all", False: "none", "all": "all", "none": "none", "output": "output"}


def tie_option(key: str, value: Any) -> None:
    if isinstance(value, bool | str) and value in TIE_OPTIONS:
        return
    raise ConfigError(f"model.{key}={value} is not valid; use true (all), output, or false")


# keys more than one part reads
D_MODEL = Key(64, int, positive, "model width; the hidden size of model=rnn")
N_LAYERS = Key(2, int, positive, "layers in each stack")
DROPOUT = Key(0.1, float, probability, "dropout on embeddings and sublayer outputs")
MAX_LEN = Key(512, int, positive, "the longest sequence (a learned table's size)")
PAD_ID = Key(0, int, None, "the padding token's id")
TIE = Key(True, Any, tie_option, "true: embeddings + output projection (+ source side if "
          "shared) | output | false")  # fmt: skip
INIT = Key("paper", str, one_of(*INITS), "paper | xavier | gpt2")
COMPILE = Key(False, bool, None, "torch.compile the model")
POOL = Key(None, str | None, None, "classification pooling; null: the architecture's own")
VOCAB_SIZE = Key(0, int, at_least_zero, "filled in from the data")
N_ENCODER_LAYERS = Key(None, int | None, positive_or_null, "layers of the encoder; null: "
                       "n_layers")  # fmt: skip
N_DECODER_LAYERS = Key(None, int | None, positive_or_null, "layers of the decoder; null: "
                       "n_layers")  # fmt: skip
FROM_DATA = ("vocab_size", "image_size", "channels", "patch_size")  # never set by a user


class TransformerStackConfig(ComponentConfig):
    """Embed, add positions, dropout, N layers, final norm: a stack of Transformer layers
    (Vaswani et al. 2017, §3.1)."""

    name = "Transformer stack"
    keys = {
        "n_layers": N_LAYERS, "dropout": DROPOUT, "max_len": MAX_LEN,
        "embed_norm": Key(False, bool, None, "a norm over token + position embeddings, before "
                          "dropout (BERT)"),
        "bias": Key(True, bool, None, "false: no biases in the layers' linear maps and norms "
                    "(PaLM §2, nanoGPT)"),
        "init": INIT,
        "zero_init_residual": Key(False, bool, None, "true: every sublayer's output projection "
                                  "(W_O, the FFN's W₂) starts at zero, so each sublayer starts "
                                  "adding nothing (modded-nanogpt; Fixup, Zhang et al. 2019)"),
        "activation_checkpointing": Key(False, bool, None, "recompute each layer's activations "
                                        "in the backward pass"),
    }  # fmt: skip


class TokenEmbeddingConfig(ComponentConfig):
    """Token embeddings × √d_model (§3.4), shared with the output projection (§3.4)."""

    name = "token embeddings"
    keys = {
        "vocab_size": VOCAB_SIZE, "pad_id": PAD_ID, "tie_embeddings": TIE,
        "scale_embeddings": Key(True, bool, None, "token embeddings × √d_model (§3.4)"),
    }  # fmt: skip


class LMHeadConfig(ComponentConfig):
    """logits = x W_outᵀ, the pre-softmax linear transformation (§3.4); with
    ``final_softcap`` c, logits ← c·tanh(logits/c) (Gemma Team 2024, Gemma 2 §2 "logit
    soft-capping", c = 30), in the training loss and in generation alike."""

    name = "LM head"
    keys = {
        "final_softcap": Key(None, float | None, positive_number_or_null,
                             "LM-head logits ← c·tanh(logits/c); null: off; lm and seq2seq data",
                             cite="Gemma Team 2024, Gemma 2 §2 \"logit soft-capping\", c = 30"),
    }  # fmt: skip


class ArchitectureConfig(ComponentConfig):
    """Base of ``model=…``: ``cls(cfg, task)``.

    ``parts``: the components it always has; ``families``: the keys whose values choose its
    other components (``model.norm``, …); ``defaults``: its own defaults for keys it reads,
    where they differ from the keys' (a ViT's positions are learned); ``feeding``: how each
    task feeds it. ``causal``: it has causal self-attention (a decoder); ``takes_documents``:
    attention can stay within documents (``data.document_mask``); ``patch_grid``: its inputs
    are image patches on a grid (2-D positions apply).
    """

    parts: ClassVar[tuple[type[ComponentConfig], ...]] = ()
    families: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict[str, Any]] = {}
    feeding: ClassVar[Feeding] = Feeding()
    causal = takes_documents = patch_grid = False

    @classmethod
    def build(cls, cfg: ModelKeys, task: str) -> Any:
        return cls.target()(cfg, task)

    @classmethod
    def check_lengths(cls, cfg: ModelKeys, longest: int, what: str = "the data") -> None:
        """Raise ConfigError for sizes that the data's ``longest`` sequence makes pointless
        (checked before the model is built); nothing by default."""

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        pools = cls.feeding.pools
        if cfg.pool is not None and cfg.pool not in pools:
            if not pools:
                raise ConfigError(f"model.pool={cfg.pool} does not apply to model={cls.name}; "
                                  "remove it")  # fmt: skip
            raise ConfigError(f"model.pool={cfg.pool} is not valid for model={cls.name}; use one "
                              f"of: {', '.join(pools)}")  # fmt: skip


ARCHITECTURES = Family("name", "the architecture", "encoder_decoder", ArchitectureConfig)

TRANSFORMER_FAMILIES = ("norm", "norm_type", "pos", "ffn", "attention", "attn_impl", "block",
                        "param")  # fmt: skip
OWN = {"d_model": D_MODEL, "compile": COMPILE, "pool": POOL}


class TransformerConfig(ArchitectureConfig):
    """Base of the three Transformer architectures (Vaswani et al. 2017, Fig. 1)."""

    parts = (TransformerStackConfig, MultiHeadAttentionConfig, TokenEmbeddingConfig, LMHeadConfig)
    families = TRANSFORMER_FAMILIES
    keys = OWN


@ARCHITECTURES.declare
class EncoderOnlyConfig(TransformerConfig):
    """A bidirectional encoder; every position sees every other (BERT, Devlin et al. 2019)."""

    name, builds, takes_documents = "encoder_only", "attnlab.models.transformer:EncoderOnly", True
    feeding = Feeding(
        lm="masked",
        classification="mean",
        pools=("mean",),
        refusals={
            "seq2seq": "an encoder-only model cannot generate a target sequence; "
            "use model=decoder_only or model=encoder_decoder",
        },
    )


@ARCHITECTURES.declare
class DecoderOnlyConfig(TransformerConfig):
    """A causal decoder without cross-attention (GPT, Radford et al. 2018); prefix-LM optional."""

    name, builds = "decoder_only", "attnlab.models.transformer:DecoderOnly"
    causal = takes_documents = True
    keys = {**OWN, "prefix_lm": Key(False, bool, None, "seq2seq and classification: "
                                    "bidirectional attention over the input (Raffel et al. "
                                    "2020, §3.2.1)")}  # fmt: skip
    feeding = Feeding(
        seq2seq="source_sep_target", lm="causal", classification="last", pools=("last", "mean")
    )


@ARCHITECTURES.declare
class EncoderDecoderConfig(TransformerConfig):
    """Encoder over the source; decoder over the shifted target with cross-attention
    (Vaswani et al. 2017, §3.1)."""

    name, builds, causal = "encoder_decoder", "attnlab.models.transformer:EncoderDecoder", True
    keys = {**OWN, "n_encoder_layers": N_ENCODER_LAYERS, "n_decoder_layers": N_DECODER_LAYERS}
    feeding = Feeding(
        seq2seq="teacher_forcing",
        classification="decoder_start",
        pools=("decoder_start", "mean"),
        refusals={
            "lm": "language modelling has no source sequence for an encoder; "
            "use model=decoder_only (causal LM) or model=encoder_only (masked LM)",
        },
    )


IMAGE = "filled in from the image data"


@ARCHITECTURES.declare
class VisionTransformerConfig(ArchitectureConfig):
    """An encoder over image patches with a [CLS] token (Dosovitskiy et al. 2021, eq. 1–4)."""

    name, builds, patch_grid = "vit", "attnlab.models.vit:VisionTransformer", True
    parts = (TransformerStackConfig, MultiHeadAttentionConfig)
    families = TRANSFORMER_FAMILIES
    keys = {**OWN, "image_size": Key(0, int, at_least_zero, IMAGE),
            "channels": Key(0, int, at_least_zero, IMAGE),
            "patch_size": Key(0, int, at_least_zero, IMAGE)}  # fmt: skip
    defaults = {"n_layers": 4, "pos": "learned", "ffn": "gelu"}  # the paper's 1-D table, GELU
    feeding = Feeding(
        image_classification="cls",
        pools=("cls", "mean"),
        refusals={
            task: "the Vision Transformer reads images; use data=digits or data=images, or "
            "model=encoder_only for token sequences"
            for task in ("seq2seq", "lm", "classification")
        },
    )


CELLS = ("lstm", "gru", "rnn")
RNN_ATTENTIONS = ("bahdanau", "luong_dot", "luong_general", "none")


@ARCHITECTURES.declare
class RecurrentConfig(ArchitectureConfig):
    """LSTM/GRU/RNN with Bahdanau or Luong attention (2015), RNN LM, RNN classifier."""

    name, builds = "rnn", "attnlab.models.recurrent:RecurrentModel"
    keys = {
        "d_model": D_MODEL, "n_layers": N_LAYERS, "n_encoder_layers": N_ENCODER_LAYERS,
        "n_decoder_layers": N_DECODER_LAYERS, "dropout": DROPOUT, "vocab_size": VOCAB_SIZE,
        "pad_id": PAD_ID, "tie_embeddings": TIE, "init": INIT, "compile": COMPILE, "pool": POOL,
        "cell": Key("lstm", str, one_of(*CELLS), "lstm | gru | rnn (torch.nn.LSTM, GRU, RNN)"),
        "rnn_attention": Key("bahdanau", str, one_of(*RNN_ATTENTIONS),
                             "bahdanau | luong_dot | luong_general | none"),
        "input_feeding": Key(False, bool, None, "luong_*: feed the attentional vector to the "
                             "next step (Luong et al. 2015, §3.3)"),
        "bidirectional": Key(True, bool, None, "the encoder reads the source both ways"),
    }  # fmt: skip
    defaults = {"d_model": 256}
    feeding = Feeding(
        seq2seq="teacher_forcing", lm="causal", classification="last",
        pools=("last", "attention", "mean"),
    )  # fmt: skip

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        super().check(cfg)
        if cfg.input_feeding and not cfg.rnn_attention.startswith("luong"):
            raise ConfigError(
                "model.input_feeding=true is Luong's (§3.3); use model.rnn_attention=luong_dot "
                "or luong_general"
            )
        if cfg.encoder_layers != cfg.decoder_layers:
            raise ConfigError(
                f"model.n_encoder_layers={cfg.encoder_layers} and model.n_decoder_layers="
                f"{cfg.decoder_layers} differ; model=rnn starts each decoder layer from the same "
                "encoder layer's final state: make them equal"
            )


@ARCHITECTURES.declare
class ConvolutionalConfig(ArchitectureConfig):
    """ConvS2S (Gehring et al. 2017), the gated convolutional LM (Dauphin et al. 2017)."""

    name, builds = "conv", "attnlab.models.convolutional:ConvSeq2Seq"
    families = ("pos",)
    keys = {
        "d_model": D_MODEL, "n_layers": N_LAYERS, "n_encoder_layers": N_ENCODER_LAYERS,
        "n_decoder_layers": N_DECODER_LAYERS, "dropout": DROPOUT, "max_len": MAX_LEN,
        "vocab_size": VOCAB_SIZE, "pad_id": PAD_ID, "tie_embeddings": TIE, "compile": COMPILE,
        "pool": POOL,
        "kernel_size": Key(3, int, positive, "each convolution's width k"),
        "conv_channels": Key(None, int | None, positive_or_null,
                             "the convolution blocks' width; null: d_model"),
    }  # fmt: skip
    defaults = {"d_model": 256, "pos": "learned"}  # f; positions added to the embeddings (§3.1)
    feeding = Feeding(
        seq2seq="teacher_forcing", lm="causal", classification="mean", pools=("mean", "max"),
    )  # fmt: skip

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        super().check(cfg)
        cls.check_lengths(cfg, cfg.max_len, "model.max_len")

    @classmethod
    def check_lengths(cls, cfg: ModelKeys, longest: int, what: str = "the data") -> None:
        """A convolution wider than the longest sequence it reads has taps that only ever
        multiply padding: weights (2C·C a tap, per layer) that no token reaches."""
        if cfg.kernel_size > longest:
            raise ConfigError(
                f"model.kernel_size={cfg.kernel_size} is wider than the longest sequence "
                f"({what}: {longest} tokens), so its taps past that read only padding; use "
                f"model.kernel_size<={longest} (the paper's is 3 to 5)"
            )


def check_compatible(architecture: str, task: str, prefix_lm: bool = False) -> None:
    """Raise ConfigError for an architecture/task pair its feeding declaration does not serve."""
    feeding = ARCHITECTURES.get(architecture).feeding  # type: ignore[attr-defined]
    if not feeding.serves(task):
        raise ConfigError(
            f"model={architecture} does not fit a {task} data set: {feeding.refusal(task)}"
        )
    if prefix_lm and task == "lm":
        raise ConfigError(
            "model.prefix_lm=true attends bidirectionally over an input, and language-modelling "
            "data has none; use it with seq2seq or classification data, or remove it"
        )
