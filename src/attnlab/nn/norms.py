"""Normalisation and where it sits around each sublayer (``model.norm``).

Every Transformer sublayer (attention or feed-forward) is wrapped by exactly
one residual wrapper; the placements differ only in where the norm goes:

* ``post``      LN(x + Dropout(Sublayer(x)))          Vaswani et al. 2017, §5.4
* ``pre``       x + Dropout(Sublayer(LN(x)))          Xiong et al. 2020 (+ final LN)
* ``sandwich``  x + Dropout(LN(Sublayer(LN(x))))      Ding et al. 2021, CogView (+ final LN)
* ``deepnorm``  LN(α·x + Dropout(Sublayer(x)))        Wang et al. 2022, DeepNet
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from attnlab.nn.dropout import Dropout
from attnlab.registry import Registry

NORM_TYPES: Registry[type[nn.Module]] = Registry("model.norm_type")
NORM_TYPES.register("layernorm")(nn.LayerNorm)  # Ba et al. 2016; torch's eps 1e-5


@NORM_TYPES.register("rmsnorm")
class RMSNorm(nn.RMSNorm):
    """x / RMS(x) · g, RMS(x) = √(mean(x²) + ε)  (Zhang & Sennrich 2019).

    ε = 1e-5, LayerNorm's above, so ``model.norm_type=layernorm|rmsnorm`` ablates
    only what RMSNorm drops (re-centring and the bias). nn.RMSNorm's default
    ε=None means finfo(dtype).eps, which changes with precision (1.2e-7 in
    float32, 7.8e-3 in bfloat16).
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__(d_model, eps=eps)


RESIDUALS: Registry[type[Residual]] = Registry("model.norm")

Sublayer = Callable[[Tensor], Tensor]


def make_norm(norm_type: str, d_model: int) -> nn.Module:
    return NORM_TYPES.get(norm_type)(d_model)


class Residual(nn.Module):
    """Base residual wrapper. ``final_norm``: whether the stack ends with a norm."""

    final_norm = False

    def __init__(self, d_model: int, norm_type: str, dropout: float, alpha: float = 1.0) -> None:
        super().__init__()
        self.norm = make_norm(norm_type, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        raise NotImplementedError


@RESIDUALS.register("post")
class PostNormResidual(Residual):
    """LN(x + Dropout(Sublayer(x))) — the original Transformer."""

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))


@RESIDUALS.register("pre")
class PreNormResidual(Residual):
    """x + Dropout(Sublayer(LN(x))) — an identity path from input to output."""

    final_norm = True

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


@RESIDUALS.register("sandwich")
class SandwichNormResidual(Residual):
    """x + Dropout(LN_out(Sublayer(LN_in(x)))) — bounds what each sublayer adds."""

    final_norm = True

    def __init__(self, d_model: int, norm_type: str, dropout: float, alpha: float = 1.0) -> None:
        super().__init__(d_model, norm_type, dropout)
        self.out_norm = make_norm(norm_type, d_model)

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return x + self.dropout(self.out_norm(sublayer(self.norm(x))))


@RESIDUALS.register("deepnorm")
class DeepNormResidual(Residual):
    """LN(α·x + Dropout(Sublayer(x))): Post-LN with an up-weighted residual.

    α (and the init gain β applied by the model) come from :func:`deepnorm_constants`.
    """

    def __init__(self, d_model: int, norm_type: str, dropout: float, alpha: float = 1.0) -> None:
        super().__init__(d_model, norm_type, dropout)
        self.alpha = alpha

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return self.norm(self.alpha * x + self.dropout(sublayer(x)))


def deepnorm_constants(
    architecture: str, n_encoder: int, n_decoder: int
) -> dict[str, tuple[float, float]]:
    """(α, β) per stack from Wang et al. 2022, Table 1 / Figure 2.

    encoder-only (N layers):  α = (2N)^¼,  β = (8N)^-¼
    decoder-only (M layers):  α = (2M)^¼,  β = (8M)^-¼
    encoder-decoder:          encoder α = 0.81(N⁴M)^(1/16), β = 0.87(N⁴M)^(-1/16)
                              decoder α = (3M)^¼,           β = (12M)^(-¼)
    """
    N, M = n_encoder, n_decoder
    if architecture == "encoder_only":
        return {"encoder": ((2 * N) ** 0.25, (8 * N) ** -0.25)}
    if architecture == "decoder_only":
        return {"decoder": ((2 * M) ** 0.25, (8 * M) ** -0.25)}
    return {
        "encoder": (0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)),
        "decoder": ((3 * M) ** 0.25, (12 * M) ** -0.25),
    }
