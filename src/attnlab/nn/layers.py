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

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.attention_kinds import ATTENTION_KINDS
from attnlab.nn.dropout import Dropout
from attnlab.nn.feedforward import FEEDFORWARDS
from attnlab.nn.kernels import AttentionInputs
from attnlab.nn.normalization import make_norm
from attnlab.nn.norms import RESIDUALS, StackDepth


@dataclass
class LayerSpec:
    """The block options every layer of a stack shares."""

    d_model: int
    n_heads: int
    d_ff: int
    dropout: float = 0.1
    attn_dropout: float = 0.0
    norm: str = "post"
    norm_type: str = "layernorm"
    ffn: str = "relu"
    attn_impl: str = "sdpa"
    depth: StackDepth = StackDepth()  # which stack, how deep the model is (DeepNorm's α)
    n_kv_heads: int | None = None  # grouped-query attention; None: n_heads
    qk_norm: bool = False
    block: str = "sequential"  # sequential | parallel (GPT-J, PaLM)
    attention_kind: str = "full"  # model.attention, for self-attention
    kind_spec: Any = None  # its KindSpec (attnlab.nn.attention_kinds)

    def residual(self) -> nn.Module:
        return RESIDUALS.get(self.norm)(self.d_model, self.norm_type, self.dropout, self.depth)

    def attention(self, cross: bool = False) -> MultiHeadAttention:
        """Self-attention with the stack's attention kind; cross-attention is always full."""
        kind = None
        if self.attention_kind != "full" and not cross:
            kind = ATTENTION_KINDS.get(self.attention_kind)(self.kind_spec)
        return MultiHeadAttention(
            self.d_model, self.n_heads, self.attn_dropout, self.attn_impl,
            n_kv_heads=self.n_kv_heads, qk_norm=self.qk_norm, norm_type=self.norm_type,
            kind=kind,
        )  # fmt: skip

    def feedforward(self) -> nn.Module:
        return FEEDFORWARDS.get(self.ffn)(self.d_model, self.d_ff, self.dropout)


class EncoderLayer(nn.Module):
    """Bidirectional self-attention and a feed-forward network, each residual-wrapped."""

    cross_attn = None

    def __init__(self, spec: LayerSpec) -> None:
        super().__init__()
        self.self_attn, self.attn_residual = spec.attention(), spec.residual()
        self.ffn, self.ffn_residual = spec.feedforward(), spec.residual()

    def forward(self, x: Tensor, inputs: AttentionInputs) -> Tensor:
        x = self.attn_residual(x, lambda h: self.self_attn(h, inputs))
        return self.ffn_residual(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, optional cross-attention over the encoder output, FFN."""

    def __init__(self, spec: LayerSpec, cross_attention: bool) -> None:
        super().__init__()
        self.self_attn, self.attn_residual = spec.attention(), spec.residual()
        self.cross_attn = spec.attention(cross=True) if cross_attention else None
        self.cross_residual = spec.residual() if cross_attention else None
        self.ffn, self.ffn_residual = spec.feedforward(), spec.residual()

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

    def __init__(self, spec: LayerSpec) -> None:
        super().__init__()
        self.norm = make_norm(spec.norm_type, spec.d_model)
        self.self_attn, self.ffn = spec.attention(), spec.feedforward()
        self.dropout = Dropout(spec.dropout)

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
