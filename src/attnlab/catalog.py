"""Where every built-in name of every registry lives: the table a config value is read against.

A built-in variant is one class and one line here, ``"name": "module:Class"``, in the
entry of the config key it is a value of. The table needs no import, so a misspelt
``model.*`` value is refused before torch is loaded; the class is imported the first
time its name is looked up (:class:`attnlab.registry.Registry`). Names registered at
run time with ``@REGISTRY.register("name")`` (a notebook, a test, code outside attnlab)
join these in the same registry. ``tests/test_startup.py`` checks that every line
imports to the class it names and that the table names every built-in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One registry: the ``module:VARIABLE`` that holds it, and its built-in names."""

    registry: str
    names: dict[str, str]


CATALOG: dict[str, Entry] = {
    "model": Entry("attnlab.models.interface:ARCHITECTURES", {
        "encoder_only": "attnlab.models.transformer:EncoderOnly",
        "decoder_only": "attnlab.models.transformer:DecoderOnly",
        "encoder_decoder": "attnlab.models.transformer:EncoderDecoder",
        "vit": "attnlab.models.vit:VisionTransformer",
        "rnn": "attnlab.models.recurrent:RecurrentModel",
        "conv": "attnlab.models.convolutional:ConvSeq2Seq",
    }),
    "model.norm": Entry("attnlab.nn.norms:RESIDUALS", {
        "post": "attnlab.nn.norms:PostNormResidual",
        "pre": "attnlab.nn.norms:PreNormResidual",
        "sandwich": "attnlab.nn.norms:SandwichNormResidual",
        "deepnorm": "attnlab.nn.norms:DeepNormResidual",
    }),
    "model.norm_type": Entry("attnlab.nn.normalization:NORM_TYPES", {
        "layernorm": "torch.nn:LayerNorm",  # Ba et al. 2016; torch's eps 1e-5
        "rmsnorm": "attnlab.nn.normalization:RMSNorm",
    }),
    "model.pos": Entry("attnlab.nn.positions:POSITIONS", {
        "none": "attnlab.nn.positions:Positions",
        "sinusoidal": "attnlab.nn.positions:SinusoidalPositions",
        "sinusoidal_concat": "attnlab.nn.positions:SinusoidalConcatPositions",
        "learned": "attnlab.nn.positions:LearnedPositions",
        "learned_2d": "attnlab.nn.positions:Learned2DPositions",
        "sinusoidal_2d": "attnlab.nn.positions:Sinusoidal2DPositions",
        "rope": "attnlab.nn.positions:RotaryPositions",
        "alibi": "attnlab.nn.positions:ALiBiPositions",
        "t5_relative": "attnlab.nn.positions:T5RelativePositions",
        "xl_relative": "attnlab.nn.positions:XLRelativePositions",
    }),
    "model.ffn": Entry("attnlab.nn.feedforward:FEEDFORWARDS", {
        "relu": "attnlab.nn.feedforward:FeedForward",
        "gelu": "attnlab.nn.feedforward:GELUFeedForward",
        "gelu_tanh": "attnlab.nn.feedforward:GELUTanhFeedForward",
        "swiglu": "attnlab.nn.feedforward:SwiGLU",
    }),
    "model.attention": Entry("attnlab.nn.attention_kinds:ATTENTION_KINDS", {
        "full": "attnlab.nn.attention_kinds:FullAttention",
        "sliding_window": "attnlab.nn.attention_kinds:SlidingWindowAttention",
        "longformer": "attnlab.nn.attention_kinds:LongformerAttention",
        "bigbird": "attnlab.nn.attention_kinds:BigBirdAttention",
        "linformer": "attnlab.nn.attention_kinds:LinformerAttention",
        "linear": "attnlab.nn.attention_kinds:LinearAttention",
    }),
    "data task": Entry("attnlab.tasks:TASKS", {
        "seq2seq": "attnlab.tasks.seq2seq:Seq2SeqTask",
        "lm": "attnlab.tasks.language_modeling:LanguageModelTask",
        "classification": "attnlab.tasks.classification:ClassificationTask",
        "image_classification": "attnlab.tasks.classification:ImageClassificationTask",
    }),
}  # fmt: skip

# the model config key that holds each registry's value (``model`` is ``model.name``)
MODEL_KEYS = {"model": "name", **{k: k.removeprefix("model.") for k in CATALOG
                                  if k.startswith("model.")}}  # fmt: skip


def locate(path: str) -> object:
    """The object at ``"module:attribute"``, imported."""
    import importlib

    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def registry(key: str):  # -> attnlab.registry.Registry
    """The registry of config key ``key`` (importing the module that holds it)."""
    return locate(CATALOG[key].registry)
