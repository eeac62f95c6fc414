"""Decoding the recurrent baselines (``model=rnn``, ``decoding = "recurrent"``).

The cache is the recurrent state itself: h (and c) per layer, Luong's h̃_{t-1} with input
feeding, and the encoder memory — one step costs one RNN step. The states call the
architecture's ``encode``, ``decoder``, ``embed`` and ``output_logits`` (seq2seq), and
``read_prompt`` and ``lm_step`` (language model).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab.inference.decoding import DecodingState, decoding_family
from attnlab.nn.recurrent import select_state
from attnlab.special_tokens import BOS


@decoding_family("recurrent")
def recurrent_decoding(model: Any, inputs: Tensor, use_cache: bool) -> DecodingState:
    if model.feeding.prompt_layout(model.task) == "source":
        return RecurrentSourceDecoding(model, inputs, use_cache)
    return RecurrentPromptDecoding(model, inputs, use_cache)


class RecurrentSourceDecoding(DecodingState):
    """Seq2seq generation: the source encoded once, the decoder fed from BOS. The cache is
    the decoder state after the tokens fed so far; without it the decoder reruns the whole
    target from s_0 at every step."""

    def __init__(self, model: Any, src: Tensor, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        self.memory, self.start = model.encode(src)
        self.state = self.start
        self.tokens = torch.full((src.size(0), 1), BOS, device=src.device)
        self.output: Tensor | None = None  # the decoder's output at the newest token
        self._fed = 0

    def logits(self) -> Tensor:
        decoder = self.model.decoder
        if not self.use_cache:
            hidden, _ = decoder(self.model.embed(self.tokens), self.start, self.memory)
            return self.model.output_logits(hidden[:, -1]).float()
        if self._fed < self.tokens.size(1):
            new = self.model.embed(self.tokens[:, self._fed :])
            hidden, self.state = decoder(new, self.state, self.memory)
            self.output, self._fed = hidden[:, -1], self.tokens.size(1)
        return self.model.output_logits(self.output).float()

    def append(self, token: Tensor) -> None:
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)

    def select(self, index: Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)
        self.memory = self.memory.select(index)
        self.start, self.state = self.start.select(index), self.state.select(index)
        if self.output is not None:
            self.output = self.output.index_select(0, index)


class RecurrentPromptDecoding(DecodingState):
    """The language model continuing a left-padded prompt; the cache is its state (the top
    layer's h is the output at the newest token). Without it the prompt and every token
    since are reread from the zero state at each step."""

    def __init__(self, model: Any, prompt: Tensor, use_cache: bool) -> None:
        self.model, self.tokens = model, prompt
        self.state = model.read_prompt(prompt) if use_cache else None

    def logits(self) -> Tensor:
        state = self.state if self.state is not None else self.model.read_prompt(self.tokens)
        return self.model.output_logits(state[0][-1]).float()

    def append(self, token: Tensor) -> None:
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)
        if self.state is not None:
            self.state = self.model.lm_step(token, self.state)

    def select(self, index: Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)
        if self.state is not None:
            self.state = select_state(self.state, index)
