"""Recurrent building blocks: a stacked LSTM/GRU/RNN and the attention of the RNN era.

* ``RecurrentStack``      ``torch.nn.LSTM`` / ``GRU`` / ``RNN`` over a whole sequence (cuDNN
                          on GPU), padding packed away, or one step at a time
* ``BahdanauAttention``   additive: e_ij = vᵀ tanh(W s_{i-1} + U h_j)
                          (Bahdanau et al. 2015, App. A.1.2)
* ``LuongAttention``      multiplicative: score(h_t, h̄_s) = h_tᵀ h̄_s  (dot)
                          or h_tᵀ W_a h̄_s  (general)  (Luong et al. 2015, §3.1, eq. 8)
* ``AttentionPooling``    a learned query over a sequence's states (Yang et al. 2016, §2.2)

Every attention reads a :class:`Memory`: the encoder states h_j, their keys (what the
score needs of h_j alone, computed once per source) and which positions are real.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RNN_CELLS: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}
GATES = {"lstm": 4, "gru": 3, "rnn": 1}  # input-to-hidden and hidden-to-hidden maps per cell

State = tuple[Tensor, ...]  # (h,) or, for an LSTM, (h, c); each (layers·directions, B, d)


def select_state(state: State, index: Tensor) -> State:
    """Keep (repeat, reorder) the batch rows ``index`` of a recurrent state."""
    return tuple(s.index_select(1, index) for s in state)


def keep_state(new: State, old: State, update: Tensor) -> State:
    """``new`` where ``update`` (B,) is True, else ``old``: padding leaves a state unchanged."""
    return tuple(torch.where(update[None, :, None], n, o) for n, o in zip(new, old, strict=True))


class RecurrentStack(nn.Module):
    """A multi-layer LSTM, GRU or tanh RNN; dropout between layers (Zaremba et al. 2014).

    ``forward(x, state, lengths)``: with ``lengths`` (real tokens per right-padded row)
    the padding is packed away, so outputs at padding are 0 and the final state is
    that of each row's last real token. A step is a length-1 sequence.
    """

    def __init__(
        self, cell: str, d_in: int, d: int, layers: int, dropout: float, bidirectional: bool = False
    ) -> None:
        super().__init__()
        self.is_lstm = cell == "lstm"
        self.rnn = RNN_CELLS[cell](
            d_in,
            d,
            layers,
            batch_first=True,
            dropout=dropout if layers > 1 else 0.0,
            bidirectional=bidirectional,
        )

    def forward(
        self, x: Tensor, state: State | None = None, lengths: Tensor | None = None
    ) -> tuple[Tensor, State]:
        """(B, T, d_in) -> outputs (B, T, directions·d) of the top layer, final state."""
        T = x.size(1)
        initial = None if state is None else (state if self.is_lstm else state[0])
        if lengths is not None:
            # an empty row reads one padding token: pack_padded_sequence needs length ≥ 1
            lengths = lengths.clamp(min=1).cpu()
            x = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, final = self.rnn(x, initial)
        if lengths is not None:
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
        return out, tuple(final) if self.is_lstm else (final,)


@dataclass
class Memory:
    """What attention reads: states h_j (B, S, d), keys (B, S, d_k), real positions (B, S)."""

    states: Tensor
    keys: Tensor
    real: Tensor

    def select(self, index: Tensor) -> Memory:
        return Memory(*(t.index_select(0, index) for t in (self.states, self.keys, self.real)))


def attend(scores: Tensor, values: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
    """α = softmax(scores) over real positions; context c = Σ_j α_j h_j -> (c, α).

    ``scores`` (B, T, S) are already −inf at padding; a row with no real position (an
    all-padding source) gets zero weights instead of the NaN of a softmax over −inf only.
    """
    no_key = ~real.any(-1)[:, None, None]  # (B, 1, 1)
    weights = scores.masked_fill(no_key, 0.0).softmax(-1).masked_fill(no_key, 0.0)
    return weights @ values, weights  # (B, T, d), (B, T, S)


class BahdanauAttention(nn.Module):
    """Additive attention from the previous decoder state (Bahdanau et al. 2015, App. A.1.2):

        e_ij = vᵀ tanh(W s_{i-1} + U h_j),   α_ij = softmax_j(e_ij),   c_i = Σ_j α_ij h_j

    "U h_j does not depend on i, we can pre-compute it": it is the memory's keys.
    """

    def __init__(self, d: int) -> None:
        super().__init__()
        self.W = nn.Linear(d, d, bias=False)
        self.U = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, 1, bias=False)

    def keys(self, states: Tensor) -> Tensor:
        return self.U(states)  # (B, S, d)

    def scores(self, query: Tensor, keys: Tensor, real: Tensor) -> Tensor:
        """(B, T, d) decoder states s_{i-1} -> e (B, T, S), −inf at padding."""
        e = self.v(torch.tanh(self.W(query)[:, :, None] + keys[:, None])).squeeze(-1)
        return e.masked_fill(~real[:, None], float("-inf"))

    def forward(self, query: Tensor, memory: Memory) -> tuple[Tensor, Tensor]:
        return attend(self.scores(query, memory.keys, memory.real), memory.states, memory.real)


class LuongAttention(nn.Module):
    """Global attention from the current top decoder state h_t (Luong et al. 2015, §3.1):

        score(h_t, h̄_s) = h_tᵀ h̄_s          (dot)
                        = h_tᵀ W_a h̄_s      (general)                         (eq. 8)
        a_t = softmax(score(h_t, h̄_s)),      c_t = Σ_s a_t(s) h̄_s

    The keys are h̄_s (dot) or W_a h̄_s (general), computed once per source.
    """

    def __init__(self, d: int, general: bool) -> None:
        super().__init__()
        self.W_a = nn.Linear(d, d, bias=False) if general else None

    def keys(self, states: Tensor) -> Tensor:
        return states if self.W_a is None else self.W_a(states)

    def scores(self, query: Tensor, keys: Tensor, real: Tensor) -> Tensor:
        """(B, T, d) decoder states h_t -> scores (B, T, S), −inf at padding."""
        return (query @ keys.transpose(1, 2)).masked_fill(~real[:, None], float("-inf"))

    def forward(self, query: Tensor, memory: Memory) -> tuple[Tensor, Tensor]:
        return attend(self.scores(query, memory.keys, memory.real), memory.states, memory.real)


class AttentionPooling(nn.Module):
    """A learned context vector u_w scores each state (Yang et al. 2016, eqs. 5–7):

        u_j = tanh(W h_j + b),   α_j = softmax_j(u_jᵀ u_w),   s = Σ_j α_j h_j

    Padding gets no weight.
    """

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.query = nn.Parameter(torch.randn(d) * d**-0.5)  # u_w

    def forward(self, states: Tensor, real: Tensor) -> Tensor:
        """(B, S, d) states, (B, S) real -> (B, d)."""
        scores = (torch.tanh(self.proj(states)) @ self.query)[:, None]  # (B, 1, S)
        scores = scores.masked_fill(~real[:, None], float("-inf"))
        return attend(scores, states, real)[0][:, 0]
