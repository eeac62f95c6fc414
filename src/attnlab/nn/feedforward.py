"""Position-wise feed-forward networks (``model.ffn``).

FFN(x) = max(0, xW₁ + b₁)W₂ + b₂                     Vaswani et al. 2017, eq. 2
GELU variant: GELU(xW₁ + b₁)W₂ + b₂                 Hendrycks & Gimpel 2016 (exact, erf)
gelu_tanh:    the same with GELU's tanh approximation, as BERT and GPT-2 compute it
SwiGLU(x) = (Swish(xW₁) ⊙ xV)W₂                     Shazeer 2020
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.dropout import Dropout
from attnlab.registry import Registry

FEEDFORWARDS: Registry[type[nn.Module]] = Registry("model.ffn")


def default_d_ff(ffn: str, d_model: int) -> int:
    """4·d_model, or ⅔ of it for gated units so the parameter count stays comparable
    (each ``model.ffn`` config says which it is)."""
    from attnlab.components import FAMILIES

    return FAMILIES["ffn"].get(ffn).default_d_ff(d_model)


class FeedForward(nn.Module):
    """Two linear maps with an activation between them (ReLU in the paper)."""

    activation = staticmethod(F.relu)

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)  # W₁
        self.linear2 = nn.Linear(d_ff, d_model)  # W₂ (a residual output projection)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class GELUFeedForward(FeedForward):
    """FFN with the Gaussian error linear unit (Hendrycks & Gimpel 2016)."""

    activation = staticmethod(F.gelu)


def gelu_tanh(x: Tensor) -> Tensor:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  (Hendrycks & Gimpel 2016, §2)."""
    return F.gelu(x, approximate="tanh")


class GELUTanhFeedForward(FeedForward):
    """FFN with GELU's tanh approximation, GPT-2's and BERT's ``gelu`` (``ffn=gelu`` is exact)."""

    activation = staticmethod(gelu_tanh)


class SwiGLU(nn.Module):
    """Gated linear unit with Swish gate (Shazeer 2020, "GLU Variants Improve Transformer")."""

    gate_activation = staticmethod(F.silu)

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)  # W₁
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)  # V
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)  # W₂
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.gate_activation(self.gate(x)) * self.linear1(x)))


class GeGLU(SwiGLU):
    """(GELU(xW₁) ⊙ xV)W₂ (Shazeer 2020, eq. 6), with GELU's tanh approximation, as T5 v1.1's
    gated-gelu and Gemma's MLP (``gelu_pytorch_tanh``) compute it."""

    gate_activation = staticmethod(gelu_tanh)
