"""The rules between components, in one table: combinations that cannot work, each with the
one line that says why and what to choose instead.

A component's rules about its own keys live in its config's ``check`` (RoPE rotates pairs
of a head's dimensions); what is here involves two parts at once. Every pair of registered
values is either accepted and builds, or refused by a row of this table or a ``check``
(``tests/test_components.py`` enumerates them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnlab.components.core import ModelKeys
from attnlab.errors import ConfigError


@dataclass(frozen=True)
class Refusal:
    """``when`` the model's components meet it, the combination is refused: ``says``."""

    when: Callable[[ModelKeys], bool]
    says: Callable[[ModelKeys], str]


def _sparse(m: ModelKeys) -> bool:
    return "attention" in m.families and m.component("attention").sparse


RULES: tuple[Refusal, ...] = (
    Refusal(  # a 2-D scheme places patches on a grid that only the ViT's inputs have
        lambda m: "pos" in m.families and m.component("pos").needs_grid
        and not m.architecture.patch_grid,
        lambda m: f"model.pos={m.pos} places image patches on a grid and model={m.name} reads "
        "sequences; use it with model=vit, or choose a 1-D scheme (learned, sinusoidal, rope, …)",
    ),
    Refusal(  # ConvS2S has no dot-product self-attention to rotate or bias
        lambda m: "pos" in m.families and "attention" not in m.families
        and m.component("pos").in_attention,
        lambda m: f"model.pos={m.pos} acts inside dot-product self-attention, which "
        f"model={m.name} has none of; use learned (the paper's), sinusoidal or none",
    ),
    Refusal(  # GPT-J / PaLM's parallel layer shares one Pre-LN norm
        lambda m: m.get("block") == "parallel" and m.norm != "pre",
        lambda m: "model.block=parallel shares one Pre-LN norm between attention and the FFN "
        f"(GPT-J, PaLM); it cannot be combined with model.norm={m.norm}: use model.norm=pre or "
        "model.block=sequential",
    ),
    Refusal(
        lambda m: m.get("block") == "parallel" and m.name == "encoder_decoder",
        lambda m: "model.block=parallel has no place for cross-attention; use it with "
        "model=decoder_only, encoder_only or vit, or model.block=sequential",
    ),
    Refusal(  # a pattern of its own takes no bias on the full score matrix
        lambda m: _sparse(m) and m.component("pos").score_bias,
        lambda m: f"model.attention={m.attention} builds its own sparse or kernelised pattern "
        f"and takes no additive position bias (model.pos={m.pos}); use model.pos=rope, "
        "sinusoidal, learned or none",
    ),
    Refusal(
        lambda m: _sparse(m) and bool(m.get("prefix_lm")),
        lambda m: f"model.attention={m.attention} has no prefix-LM pattern; use "
        "model.prefix_lm=false or model.attention=full",
    ),
    Refusal(  # a decoder's self-attention is causal (a prefix-LM's too, after the prefix)
        lambda m: m.architecture.causal and "attention" in m.families
        and not m.component("attention").causal_ok,
        lambda m: m.component("attention").causal_error,
    ),
    Refusal(  # soft-capping rewrites the logits of a softmax over the keys
        lambda m: m.get("attn_softcap") is not None and "attention" in m.families
        and not m.component("attention").softcap_ok,
        lambda m: f"model.attn_softcap caps the logits of a softmax over the keys, which "
        f"model.attention={m.attention} does not compute; use model.attention=full, "
        "sliding_window, longformer or bigbird, or remove model.attn_softcap",
    ),
    Refusal(
        lambda m: m.get("param") == "mup" and m.get("attention") == "linear",
        lambda m: "model.param=mup scales softmax attention logits by 1/d_head and "
        "model.attention=linear has none; use model.param=sp or a softmax attention kind",
    ),
    Refusal(  # μP's widths and 1/d_head logits are set for W_Q, W_K, W_V of MultiHeadAttention
        lambda m: m.get("param") == "mup" and m.get("attention") == "mla",
        lambda m: "model.param=mup is set up for MultiHeadAttention's W_Q, W_K, W_V and "
        "model.attention=mla replaces them; use model.param=sp with mla",
    ),
)


def check_rules(cfg: ModelKeys) -> None:
    """Raise the first refusal that ``cfg``'s components meet."""
    for rule in RULES:
        if rule.when(cfg):
            raise ConfigError(rule.says(cfg))
