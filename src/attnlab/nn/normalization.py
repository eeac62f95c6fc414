"""The normalisation layers ``model.norm_type`` names (where they sit: :mod:`attnlab.nn.norms`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.registry import Registry

NORM_TYPES: Registry[type[nn.Module]] = Registry("model.norm_type")


class RMSNorm(nn.RMSNorm):
    """x / RMS(x) · g, RMS(x) = √(mean(x²) + ε)  (Zhang & Sennrich 2019).

    ε = 1e-5, LayerNorm's above, so ``model.norm_type=layernorm|rmsnorm`` ablates
    only what RMSNorm drops (re-centring and the bias). nn.RMSNorm's default
    ε=None means finfo(dtype).eps, which changes with precision (1.2e-7 in
    float32, 7.8e-3 in bfloat16).
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__(d_model, eps=eps)


class DynamicTanh(nn.Module):
    """DyT(x) = γ ⊙ tanh(αx) + β, a scalar α learned from α₀ (Zhu et al. 2025, "Transformers
    without Normalization", §4, Algorithm 1): no statistics over the features, an elementwise
    squashing in the norm's place.

    α₀ = 0.5, the paper's default (``model.dyt_alpha0``; its LLMs tune it, §7); γ = 1, β = 0
    as a norm's gain and bias, and β is dropped with the norms' under ``model.bias=false``.
    """

    def __init__(self, d_model: int, alpha0: float = 0.5) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), alpha0))  # α, one scalar
        self.weight = nn.Parameter(torch.ones(d_model))  # γ
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(d_model))  # β

    def forward(self, x: Tensor) -> Tensor:
        y = self.weight * torch.tanh(self.alpha * x)
        return y if self.bias is None else y + self.bias


def make_norm(norm_type: str, d_model: int) -> nn.Module:
    return NORM_TYPES.get(norm_type)(d_model)
