"""The inference runtime: decoding caches, decoding states, the compiled step and the strategies.

Models define what is computed (:mod:`attnlab.models`, :mod:`attnlab.nn`); this package
decides how a generation runs: which cache each attention layer gets
(:mod:`~attnlab.inference.caches`), the state that feeds an architecture one token at a
time (:mod:`~attnlab.inference.decoding`, :mod:`~attnlab.inference.recurrent`), the
compiled one-token step and its graph pass (:mod:`~attnlab.inference.row_matmuls`), and
greedy decoding, sampling and beam search (:mod:`~attnlab.inference.generation`).
"""

from attnlab.inference import convolutional, recurrent  # noqa: F401  (register their states)
from attnlab.inference.decoding import DECODINGS, DecodingState, start_decoding
from attnlab.inference.generation import (
    NEVER_GENERATED,
    STRATEGIES,
    DecodeConfig,
    filter_logits,
    generate,
    has_position_table,
    position_room,
)

__all__ = [
    "DECODINGS",
    "NEVER_GENERATED",
    "STRATEGIES",
    "DecodeConfig",
    "DecodingState",
    "filter_logits",
    "generate",
    "has_position_table",
    "position_room",
    "start_decoding",
]
