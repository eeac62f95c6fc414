"""The architectures (one interface, registered by name); no Lightning, no Hydra.

``ARCHITECTURES`` finds each through its config (:mod:`attnlab.components.architectures`).
"""

from attnlab.model_config import ModelConfig
from attnlab.models.interface import ARCHITECTURES, Architecture, Feeding  # noqa: F401
from attnlab.models.recurrent import RecurrentModel
from attnlab.models.transformer import (
    DecoderOnly,
    EncoderDecoder,
    EncoderOnly,
    TransformerModel,
    build_model,
)
from attnlab.models.vit import VisionTransformer

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOnly",
    "Feeding",
    "ModelConfig",
    "RecurrentModel",
    "TransformerModel",
    "VisionTransformer",
    "build_model",
]
