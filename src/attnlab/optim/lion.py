"""Lion, EvoLved Sign Momentum (Chen et al. 2023, "Symbolic Discovery of Optimization
Algorithms", Alg. 2; torch has none). Per parameter, with gradient g and momentum m::

    c = β₁·m + (1 − β₁)·g           # interpolate: the update's direction
    θ ← θ − η·(sign(c) + λ·θ)       # every entry moves by ±η, plus decoupled decay
    m ← β₂·m + (1 − β₂)·g           # the momentum tracks g with the slower β₂

One state tensor per parameter (AdamW keeps two).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, Alg. 2) with decoupled weight decay ``weight_decay`` (λ)."""

    def __init__(
        self, params: Iterable[Any], lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:  # fmt: skip
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, decay = group["lr"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad: Tensor = param.grad
                state = self.state[param]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                momentum = state["exp_avg"]
                direction = momentum.mul(beta1).add_(grad, alpha=1 - beta1).sign_()
                param.mul_(1 - lr * decay).add_(direction, alpha=-lr)
                momentum.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss
