"""The recurrent baselines the Transformer replaced (``model=rnn``): LSTM, GRU or tanh RNN.

* seq2seq         an encoder reads the source at once (bidirectional optional); a decoder
                  with ``model.rnn_attention`` generates the target:
                  ``bahdanau``       c_i from the previous state s_{i-1} enters the RNN
                                     (Bahdanau et al. 2015, "RNNsearch", App. A.1.2)
                  ``luong_dot``,     c_t from the current state h_t; h̃_t = tanh(W_c[c_t; h_t])
                  ``luong_general``  (Luong et al. 2015, §3.1); ``model.input_feeding`` (§3.3)
                  ``none``           only the encoder's final state: the fixed-length vector
                                     of Sutskever et al. 2014 and Cho et al. 2014
* lm              a unidirectional RNN language model (char-RNN; Zaremba et al. 2014)
* classification  the encoder, pooled (``model.pool``: last | attention | mean)

Generation's cache is the recurrent state itself: h (and c) per layer, Luong's h̃_{t-1}
with input feeding, and the encoder memory — one step costs one RNN step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.components.architectures import RecurrentConfig
from attnlab.errors import ConfigError
from attnlab.model_config import ModelConfig
from attnlab.models.flops import output_flops
from attnlab.models.initialization import initialize
from attnlab.models.interface import Architecture
from attnlab.models.transformer import mean_over_real
from attnlab.nn.recurrent import (
    GATES,
    AttentionPooling,
    BahdanauAttention,
    LuongAttention,
    Memory,
    RecurrentStack,
    State,
    keep_state,
    select_state,
)
from attnlab.special_tokens import PAD


class RecurrentEncoder(nn.Module):
    """Reads a right-padded source in one call, padding packed away (its final state is that
    of the last real token). Bidirectional: h_j = W_p [→h_j; ←h_j], back to d_model."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding, project: bool) -> None:
        super().__init__()
        d = cfg.d_model
        self.embedding, self.dropout = embedding, nn.Dropout(cfg.dropout)
        self.pad_id = cfg.pad_id
        self.rnn = RecurrentStack(
            cfg.cell, d, d, cfg.encoder_layers, cfg.dropout, cfg.bidirectional
        )
        self.project = nn.Linear(2 * d, d, bias=False) if cfg.bidirectional and project else None

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor, State]:
        """(B, S) -> states (B, S, d), real (B, S), final state (layers·directions, B, d)."""
        real = src != self.pad_id
        states, final = self.rnn(self.dropout(self.embedding(src)), lengths=real.sum(1))
        return (states if self.project is None else self.project(states)), real, final

    def last(self, final: State) -> Tensor:
        """The top layer's final state (B, d): [→h_S; ←h_1] projected when bidirectional."""
        h = final[0]
        return h[-1] if self.project is None else self.project(torch.cat([h[-2], h[-1]], -1))


@dataclass
class DecoderState:
    """The decoder's recurrent state, and Luong's h̃_{t-1} (B, d) with input feeding."""

    rnn: State
    feed: Tensor | None = None

    def select(self, index: Tensor) -> DecoderState:
        feed = None if self.feed is None else self.feed.index_select(0, index)
        return DecoderState(select_state(self.rnn, index), feed)


class AttentionDecoder(nn.Module):
    """One decoder for every ``model.rnn_attention``; f is the RNN, y the target embedding:

    bahdanau (App. A.1.2)   c_i = Σ_j α_ij h_j with α from s_{i-1};
                            s_i = f([y_{i-1}; c_i], s_{i-1});
                            t_i = tanh(W_o [s_i; c_i; y_{i-1}])  (the deep output, tanh for
                            the maxout)
    luong (§3.1)            h_t = f(y_{t-1}, h_{t-1});  c_t from h_t;
                            h̃_t = tanh(W_c [c_t; h_t])                                (eq. 5)
      input feeding (§3.3)  h_t = f([y_{t-1}; h̃_{t-1}], h_{t-1})
    none                    h_t = f(y_{t-1}, h_{t-1}) from the encoder's final state

    The output (t_i, h̃_t or h_t) is d_model wide, so the output layer can be tied to the
    embedding. Where no step needs the previous output (luong without input feeding,
    none) the RNN runs over the whole target at once; otherwise one step per position.
    """

    def __init__(self, cfg: ModelConfig, bridge: bool) -> None:
        super().__init__()
        d, kind = cfg.d_model, cfg.rnn_attention
        self.bahdanau, self.input_feeding = kind == "bahdanau", cfg.input_feeding
        self.attention: BahdanauAttention | LuongAttention | None = None
        if self.bahdanau:
            self.attention = BahdanauAttention(d)
            self.deep_output = nn.Linear(3 * d, d)  # W_o
        elif kind != "none":
            self.attention = LuongAttention(d, general=kind == "luong_general")
            self.combine = nn.Linear(2 * d, d, bias=False)  # W_c
        self.stepwise = self.bahdanau or self.input_feeding
        d_in = 2 * d if self.stepwise else d
        self.rnn = RecurrentStack(cfg.cell, d_in, d, cfg.decoder_layers, cfg.dropout)
        n_states = 2 if cfg.cell == "lstm" else 1  # (h, c) or h
        self.both_ways = kind == "none"  # no attention: the bridge is all the decoder sees
        d_bridge = 2 * d if self.both_ways else d
        self.bridge = (
            nn.ModuleList(nn.Linear(d_bridge, d) for _ in range(n_states)) if bridge else None
        )

    def start(self, final: State) -> DecoderState:
        """The encoder's final state -> s_0, per layer. Bidirectional: s_0 = tanh(W_s ←h_1)
        (App. A.1.2; h and c each through their own W_s) — the backward RNN ends on the first
        source word, as Sutskever et al.'s reversed source does; without attention
        s_0 = tanh(W_s [→h_S; ←h_1]), so that all of the encoder reaches the decoder.
        Unidirectional: the encoder's final state itself."""
        if self.bridge is not None:
            ends = [torch.cat([s[0::2], s[1::2]], -1) if self.both_ways else s[1::2] for s in final]
            final = tuple(torch.tanh(W(s)) for W, s in zip(self.bridge, ends, strict=True))
        feed = torch.zeros_like(final[0][-1]) if self.input_feeding else None
        return DecoderState(final, feed)

    def forward(
        self, y: Tensor, state: DecoderState, memory: Memory
    ) -> tuple[Tensor, DecoderState]:
        """(B, T, d) embedded targets -> outputs (B, T, d) and the state after them."""
        if not self.stepwise:
            h, rnn = self.rnn(y, state.rnn)  # every position at once (cuDNN)
            return self.attentional(h, memory), DecoderState(rnn)
        outputs = []
        for t in range(y.size(1)):
            out, state = self.step(y[:, t], state, memory)
            outputs.append(out)
        return torch.stack(outputs, dim=1), state

    def step(self, y: Tensor, state: DecoderState, memory: Memory) -> tuple[Tensor, DecoderState]:
        """One position: (B, d) embedded y_{t-1} -> output (B, d) and the next state."""
        x = y[:, None]  # (B, 1, d)
        if self.bahdanau:
            s_prev = state.rnn[0][-1][:, None]  # the top layer's s_{i-1}
            context = self.attention(s_prev, memory)[0]  # (B, 1, d)
            s, rnn = self.rnn(torch.cat([x, context], -1), state.rnn)
            out = torch.tanh(self.deep_output(torch.cat([s, context, x], -1)))[:, 0]
            return out, DecoderState(rnn)
        if self.input_feeding:
            x = torch.cat([x, state.feed[:, None]], -1)
        h, rnn = self.rnn(x, state.rnn)
        out = self.attentional(h, memory)[:, 0]
        return out, DecoderState(rnn, out if self.input_feeding else None)

    def attentional(self, h: Tensor, memory: Memory) -> Tensor:
        """Luong: h̃_t = tanh(W_c [c_t; h_t]), (B, T, d); without attention h_t itself."""
        if self.attention is None:
            return h
        context, _ = self.attention(h, memory)
        return torch.tanh(self.combine(torch.cat([context, h], -1)))


def rnn_flops(cell: str, d_in: int, d: int, layers: int, length: int) -> int:
    """``layers`` RNN layers over ``length`` tokens: 2·gates·(d_in + d)·d per token and layer."""
    return layers * length * 2 * GATES[cell] * (d_in + d) * d


class RecurrentModel(Architecture):
    """LSTM/GRU/RNN with Bahdanau or Luong attention (2015), RNN LM, RNN classifier.

    Keys: ``cell``, ``rnn_attention``, ``input_feeding``, ``bidirectional`` (the encoder;
    the language model is always left to right), ``d_model`` (the hidden size of every
    layer and direction, and the embedding size), ``n_layers`` (``n_encoder_layers`` =
    ``n_decoder_layers``), ``dropout`` (embeddings, between layers, before the output
    layer), ``tie_embeddings`` (Press & Wolf 2017), ``pool``, ``init``:

    * ``paper``: every parameter U(−0.1, 0.1) (Luong et al. 2015, §4.1)
    * ``xavier``, ``gpt2``: as for the Transformer (:mod:`attnlab.models.initialization`)

    The keys it reads are its config's (:class:`attnlab.components.architectures.
    RecurrentConfig`); a Transformer's keys (``n_heads``, ``norm``, ``pos``, …) are refused.
    """

    feeding = RecurrentConfig.feeding
    decoding = "recurrent"  # attnlab.inference.recurrent

    def __init__(self, cfg: ModelConfig, task: str = "seq2seq") -> None:
        super().__init__(cfg, task)
        d, V = cfg.d_model, cfg.vocab_size
        self.embedding = nn.Embedding(V, d)  # the target side's (or the only) embedding
        self.dropout = nn.Dropout(cfg.dropout)
        if task == "seq2seq":
            self.src_embedding = self.embedding if cfg.tie == "all" else nn.Embedding(V, d)
            attends = cfg.rnn_attention != "none"
            self.encoder = RecurrentEncoder(cfg, self.src_embedding, project=attends)
            self.decoder = AttentionDecoder(cfg, bridge=cfg.bidirectional)
        elif task == "lm":
            self.rnn = RecurrentStack(cfg.cell, d, d, cfg.n_layers, cfg.dropout)
        elif task == "classification":
            self.encoder = RecurrentEncoder(cfg, self.embedding, project=True)
            if self.pool_for(task) == "attention":
                self.attention_pool = AttentionPooling(d)
        else:
            raise ConfigError(f"model={cfg.name} {self.feeding.refusal(task)}")
        if task != "classification":
            self.lm_head = nn.Linear(d, V)
        self._initialize()

    def _initialize(self) -> None:
        if self.cfg.init == "paper":
            for param in self.parameters():
                nn.init.uniform_(param, -0.1, 0.1)
        else:
            initialize(self, self.cfg.init, self.cfg.d_model, self.cfg.n_layers)
        if self.cfg.tie != "none" and self.task != "classification":
            self.lm_head.weight = self.embedding.weight  # Press & Wolf 2017

    def embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.embedding(tokens))

    def output_logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(self.dropout(hidden))

    def forward(self, tokens: Tensor, tgt_in: Tensor | None = None) -> Tensor:
        """seq2seq: source (B, S), BOS + target (B, T) -> logits (B, T, vocab);
        lm: tokens (B, T) -> logits (B, T, vocab); classification: ``pooled``."""
        if self.task == "lm":
            hidden, _ = self.rnn(self.embed(tokens))
            return self.output_logits(hidden)
        if self.task == "classification":
            return self.pooled(tokens)
        if tgt_in is None:
            raise ValueError("model=rnn on seq2seq data reads a source and a decoder input")
        memory, start = self.encode(tokens)
        hidden, _ = self.decoder(self.embed(tgt_in), start, memory)
        return self.output_logits(hidden)

    def encode(self, src: Tensor) -> tuple[Memory, DecoderState]:
        """Source tokens -> the memory attention reads and the decoder's first state s_0."""
        states, real, final = self.encoder(src)
        attention = self.decoder.attention
        keys = states if attention is None else attention.keys(states)
        return Memory(states, keys, real), self.decoder.start(final)

    def pooled(self, inputs: Tensor) -> Tensor:
        """``last``: the top layer's final state (of the last real token; both directions
        projected to d_model), ``attention``: a learned query over the states (Yang et al.
        2016), ``mean``: the mean of the states over real tokens."""
        states, real, final = self.encoder(inputs)
        pool = self.pool_for(self.task)
        if pool == "attention":
            return self.attention_pool(states, real)
        return self.encoder.last(final) if pool == "last" else mean_over_real(states, real)

    def read_prompt(self, prompt: Tensor) -> State:
        """A left-padded prompt (B, P) -> the LM's state after its last real token (zero for
        an empty row). Real tokens are moved to the front and packed: padding never enters."""
        real = prompt != PAD
        lengths = real.sum(1)
        order = torch.argsort((~real).int(), dim=1, stable=True)
        _, state = self.rnn(self.embed(prompt.gather(1, order)), lengths=lengths)
        return keep_state(state, tuple(torch.zeros_like(s) for s in state), lengths > 0)

    def lm_step(self, token: Tensor, state: State) -> State:
        """The LM's state after one more token (B,); PAD (a finished row) leaves it as is."""
        _, new = self.rnn(self.embed(token[:, None]), state)
        return keep_state(new, state, token != PAD)

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        """Matrix products only, multiply-add = 2; g = 4 (LSTM), 3 (GRU), 1 (RNN) gates.

        * an RNN layer, per token: 2·g·(d_in + d)·d, with d_in = d, or 2d above a
          bidirectional layer and in the decoder's first layer with bahdanau or input
          feeding; a bidirectional encoder counts both directions
        * per target position: scores and context 2·2·S·d; bahdanau's W s_{i-1} and W_o
          2·(1 + 3)·d², luong's W_c 2·2·d²; the output layer 2·d·V
        * per source token: U h_j (bahdanau) or W_a h̄_s (luong_general) 2·d², and
          W_p [→h_j; ←h_j] 2·2d·d; per example the bridge 2·d² (2·2d·d without attention)
          per layer and state

        ``src_len`` = 0 is the language model: one RNN over ``tgt_len`` tokens and the
        output layer. (Classification is counted by its task as ``(length, 1)``: the
        encoder plus one decoder step, which it does not run.)
        """
        d, cell = cfg.d_model, cfg.cell
        if src_len == 0:
            return rnn_flops(cell, d, d, cfg.n_layers, tgt_len) + output_flops(cfg, tgt_len)
        k, N, M = (2 if cfg.bidirectional else 1), cfg.encoder_layers, cfg.decoder_layers
        attention = cfg.rnn_attention
        layers = rnn_flops(cell, d, d, 1, src_len) + rnn_flops(cell, k * d, d, N - 1, src_len)
        encoder = k * layers
        d_in = 2 * d if attention == "bahdanau" or cfg.input_feeding else d
        decoder = rnn_flops(cell, d_in, d, 1, tgt_len) + rnn_flops(cell, d, d, M - 1, tgt_len)
        d_bridge = 2 * d if attention == "none" else d  # [→h_S; ←h_1] or ←h_1
        bridge = (k - 1) * N * (2 if cell == "lstm" else 1) * 2 * d_bridge * d
        if attention != "none":
            encoder += (k - 1) * src_len * 2 * 2 * d * d  # W_p [→h_j; ←h_j]
            per_query = 2 * 2 * src_len * d  # scores (vᵀ tanh(…) or h_tᵀ·) and context
            per_query += 2 * 4 * d * d if attention == "bahdanau" else 2 * 2 * d * d
            keys = 0 if attention == "luong_dot" else src_len * 2 * d * d  # U h_j, W_a h̄_s
            decoder += keys + tgt_len * per_query
        return encoder + decoder + bridge + output_flops(cfg, tgt_len)
