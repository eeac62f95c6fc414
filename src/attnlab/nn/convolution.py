"""Gated convolutions and multi-step attention: the parts of ConvS2S (``model=conv``).

Gehring et al. 2017, "Convolutional Sequence to Sequence Learning" (§3), and the gated
convolutional language model of Dauphin et al. 2017, "Language Modeling with Gated
Convolutional Networks". Sizes: f = ``model.d_model`` (embeddings, attention, the
encoder's output), C = ``model.conv_channels`` (the convolution blocks; null: f),
k = ``model.kernel_size``. Every convolution and linear map is weight-normalised
(Salimans & Kingma 2016; §3.5) and initialised as §3.5 says: N(0, √(4p/n)) when its
output feeds a GLU, N(0, √(p/n)) otherwise, n its inputs per output and p the
probability of keeping an input that dropout acts on (1 where none does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.utils.parametrizations import weight_norm

HALF = math.sqrt(0.5)  # §3.4: a sum of two terms × √0.5 keeps its variance


def normed_linear(n_in: int, n_out: int, dropout: float = 0.0, gated: bool = False) -> nn.Linear:
    """A weight-normalised linear map, initialised N(0, √(g·(1 − dropout)/n_in)), g = 4 when
    its output feeds a GLU (§3.5); biases 0."""
    layer = nn.Linear(n_in, n_out)
    std = math.sqrt((4 if gated else 1) * (1 - dropout) / n_in)
    nn.init.normal_(layer.weight, 0.0, std)
    nn.init.zeros_(layer.bias)
    return weight_norm(layer, dim=0)


class GradScale(torch.autograd.Function):
    """Identity forward; the gradient × ``scale`` backward (§3.4: the encoder's gradients are
    divided by the number of attention mechanisms that read it)."""

    @staticmethod
    def forward(ctx, x: Tensor, scale: float) -> Tensor:  # noqa: ANN001
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # noqa: ANN001
        return grad * ctx.scale, None


class GatedConvolution(nn.Module):
    """A convolution block's convolution and gated linear unit (§3.2):

        [A B] = W * [h_{i−k/2}, …, h_{i+k/2}] + b_w,  W ∈ R^{2C×kC},   v([A B]) = A ⊗ σ(B)

    ``causal`` (the decoder): the input is left-padded with k − 1 zeros, so output i sees
    inputs i − k + 1 … i; otherwise padded (k − 1)//2 left and k//2 right, so the output
    has the input's length. Dropout acts on the input.
    """

    def __init__(self, channels: int, kernel_size: int, dropout: float, causal: bool) -> None:
        super().__init__()
        self.kernel_size, self.causal = kernel_size, causal
        conv = nn.Conv1d(channels, 2 * channels, kernel_size)
        n_in = kernel_size * channels
        nn.init.normal_(conv.weight, 0.0, math.sqrt(4 * (1 - dropout) / n_in))
        nn.init.zeros_(conv.bias)
        self.conv = weight_norm(conv, dim=0)
        self.dropout = nn.Dropout(dropout)

    def padding(self) -> tuple[int, int]:
        k = self.kernel_size
        return (k - 1, 0) if self.causal else ((k - 1) // 2, k // 2)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, T, C): every window at once."""
        y = self.conv(F.pad(self.dropout(x).transpose(1, 2), self.padding()))
        return F.glu(y, dim=1).transpose(1, 2)

    def window(self, x: Tensor) -> Tensor:
        """(B, k, C), the last k inputs -> (B, 1, C): the causal output at the newest."""
        return F.glu(self.conv(self.dropout(x).transpose(1, 2)), dim=1).transpose(1, 2)


@dataclass
class ConvMemory:
    """What multi-step attention reads of the encoder: z^u as keys (B, S, f), (z^u + e)·√0.5
    as values, the real source positions (B, S) and m·√(1/m) = √m per example (B, 1, 1),
    m its real length."""

    keys: Tensor
    values: Tensor
    real: Tensor
    scale: Tensor

    def select(self, index: Tensor) -> ConvMemory:
        return ConvMemory(*(t.index_select(0, index) for t in
                            (self.keys, self.values, self.real, self.scale)))  # fmt: skip


class MultiStepAttention(nn.Module):
    """One decoder layer's own attention over the encoder (§3.3, eq. 1–2):

        d_i = (W_d h_i + b_d + g_i)·√0.5                   h_i this layer's GLU output,
                                                           g_i the target embedding
        a_ij = exp(d_i · z_j) / Σ_t exp(d_i · z_t)                                  (1)
        c_i = √m · Σ_j a_ij (z_j + e_j)·√0.5                                         (2)
        out_i = (h_i + W_c c_i)·√0.5                   c_i "simply added" to h_i, mapped
                                                       back to C channels (W_c)

    √m = m·√(1/m) undoes the variance a weighted mean of m vectors loses (§3.4). The √0.5
    on d_i and on z + e is the authors' code's (fairseq ``fconv``), not written in the paper.
    """

    def __init__(self, channels: int, d_embed: int) -> None:
        super().__init__()
        self.query = normed_linear(channels, d_embed)  # W_d: into the embedding space
        self.back = normed_linear(d_embed, channels)  # W_c: back to the decoder's width

    def forward(self, h: Tensor, g: Tensor, memory: ConvMemory) -> tuple[Tensor, Tensor]:
        """h (B, T, C), g (B, T, f) -> (B, T, C) and the weights a (B, T, S)."""
        d = (self.query(h) + g) * HALF
        scores = (d @ memory.keys.transpose(1, 2)).float()
        scores = scores.masked_fill(~memory.real[:, None, :], float("-inf"))
        a = scores.softmax(dim=-1).to(h.dtype)
        c = (a @ memory.values) * memory.scale
        return (h + self.back(c)) * HALF, a


class ConvLayer(nn.Module):
    """A residual convolution block (§3.2): h^l = (v(W^l[h^{l−1} window] + b^l) + h^{l−1})·√0.5,
    with the layer's multi-step attention between the GLU and the residual in a decoder."""

    def __init__(self, channels: int, kernel_size: int, dropout: float, causal: bool,
                 attention: MultiStepAttention | None) -> None:  # fmt: skip
        super().__init__()
        self.conv = GatedConvolution(channels, kernel_size, dropout, causal)
        self.attention = attention

    def forward(self, x: Tensor, g: Tensor | None = None,
                memory: ConvMemory | None = None) -> Tensor:  # fmt: skip
        """(B, T, C) -> (B, T, C); padding must already be zero in ``x``."""
        return self.close(self.conv(x), x, g, memory)

    def step(self, window: Tensor, g: Tensor | None = None,
             memory: ConvMemory | None = None) -> Tensor:  # fmt: skip
        """The last k inputs (B, k, C) -> the output (B, 1, C) at the newest (causal)."""
        return self.close(self.conv.window(window), window[:, -1:], g, memory)

    def close(self, h: Tensor, x: Tensor, g: Tensor | None, memory: ConvMemory | None) -> Tensor:
        if self.attention is not None:
            assert g is not None and memory is not None, "a decoder layer reads the encoder"
            h, _ = self.attention(h, g, memory)
        return (h + x) * HALF
