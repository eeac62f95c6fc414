"""Position-wise feed-forward networks (``model.ffn``).

FFN(x) = max(0, xW₁ + b₁)W₂ + b₂                     Vaswani et al. 2017, eq. 2
GELU variant: GELU(xW₁ + b₁)W₂ + b₂                 Hendrycks & Gimpel 2016 (exact, erf)
gelu_tanh:    the same with GELU's tanh approximation, as BERT and GPT-2 compute it
relu2:        max(0, xW₁ + b₁)²W₂ + b₂               So et al. 2021, Primer, §3
SwiGLU(x) = (Swish(xW₁) ⊙ xV)W₂                     Shazeer 2020, §2
GEGLU(x)  = (GELU(xW₁) ⊙ xV)W₂                      Shazeer 2020, §2 (GELU's tanh form)
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


def relu_squared(x: Tensor) -> Tensor:
    """max(0, x)²: Primer's squared ReLU (So et al. 2021, §3)."""
    return F.relu(x).square()


class ReLUSquaredFeedForward(FeedForward):
    """FFN with Primer's squared ReLU: max(0, xW₁ + b₁)²W₂ + b₂ (So et al. 2021, §3)."""

    activation = staticmethod(relu_squared)


class SwiGLU(nn.Module):
    """Gated linear unit with Swish gate (Shazeer 2020, "GLU Variants Improve Transformer").

    (act(xW₁) ⊙ xV)W₂ without biases; a subclass changes only ``activation``."""

    activation = staticmethod(F.silu)

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)  # W₁
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)  # V
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)  # W₂
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.gate(x)) * self.linear1(x)))


class GEGLU(SwiGLU):
    """Gated linear unit with a GELU gate: (GELU(xW₁) ⊙ xV)W₂ (Shazeer 2020, §2).

    GELU's tanh approximation, as the paper's Mesh TensorFlow computed ``gelu``, and as T5
    v1.1 (``gated-gelu``) and Gemma (``gelu_pytorch_tanh``) do; ``ffn=gelu`` vs
    ``gelu_tanh`` is the ablation of the approximation itself."""

    activation = staticmethod(gelu_tanh)
