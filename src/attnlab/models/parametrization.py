"""``model.param``: standard parametrisation (SP) or the Maximal Update Parametrisation (μP).

μP (Yang et al. 2022, "Tensor Programs V", Table 3 and its output-multiplier form, Table 8)
makes every layer's update Θ(1) per coordinate as the width grows, so a learning rate tuned
at a small width stays right at a large one. For Adam, with the width multiplier
m = fan_in / fan_in at ``model.mup_base_width``:

===========================  ===================  ==================  =====================
weights                      init variance        multiplier          Adam learning rate
===========================  ===================  ==================  =====================
input (embeddings, position  constant in width    1                   η
tables, patch embedding),
biases, norm gains
hidden (W_Q, W_K, W_V, W_O,  ∝ 1/fan_in           1                   η / m
the FFN's matrices)
output (the LM head, the     constant in width    1/m                 η
classification head)
===========================  ===================  ==================  =====================

and the attention logits are q·k/d_head instead of q·k/√d_head (§ "μP for Transformers",
Appendix J.1): attnlab scales them by √d_base/d_head, 1/d_head with the constant that makes
them the paper's 1/√d_head at the base width. Tied embeddings follow Table 8: the shared
matrix is an input weight (constant init, learning rate η) and the readout still applies
its 1/m multiplier ("μP with weight sharing", Appendix B). Each constant is chosen so that,
at the base width, μP *is* SP: the same initialisation, forward and learning rates, bit for
bit. Tensor Programs V tunes two more constants at the base width and transfers them with
the learning rate (Fig. 4; the attention temperature in its GPT-3 search):
``model.mup_output_mult`` α_output multiplies the readouts (α_output·base/width) and
``model.mup_attn_mult`` α_attn the attention logits (α_attn·q·k·√d_base/d_head); at their
default 1, μP at the base width is SP. Hidden weights' weight decay is multiplied by m as the
learning rate is divided by it (as Microsoft's ``mup.MuAdamW`` does), so that AdamW's decay
per step, lr·λ, does not change with width.

Width is ``d_model`` (the heads keep their number and grow in size; d_ff and the other
widths keep their ratio to it). Which dimension of a weight is a width dimension is read,
as ``mup.set_base_shapes`` reads it, by comparing its shape with the same weight of the
model built at the base width: a dimension that differs is a width. The architectures with
Transformer stacks take μP; the recurrent and convolutional baselines do not read
``model.param`` (:class:`attnlab.components.layers.MaximalUpdateConfig` declares its keys and
checks).

attnlab implements the table itself rather than through Microsoft's ``mup`` package:
``mup`` requires torchvision, pandas and seaborn (a second torch build on CPU machines),
replaces the readout with its own layer class and re-initialises through its own functions,
which would bypass ``model.init``; here every ``model.init`` scheme keeps its own law and μP
only rescales it (:func:`apply_mup`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import ConfigError
from attnlab.nn.kernels import soft_cap

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig

class Readout(nn.Linear):
    """An output layer: logits = multiplier · x Wᵀ + b. The multiplier is 1 under SP and
    α_output·base_width/width under μP (Tensor Programs V, Table 8; α_output is
    ``model.mup_output_mult``, 1 by default); a zero-initialised readout
    would change only its initialisation, never the multiplier."""

    multiplier: float = 1.0
    softcap: float | None = None  # model.final_softcap: logits ← c·tanh(logits/c) (Gemma 2 §2)

    def forward(self, x: Tensor) -> Tensor:
        if self.multiplier == 1.0:
            logits = super().forward(x)
        else:  # the multiplier scales x Wᵀ, not the bias (mup's MuReadout scales the input)
            logits = F.linear(x * self.multiplier, self.weight, self.bias)
        return logits if self.softcap is None else soft_cap(logits, self.softcap)


def base_config(cfg: ModelConfig) -> ModelConfig:
    """The same model at ``model.mup_base_width``: every width scaled by base/d_model."""
    ratio = cfg.mup_base_width / cfg.d_model
    d_ff = None if cfg.d_ff is None else max(1, round(cfg.d_ff * ratio))
    return cfg.replace(d_model=cfg.mup_base_width, d_ff=d_ff)


@dataclass(frozen=True)
class Width:
    """How one weight scales with width: its width dimensions and fan-in multiplier."""

    infinite: tuple[bool, ...]  # per dimension: does it grow with width
    fan_in_mult: float  # fan_in / fan_in at the base width (1 when fan_in is not a width)

    @property
    def hidden(self) -> bool:
        """A matrix whose fan-in and fan-out both grow with width (μP's hidden weights)."""
        return len(self.infinite) >= 2 and self.infinite[0] and any(self.infinite[1:])


def _fan_in(shape: torch.Size) -> int:
    return int(math.prod(shape[1:])) if len(shape) > 1 else int(shape[0])


def _fan_out(shape: torch.Size) -> int:
    return int(shape[0]) * int(math.prod(shape[2:]))


def widths(model: nn.Module, base: nn.Module) -> dict[str, Width]:
    """Each parameter of ``model`` against the same parameter of ``base``."""
    base_shapes = {name: p.shape for name, p in base.named_parameters()}
    out = {}
    for name, p in model.named_parameters():
        shape = base_shapes.get(name)
        if shape is None or len(shape) != p.dim():
            raise ConfigError(
                f"model.param=mup: parameter {name} has no counterpart at "
                "model.mup_base_width; use model.param=sp for this architecture"
            )
        infinite = tuple(a != b for a, b in zip(p.shape, shape, strict=True))
        out[name] = Width(infinite, _fan_in(p.shape) / _fan_in(shape))
    return out


# the laws by which the initialisation schemes set a weight's standard deviation from its
# shape (model.init, the residual schemes' re-initialisation, torch's defaults)
LAWS = {
    "constant": lambda shape: 1.0,  # N(0, 0.02), position tables, [CLS]
    "xavier": lambda shape: math.sqrt(2.0 / (_fan_in(shape) + _fan_out(shape))),
    "fan_in": lambda shape: _fan_in(shape) ** -0.5,  # tensor2tensor's embeddings, kaiming
}


def _law(target: Tensor, base: Tensor) -> str:
    """The law that maps the base weight's spread to the target's most closely: read from
    the two initialisations (log-ratio of their standard deviations), so every scheme keeps
    its own law and μP only corrects it."""
    observed = math.log(target.float().std().item() / base.float().std().item())
    return min(LAWS, key=lambda k: abs(observed - math.log(LAWS[k](target.shape)
                                                            / LAWS[k](base.shape))))  # fmt: skip


@torch.no_grad()
def apply_mup(model: nn.Module, cfg: ModelConfig) -> None:
    """Turn a freshly initialised SP model into its μP counterpart, in place.

    Rescales each weight's initialisation (input and output weights: the spread they have at
    the base width; hidden weights: that spread × √(base fan_in / fan_in)), scales attention
    logits, the embedding multiplier and the readouts, and records each parameter's Adam
    learning-rate multiplier in ``model.lr_multipliers`` (by parameter name).
    """
    from attnlab.models.stack import TokenEmbedding
    from attnlab.nn.attention import MultiHeadAttention

    base_cfg = base_config(cfg)
    with torch.random.fork_rng(devices=[]):  # the base model draws nothing from the run's RNG
        base = type(model)(base_cfg, model.task)
    shapes = widths(model, base)
    base_params = dict(base.named_parameters())
    multipliers: dict[str, float] = {}
    for name, p in model.named_parameters():
        width, reference = shapes[name], base_params[name]
        multipliers[name] = 1.0 / width.fan_in_mult if width.hidden else 1.0
        if not any(width.infinite) or p.numel() < 2 or float(reference.std()) == 0.0:
            continue  # same shape as at the base width, or constant (zeros, ones)
        law = LAWS[_law(p, reference)]
        target = law(reference.shape) / law(p.shape)
        if width.hidden:
            target /= math.sqrt(width.fan_in_mult)
        p.mul_(target)
    mult = cfg.mup_base_width / cfg.d_model
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            # q·k √d_base / d_head: SDPA divides by √d_head, so q is scaled by √(d_base/d_head)
            module.query_scale = cfg.mup_attn_mult * math.sqrt(
                (cfg.mup_base_width // cfg.n_heads) / module.d_head)
        elif isinstance(module, TokenEmbedding) and cfg.scale_embeddings:
            module.scale = math.sqrt(cfg.mup_base_width)  # √d_model at the base width
        elif isinstance(module, Readout):
            module.multiplier = cfg.mup_output_mult * mult
    model.lr_multipliers = multipliers


def readout(cfg: ModelConfig, d_in: int, d_out: int, bias: bool = True) -> Readout:
    """An output layer built outside the architecture (a task's classification head): torch's
    default initialisation (spread ∝ fan_in^-½) and, under μP, the spread it has at the base
    width with the 1/m multiplier."""
    layer = Readout(d_in, d_out, bias=bias)
    if cfg.get("param") == "mup":
        mult = cfg.mup_base_width / cfg.d_model
        with torch.no_grad():
            layer.weight.mul_(math.sqrt(1.0 / mult))
            if layer.bias is not None:
                layer.bias.mul_(math.sqrt(1.0 / mult))  # the bias's bound is fan_in^-½ too
        layer.multiplier = cfg.mup_output_mult * mult
    return layer


def lr_multipliers(model: nn.Module) -> dict[str, float]:
    """Each parameter's learning-rate multiplier (1 everywhere under SP), by the parameter's
    name in ``model``; a task's own parameters (its classification head) have 1."""
    out: dict[str, float] = {}
    for prefix, module in model.named_modules():
        table = getattr(module, "lr_multipliers", None)
        if table:
            start = f"{prefix}." if prefix else ""
            out.update({start + name: m for name, m in table.items()})
    return out
