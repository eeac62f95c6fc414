"""The normalisation layers ``model.norm_type`` names (where they sit: :mod:`attnlab.nn.norms`)."""

from __future__ import annotations

from torch import nn

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


def make_norm(norm_type: str, d_model: int) -> nn.Module:
    return NORM_TYPES.get(norm_type)(d_model)
