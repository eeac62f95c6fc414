"""The mixture-of-experts feed-forward's config (``model.ffn=moe``; the module is
:mod:`attnlab.nn.moe`): the keys only it reads, refused for every other ``model.ffn``."""

from __future__ import annotations

import math
from typing import Any

from attnlab.components.core import Key, ModelKeys, at_least_zero, positive
from attnlab.components.layers import FEEDFORWARDS, FeedForwardConfig
from attnlab.errors import ConfigError


def non_negative(key: str, value: Any) -> None:
    if isinstance(value, bool) or not math.isfinite(float(value)) or float(value) < 0:
        raise ConfigError(f"model.{key}={value} must be a finite number >= 0 (0: off)")


@FEEDFORWARDS.declare
class MixtureOfExpertsConfig(FeedForwardConfig):
    """FFN_shared(x) + Σ_top-k gᵢ·FFNᵢ(x): each token routed to k of E SwiGLU experts, dropless
    (Shazeer et al. 2017; Switch, Fedus et al. 2022; DeepSeekMoE, Dai et al. 2024).

    ``model.d_ff`` is each expert's width (null: ⅔·4·d_model, a dense SwiGLU's)."""

    name, builds, gated = "moe", "attnlab.nn.moe:MixtureOfExperts", True
    keys = {
        **FeedForwardConfig.keys,
        "moe_experts": Key(8, int, positive, "routed experts E, each a SwiGLU d_ff wide"),
        "moe_top_k": Key(2, int, positive, "experts each token is routed to (k ≤ E)"),
        "moe_shared_experts": Key(0, int, at_least_zero, "experts every token passes through, "
                                  "besides its k (DeepSeekMoE, Dai et al. 2024)"),
        "moe_aux_coef": Key(0.01, float, non_negative, "α of the load-balancing loss "
                            "α·E·Σ fᵢ·Pᵢ (Switch, Fedus et al. 2022, eq. 4); 0: off"),
        "moe_bias_rate": Key(0.0, float, non_negative, "γ of the auxiliary-loss-free "
                             "balancing bias (DeepSeek-V3, §2.1.2); 0: off"),
        "moe_z_coef": Key(0.001, float, non_negative, "β of the router z-loss "
                          "(ST-MoE, Zoph et al. 2022, eq. 5); 0: off"),
    }  # fmt: skip

    @classmethod
    def build(cls, cfg: ModelKeys) -> Any:
        return cls.target()(
            cfg.d_model, cfg.ff_dim, cfg.dropout, n_experts=cfg.moe_experts,
            top_k=cfg.moe_top_k, n_shared=cfg.moe_shared_experts,
            aux_coef=float(cfg.moe_aux_coef), bias_rate=float(cfg.moe_bias_rate),
            z_coef=float(cfg.moe_z_coef),
        )  # fmt: skip

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        if cfg.moe_top_k > cfg.moe_experts:
            raise ConfigError(
                f"model.moe_top_k={cfg.moe_top_k} exceeds model.moe_experts={cfg.moe_experts}; "
                "route each token to at most as many experts as there are"
            )
