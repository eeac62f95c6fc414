"""Weight initialisation schemes (``model.init``); a residual scheme may re-initialise after."""

from __future__ import annotations

import math

from torch import nn

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.feedforward import FeedForward, SwiGLU
from attnlab.nn.latent_attention import MultiHeadLatentAttention
from attnlab.nn.positions import Positions


def initialize(
    model: nn.Module, scheme: str, d_model: int, n_layers: int, zero_residual: bool = False
) -> None:
    """Initialise every weight of ``model`` in place.

    * ``paper``:  Xavier-uniform linear maps, zero biases, token embeddings
      N(0, d_model^-½) so that embedding·√d_model has unit scale (tensor2tensor).
    * ``xavier``: Xavier-uniform for every matrix, embeddings included
      (the Annotated Transformer / reference PyTorch implementation).
    * ``gpt2``:   N(0, 0.02) everywhere, residual output projections (W_O and
      the FFN's second map) N(0, 0.02/√(2·n_layers)) (Radford et al. 2019).

    ``zero_residual`` (``model.zero_init_residual``): then the residual output projections
    W_O and W₂ are zero (their biases are under every scheme), so every sublayer adds nothing
    at the first step (a Pre-LN layer is the identity) while their own gradients are not
    zero (modded-nanogpt's ``c_proj``; Fixup, Zhang et al. 2019, zeroes the last layer of
    each residual branch).

    A token mixer's projections (Mamba-2's, Gated DeltaNet's) follow the scheme (its output
    projection as W_O); its ``own_init()`` parameters (A, Δ's bias, conv, norm…) keep the
    initialisation of ``mamba_ssm`` / flash-linear-attention.
    """
    residual_outputs: set = set()
    stacked: dict = {}
    own: set = set()
    for module in model.modules():
        if getattr(module, "mixer", False) and hasattr(module, "own_init"):
            residual_outputs.add(module.out_proj.weight)
            own.update(module.own_init())
        if isinstance(module, MultiHeadAttention | MultiHeadLatentAttention):
            residual_outputs.add(module.out_proj.weight)
        if isinstance(module, MultiHeadAttention):
            stacked[module.in_proj.weight] = module.split_sizes
        if isinstance(module, FeedForward | SwiGLU):
            residual_outputs.add(module.linear2.weight)
    position_tables = {
        p for m in model.modules() if isinstance(m, Positions) for p in m.parameters()
    }
    for name, param in model.named_parameters():
        if param in own:
            continue
        if param in position_tables:
            nn.init.normal_(param, std=0.02)
        elif param.dim() < 2:
            if name.endswith("bias"):
                nn.init.zeros_(param)
        elif scheme == "gpt2":
            std = 0.02 / math.sqrt(2 * n_layers) if param in residual_outputs else 0.02
            nn.init.normal_(param, std=std)
        elif scheme == "paper" and "weight_table" in name:
            nn.init.normal_(param, std=d_model**-0.5)
        elif param in stacked:  # W_Q, W_K, W_V: each its own matrix
            for part in param.split(stacked[param]):
                nn.init.xavier_uniform_(part)
        else:
            nn.init.xavier_uniform_(param)
    if zero_residual:
        for weight in residual_outputs:
            nn.init.zeros_(weight)
