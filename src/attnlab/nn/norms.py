"""Normalisation and where it sits around each sublayer (``model.norm``).

Every Transformer sublayer (attention or feed-forward) is wrapped by exactly
one residual wrapper; the placements differ only in where the norm goes:

* ``post``      LN(x + Dropout(Sublayer(x)))          Vaswani et al. 2017, §5.4
* ``pre``       x + Dropout(Sublayer(LN(x)))          Xiong et al. 2020 (+ final LN)
* ``sandwich``  x + Dropout(LN(Sublayer(LN(x))))      Ding et al. 2021, CogView; Peri-LN,
                                                      Kim et al. 2025 (+ final LN)
* ``olmo2``     x + Dropout(LN(Sublayer(x)))          OLMo et al. 2025, OLMo 2 §3 (+ final LN)
* ``deepnorm``  LN(α·x + Dropout(Sublayer(x)))        Wang et al. 2022, DeepNet
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.dropout import Dropout
from attnlab.nn.feedforward import FeedForward, SwiGLU
from attnlab.nn.normalization import NORM_TYPES, RMSNorm, make_norm
from attnlab.registry import Registry

__all__ = ["NORM_TYPES", "RESIDUALS", "RMSNorm", "Residual", "StackDepth", "make_norm"]

RESIDUALS: Registry[type[Residual]] = Registry("model.norm")

Sublayer = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class StackDepth:
    """Where a residual sits: its stack (``encoder`` or ``decoder``) and the model's layer
    counts (0 where the model has no such stack). Depth-aware schemes (DeepNorm) read it."""

    role: str = "decoder"
    n_encoder: int = 0
    n_decoder: int = 1


class Residual(nn.Module):
    """Base residual wrapper. ``final_norm``: whether the stack ends with a norm.

    A scheme owns its constants and its initialisation: ``__init__`` receives the
    stack's :class:`StackDepth`, and ``initialize`` runs on each stack's layers after
    the model's ``model.init`` scheme.
    """

    final_norm = False

    def __init__(
        self, d_model: int, norm_type: str, dropout: float, depth: StackDepth = StackDepth()
    ) -> None:
        super().__init__()
        self.norm = make_norm(norm_type, d_model)
        self.dropout = Dropout(dropout)

    @classmethod
    def initialize(cls, layers: nn.Module, depth: StackDepth) -> None:
        """Re-initialise a stack's layers after ``model.init`` (a no-op by default)."""

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        raise NotImplementedError


class PostNormResidual(Residual):
    """LN(x + Dropout(Sublayer(x))) — the original Transformer."""

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))


class PreNormResidual(Residual):
    """x + Dropout(Sublayer(LN(x))) — an identity path from input to output."""

    final_norm = True

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


class SandwichNormResidual(Residual):
    """x + Dropout(LN_out(Sublayer(LN_in(x)))) — bounds what each sublayer adds.

    CogView's sandwich (Ding et al. 2021) is the placement Kim et al. 2025 name Peri-LN: a
    norm on each sublayer's input and on its output, and a final norm."""

    final_norm = True

    def __init__(
        self, d_model: int, norm_type: str, dropout: float, depth: StackDepth = StackDepth()
    ) -> None:
        super().__init__(d_model, norm_type, dropout, depth)
        self.out_norm = make_norm(norm_type, d_model)

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return x + self.dropout(self.out_norm(sublayer(self.norm(x))))


class OLMo2NormResidual(Residual):
    """x + Dropout(LN(Sublayer(x))) — the norm on the sublayer's output only (OLMo et al.
    2025, "2 OLMo 2 Furious", §3, "reordered norm"; Swin Transformer V2's res-post-norm, Liu
    et al. 2022): the sublayer reads the raw residual stream, which no norm bounds, so the
    stack ends with a norm."""

    final_norm = True

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return x + self.dropout(self.norm(sublayer(x)))


class DeepNormResidual(Residual):
    """LN(α·x + Dropout(Sublayer(x))): Post-LN with an up-weighted residual (Wang et al. 2022).

    α and the init gain β depend on the stack and the model's depth
    (:func:`deepnorm_constants`); β is applied by :meth:`initialize`.
    """

    def __init__(
        self, d_model: int, norm_type: str, dropout: float, depth: StackDepth = StackDepth()
    ) -> None:
        super().__init__(d_model, norm_type, dropout, depth)
        self.alpha = deepnorm_constants(depth)[0]

    @classmethod
    def initialize(cls, layers: nn.Module, depth: StackDepth) -> None:
        """DeepNet init: Xavier-normal with gain β for the FFN, W_V and W_O; gain 1 for W_Q
        and W_K (Wang et al. 2022, Fig. 2, ``deepnorm_init``)."""
        beta = deepnorm_constants(depth)[1]
        for module in layers.modules():
            if isinstance(module, MultiHeadAttention):
                nn.init.xavier_normal_(module.q_proj.weight, gain=1.0)
                nn.init.xavier_normal_(module.k_proj.weight, gain=1.0)
                nn.init.xavier_normal_(module.v_proj.weight, gain=beta)
                nn.init.xavier_normal_(module.out_proj.weight, gain=beta)
            elif isinstance(module, FeedForward | SwiGLU):
                for child in module.modules():
                    if isinstance(child, nn.Linear):
                        nn.init.xavier_normal_(child.weight, gain=beta)

    def forward(self, x: Tensor, sublayer: Sublayer) -> Tensor:
        return self.norm(self.alpha * x + self.dropout(sublayer(x)))


def deepnorm_constants(depth: StackDepth) -> tuple[float, float]:
    """(α, β) of one stack from Wang et al. 2022, Table 1 / Figure 2.

    encoder-only (N layers):  α = (2N)^¼,  β = (8N)^-¼
    decoder-only (M layers):  α = (2M)^¼,  β = (8M)^-¼
    encoder-decoder:          encoder α = 0.81(N⁴M)^(1/16), β = 0.87(N⁴M)^(-1/16)
                              decoder α = (3M)^¼,           β = (12M)^(-¼)
    """
    N, M = depth.n_encoder, depth.n_decoder
    if N and M:
        if depth.role == "encoder":
            return 0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)
        return (3 * M) ** 0.25, (12 * M) ** -0.25
    layers = N or M
    return (2 * layers) ** 0.25, (8 * layers) ** -0.25
