"""Position-wise feed-forward networks (``model.ffn``).

FFN(x) = max(0, xW₁ + b₁)W₂ + b₂                     Vaswani et al. 2017, eq. 2
GELU variant: GELU(xW₁ + b₁)W₂ + b₂                 BERT, GPT-2
SwiGLU(x) = (Swish(xW₁) ⊙ xV)W₂                     Shazeer 2020
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.dropout import Dropout
from attnlab.registry import Registry

FEEDFORWARDS: Registry[type[nn.Module]] = Registry("model.ffn")


def default_d_ff(ffn: str, d_model: int) -> int:
    """4·d_model, or ⅔ of it for gated units so the parameter count stays comparable."""
    if ffn == "swiglu":
        return int(2 * 4 * d_model / 3)
    return 4 * d_model


@FEEDFORWARDS.register("relu")
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


@FEEDFORWARDS.register("gelu")
class GELUFeedForward(FeedForward):
    """FFN with the Gaussian error linear unit (Hendrycks & Gimpel 2016)."""

    activation = staticmethod(F.gelu)


@FEEDFORWARDS.register("swiglu")
class SwiGLU(nn.Module):
    """Gated linear unit with Swish gate (Shazeer 2020, "GLU Variants Improve Transformer")."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)  # W₁
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)  # V
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)  # W₂
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(F.silu(self.gate(x)) * self.linear1(x)))
