"""Decoding the convolutional baseline (``model=conv``, ``decoding = "convolutional"``).

A causal convolution of width k sees the last k inputs of its layer, so the cache is, per
decoder layer, its last k − 1 inputs (zeros before the first token, the decoder's own
left padding), with the encoder's memory: one step costs one window per layer and one
attention over the source per layer (Gehring et al. 2017, §3.3). Without the cache the
decoder reruns over every token so far. The states call the architecture's ``encode``,
``decoder`` and ``output_logits``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab.inference.decoding import DecodingState, decoding_family
from attnlab.special_tokens import BOS, PAD


@decoding_family("convolutional")
def convolutional_decoding(model: Any, inputs: Tensor, use_cache: bool) -> DecodingState:
    return ConvolutionalDecoding(model, inputs, use_cache)


class ConvolutionalDecoding(DecodingState):
    """Seq2seq (the source encoded once, the decoder fed from BOS) or the language model
    continuing a left-padded prompt (positions count from its first real token)."""

    def __init__(self, model: Any, inputs: Tensor, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        if model.feeding.prompt_layout(model.task) == "source":
            self.memory = model.encode(inputs)
            self.tokens = torch.full((inputs.size(0), 1), BOS, device=inputs.device)
        else:
            self.memory, self.tokens = None, inputs
        self.history: list[Tensor] | None = None  # each layer's last k − 1 inputs
        self.output: Tensor | None = None  # the decoder's output at the newest token
        self.fed = 0  # tokens the cache holds

    def real(self) -> Tensor | None:
        """A prompt's real tokens (None for seq2seq, which has no padding before the end)."""
        return None if self.memory is not None else self.tokens != PAD

    def logits(self) -> Tensor:
        decoder = self.model.decoder
        if not self.use_cache:
            hidden, _ = decoder(self.tokens, self.memory, self.real())
            return self.model.output_logits(hidden[:, -1]).float()
        if self.history is None:
            hidden, self.history = decoder(self.tokens, self.memory, self.real())
            self.output, self.fed = hidden[:, -1], self.tokens.size(1)
        while self.fed < self.tokens.size(1):
            token = self.tokens[:, self.fed]
            pos = self.position(self.fed)
            self.output, self.history = decoder.step(token, pos, self.memory, self.history)
            self.fed += 1
        return self.model.output_logits(self.output).float()

    def position(self, index: int) -> Tensor:
        """Each row's position of the token at column ``index``."""
        rows = self.tokens.size(0)
        if self.memory is not None:
            return torch.full((rows,), index, device=self.tokens.device)
        return (self.tokens[:, :index] != PAD).sum(1)

    def append(self, token: Tensor) -> None:
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)

    def select(self, index: Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)
        if self.memory is not None:
            self.memory = self.memory.select(index)
        if self.history is not None:
            self.history = [h.index_select(0, index) for h in self.history]
        if self.output is not None:
            self.output = self.output.index_select(0, index)
