"""Encoder and decoder layers (Vaswani et al. 2017, §3.1), built from the same blocks.

    encoder layer:  x ← R(x, SelfAttn);  x ← R(x, FFN)
    decoder layer:  x ← R(x, CausalSelfAttn);  x ← R(x, CrossAttn(·, memory));  x ← R(x, FFN)

where R is the residual wrapper chosen by ``model.norm`` (Post-LN, Pre-LN, …).
A decoder layer without ``cross_attention`` is the GPT block of a decoder-only model.

``model.block=parallel`` computes both sublayers from the same normalised input and
adds them together (GPT-J, Wang & Komatsuzaki 2021; PaLM, Chowdhery et al. 2022, §2):

    parallel layer:  x ← x + Dropout(SelfAttn(LN(x))) + Dropout(FFN(LN(x)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from attnlab.components.core import locate
from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.dropout import Dropout
from attnlab.nn.kernels import AttentionInputs
from attnlab.nn.normalization import make_norm
from attnlab.nn.norms import StackDepth

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig


ONE_STACK = StackDepth()  # a layer built on its own: the default depth (one decoder layer)


def residual(cfg: ModelConfig, depth: StackDepth) -> nn.Module:
    """The ``model.norm`` placement around one sublayer, built by its config."""
    return cfg.component("norm").build(cfg, depth)


def attention(cfg: ModelConfig, causal: bool = False, cross: bool = False) -> nn.Module:
    """Self-attention with the ``model.attention`` kind (causal unless a prefix-LM), or the
    kind's own module where it replaces the projections (``heads``: mla); cross-attention
    is always full multi-head attention. A kind that is a whole token mixer (``mamba2``,
    ``gated_deltanet``) takes the attention's place, projections included."""
    if not cross and cfg.component("attention").mixer:
        return cfg.component("attention").build(cfg, causal)
    kind, causal = None, causal and not cfg.get("prefix_lm")
    heads = getattr(cfg.component("attention"), "heads", None)
    if heads is not None and not cross:
        return locate(heads)(cfg, causal)
    if cfg.attention != "full" and not cross:
        kind = cfg.component("attention").build(cfg, causal)
    return MultiHeadAttention(
        cfg.d_model, cfg.n_heads, cfg.attn_dropout, cfg.attn_impl,
        n_kv_heads=cfg.n_kv_heads, qk_norm=cfg.qk_norm, norm_type=cfg.norm_type, kind=kind,
        softcap=cfg.get("attn_softcap"),
    )  # fmt: skip


def feedforward(cfg: ModelConfig) -> nn.Module:
    """The ``model.ffn`` network, built by its config."""
    return cfg.component("ffn").build(cfg)


class EncoderLayer(nn.Module):
    """Bidirectional self-attention and a feed-forward network, each residual-wrapped."""

    cross_attn = None

    def __init__(self, cfg: ModelConfig, depth: StackDepth = ONE_STACK) -> None:
        super().__init__()
        self.self_attn, self.attn_residual = attention(cfg), residual(cfg, depth)
        self.ffn, self.ffn_residual = feedforward(cfg), residual(cfg, depth)

    def forward(self, x: Tensor, inputs: AttentionInputs) -> Tensor:
        x = self.attn_residual(x, lambda h: self.self_attn(h, inputs))
        return self.ffn_residual(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, optional cross-attention over the encoder output, FFN."""

    def __init__(
        self, cfg: ModelConfig, cross_attention: bool, depth: StackDepth = ONE_STACK
    ) -> None:
        super().__init__()
        self.self_attn, self.attn_residual = attention(cfg, causal=True), residual(cfg, depth)
        self.cross_attn = attention(cfg, cross=True) if cross_attention else None
        self.cross_residual = residual(cfg, depth) if cross_attention else None
        self.ffn, self.ffn_residual = feedforward(cfg), residual(cfg, depth)

    def forward(
        self,
        x: Tensor,
        inputs: AttentionInputs,
        memory: Tensor | None = None,
        memory_inputs: AttentionInputs | None = None,
        cache: Any = None,
    ) -> Tensor:
        """``cache``: the layer's decoding caches (``self_attn``, ``cross_attn``), or None."""
        own, cross = (None, None) if cache is None else (cache.self_attn, cache.cross_attn)
        x = self.attn_residual(x, lambda h: self.self_attn(h, inputs, cache=own))
        if self.cross_attn is not None:
            assert memory is not None and memory_inputs is not None
            assert self.cross_residual is not None
            x = self.cross_residual(
                x, lambda h: self.cross_attn(h, memory_inputs, memory=memory, cache=cross)
            )
        return self.ffn_residual(x, self.ffn)


class ParallelLayer(nn.Module):
    """x + Dropout(Attn(LN(x))) + Dropout(FFN(LN(x))): one shared norm, the two sublayers side
    by side (GPT-J; PaLM §2, "Parallel Layers"), so their input projections can be fused. An
    encoder or a decoder-only layer; it takes the arguments of either."""

    cross_attn = None

    def __init__(self, cfg: ModelConfig, causal: bool = False) -> None:
        super().__init__()
        self.norm = make_norm(cfg.norm_type, cfg.d_model)
        self.self_attn, self.ffn = attention(cfg, causal), feedforward(cfg)
        self.dropout = Dropout(cfg.dropout)

    def forward(
        self,
        x: Tensor,
        inputs: AttentionInputs,
        memory: Tensor | None = None,
        memory_inputs: AttentionInputs | None = None,
        cache: Any = None,
    ) -> Tensor:
        h = self.norm(x)
        attended = self.self_attn(h, inputs, cache=None if cache is None else cache.self_attn)
        return x + self.dropout(attended) + self.dropout(self.ffn(h))


def fsdp_wrap_policy() -> Any:
    """FSDP's ``auto_wrap_policy`` for ``trainer=fsdp``: one unit per Transformer layer, so a
    layer's weights are gathered when it runs and freed after (Zhao et al. 2023, "PyTorch
    FSDP", §3.1); the embeddings and output head stay in the root unit."""
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    return ModuleWrapPolicy({EncoderLayer, DecoderLayer, ParallelLayer})
