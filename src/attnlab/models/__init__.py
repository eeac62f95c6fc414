"""Encoder-only, decoder-only and encoder-decoder Transformers, and generation."""

from attnlab.models.config import ModelConfig
from attnlab.models.stack import DecodingCache
from attnlab.models.transformer import (
    ARCHITECTURES,
    DecoderOnly,
    EncoderDecoder,
    EncoderOnly,
    TransformerModel,
    build_model,
)

__all__ = [
    "ARCHITECTURES",
    "DecoderOnly",
    "DecodingCache",
    "EncoderDecoder",
    "EncoderOnly",
    "ModelConfig",
    "TransformerModel",
    "build_model",
]
