"""A stack of layers with its embeddings, positions and masks.

The three architectures differ only in which stacks they own and how they
connect them; everything shared lives here. A decoding cache (``cache``, from
:mod:`attnlab.inference.caches`) builds the attention inputs of the new tokens over
what it holds and gives each layer its own caches.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attnlab.components.attention import layer_kinds, reads_window
from attnlab.model_config import ModelConfig
from attnlab.nn.dropout import Dropout
from attnlab.nn.kernels import AttentionInputs
from attnlab.nn.normalization import DynamicTanh
from attnlab.nn.norms import StackDepth, make_norm
from attnlab.nn.positions import Positions
from attnlab.nn.visibility import Visibility


class TokenEmbedding(nn.Module):
    """Token embedding; the paper multiplies it by √d_model (§3.4)."""

    def __init__(self, vocab_size: int, d_model: int, scale: bool) -> None:
        super().__init__()
        self.weight_table = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0

    @property
    def weight(self) -> nn.Parameter:
        return self.weight_table.weight

    def forward(self, tokens: Tensor) -> Tensor:
        return self.weight_table(tokens) * self.scale


def attention_mask(
    q_index: Tensor,
    k_index: Tensor,
    key_real: Tensor | None,
    causal: bool,
    prefix_len: Tensor | None = None,
    documents: Tensor | None = None,
) -> Tensor | None:
    """Boolean mask (B|1, 1, Tq, Tk), True where query i may attend to key j: a stack's
    rules (causal, prefix-LM, documents, padding; a query always sees itself) lowered to a
    dense mask by :class:`~attnlab.nn.visibility.Visibility`."""
    return Visibility(q_index, k_index, causal, prefix_len, documents, key_real,
                      sees_itself=True).dense()  # fmt: skip


def make_positions(cfg: ModelConfig, causal: bool, grid: tuple[int, int] | None) -> Positions:
    """The ``model.pos`` scheme, built by its config; image schemes also get the patch grid."""
    return cfg.component("pos").build(cfg, causal, grid)


def drop_biases(*modules: nn.Module | None) -> None:
    """``model.bias=false``: every linear map and norm inside ``modules`` loses its bias,
    y = xW instead of y = xW + b, and LN(x) = g ⊙ (x − μ)/σ without β.

    "No biases were used in any of the dense kernels or layer norms. We found this to
    result in increased training stability for large models" (Chowdhery et al. 2022,
    PaLM, §2); nanoGPT's ``bias=False`` (its default) and LLaMA likewise. The weights
    are drawn as with biases (the same random stream), then the biases are removed
    before ``model.init``; registered feed-forward and residual classes built from
    ``nn.Linear`` and ``nn.LayerNorm`` need nothing of their own (DyT's β goes as a norm's).
    """
    for module in modules:
        for child in module.modules() if module is not None else ():
            if isinstance(child, nn.Linear | nn.LayerNorm | DynamicTanh) and child.bias is not None:
                child.register_parameter("bias", None)


def start_dyt_from(alpha0: float, *modules: nn.Module | None) -> None:
    """``model.dyt_alpha0``: every DyT inside ``modules`` — around the sublayers, on queries
    and keys, the embedding and final norms, a registered residual's — starts from α = α₀."""
    for module in modules:
        for child in module.modules() if module is not None else ():
            if isinstance(child, DynamicTanh):
                nn.init.constant_(child.alpha, alpha0)


class LayerPattern:
    """The config each layer of a stack is built from: ``model.attention`` in every layer, or
    with ``model.attention=hybrid`` the kind ``model.layer_pattern`` gives it (Gemma 3's
    five sliding-window layers to one global, Gemma Team 2025, §2), and which layers
    rotate with ``model.rope_theta_local`` (the local ones; Gemma 3 §2: 10k local, 1M
    global). Not a kernel (``mixer``: no kind's kernel tests build it); each layer's kind is."""

    mixer, causal_ok, pattern = True, True, None

    def __init__(self, cfg: ModelConfig, n_layers: int) -> None:
        self.kinds = layer_kinds(cfg, n_layers)
        self.configs = [cfg if kind == cfg.attention else cfg.replace(attention=kind)
                        for kind in self.kinds]  # fmt: skip
        theta_local = cfg.get("rope_theta_local")
        self.local = [theta_local is not None and reads_window(kind) for kind in self.kinds]
        self.local_theta = cfg.replace(rope_theta=theta_local) if any(self.local) else None

    @property
    def sparse(self) -> bool:
        """Every layer's kind builds its own pattern (no stack-wide dense mask needed)."""
        return all(c.component("attention").sparse for c in self.configs)


class TransformerStack(nn.Module):
    """Embed tokens, add positions, apply dropout, run the layers, final norm.

    ``model.embed_norm`` normalises the summed embeddings before the dropout, as BERT does:
    E = Dropout(LN(token + position)) (Devlin et al. 2019, §3.1; ``BertEmbeddings``).

    ``causal`` stacks are decoders (masked self-attention); ``cross`` adds
    cross-attention over an encoder's output.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        embedding: TokenEmbedding | None,
        n_layers: int,
        causal: bool,
        cross: bool = False,
        depth: StackDepth | None = None,
        grid: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.causal, self.pad_id = causal, cfg.get("pad_id")  # a ViT's stack reads no tokens
        self.checkpointing = cfg.activation_checkpointing
        layout = LayerPattern(cfg, n_layers)
        self.sparse = layout.sparse  # mla: full attention's inputs
        self.embedding = embedding
        # relative buckets look both ways unless attention is purely causal: a prefix-LM
        # sees keys to its right inside the prefix (Mesh TF, Unitransformer.fully_autoregressive)
        fully_causal = causal and not cfg.get("prefix_lm")
        self.positions = make_positions(cfg, fully_causal, grid)
        first = layout.configs[0]  # a hybrid with mla has mla in every layer (its check)
        rotary_dim = getattr(first.component("attention"), "rotary_dim", None)
        if rotary_dim is not None:  # mla rotates its decoupled d_h^R dimensions only
            self.positions.rotary_dim = rotary_dim(first)
        # the local layers' RoPE base (model.rope_theta_local), a second rotation table
        self.local_positions = (None if layout.local_theta is None
                                else make_positions(layout.local_theta, fully_causal, grid))
        self.local_layers = [i for i, local in enumerate(layout.local) if local]
        self.dropout = Dropout(cfg.dropout)
        self.embed_norm = make_norm(cfg.norm_type, cfg.d_model) if cfg.embed_norm else None
        depth = depth or StackDepth()

        block = cfg.component("block")
        self.layers = nn.ModuleList(block.build(layer_cfg, causal, cross, depth)
                                    for layer_cfg in layout.configs)  # fmt: skip
        for number, layer in enumerate(self.layers, start=1):  # differential attention's λ_init(l)
            kind = getattr(getattr(layer, "self_attn", None), "kind", None)
            if hasattr(kind, "layer_number"):
                kind.layer_number = number
        self.final_norm = (
            make_norm(cfg.norm_type, cfg.d_model)
            if cfg.component("norm").target().final_norm
            else nn.Identity()
        )
        if not cfg.bias:
            drop_biases(self.layers, self.embed_norm, self.final_norm)
        if cfg.norm_type == "dyt":
            start_dyt_from(cfg.dyt_alpha0, self.layers, self.embed_norm, self.final_norm)

    def forward(
        self,
        tokens: Tensor | None,
        positions: Tensor | None = None,
        key_real: Tensor | None = None,
        memory: Tensor | None = None,
        memory_real: Tensor | None = None,
        cache: Any = None,
        prefix_len: Tensor | None = None,
        embeds: Tensor | None = None,
        documents: Tensor | None = None,
    ) -> Tensor:
        """tokens (B, T) -> hidden states (B, T, d_model).

        ``documents`` (B, T): which document of the block each token belongs to; attention
        stays within a document (:class:`~attnlab.nn.visibility.Visibility`). Fresh sequences
        only (no cache).

        ``embeds`` (B, T, d_model) replaces ``tokens`` (pass None) for inputs that are
        not tokens, such as image patches; positions are added to them all the same.

        ``key_real`` marks real (non-padding) tokens; by default every token
        that is not ``pad_id``. A causal stack over a fresh sequence skips that
        default: padding there trails the real tokens (attnlab's batches are
        right-padded), causality already hides it from them, and not looking
        keeps the fused causal kernel and avoids a host sync. Left-padded input
        must pass ``key_real`` (generation does). With a cache, tokens are the
        new ones only, and ``cache.layers[i]`` are layer i's caches.
        """
        if cache is None:
            positions, inputs = self.attention_inputs(
                tokens, positions, key_real, prefix_len, embeds=embeds, documents=documents)
        else:
            positions, inputs = cache.attention_inputs(self, tokens, positions, key_real,
                                                       prefix_len)  # fmt: skip

        memory_inputs = None
        if memory is not None:
            memory_inputs = AttentionInputs(mask=Visibility.real_keys(memory_real).dense())

        x = embeds if embeds is not None else self.embedding(tokens)
        x = self.positions.embed(x, positions)
        x = self.dropout(x if self.embed_norm is None else self.embed_norm(x))
        local_inputs = inputs
        if self.local_positions is not None:  # the same positions, rotated by θ_local
            local_inputs = dataclasses.replace(inputs, rope=self.local_positions.rotary(positions))
        for i, layer in enumerate(self.layers):
            own = local_inputs if i in self.local_layers else inputs
            if self.causal:
                layer_cache = cache.layers[i] if cache is not None else None
                args = (x, own, memory, memory_inputs, layer_cache)
            else:
                args = (x, own)
            if self.checkpointing and self.training:
                x = checkpoint(layer, *args, use_reentrant=False)
            else:
                x = layer(*args)
        return self.final_norm(x)

    def attention_inputs(
        self, tokens: Tensor | None, positions: Tensor | None, key_real: Tensor | None,
        prefix_len: Tensor | None, history: Any = None, embeds: Tensor | None = None,
        documents: Tensor | None = None,
    ) -> tuple[Tensor, AttentionInputs]:  # fmt: skip
        """The positions of the new tokens and what every self-attention layer needs.

        ``history``: a dynamic decoding cache, whose ``length`` keys come before the new
        tokens and whose ``append`` records their positions and padding."""
        B, T = embeds.shape[:2] if embeds is not None else tokens.shape  # type: ignore[union-attr]
        device = (embeds if embeds is not None else tokens).device  # type: ignore[union-attr]
        cache = history
        offset = cache.length if cache is not None else 0
        q_index = torch.arange(offset, offset + T, device=device)
        # compiled training reads no tensor on the host (each read is a graph break): explicit
        # positions are the ViT's patch indices, which its grid and table always cover, and
        # an all-real padding mask hides nothing
        compiled_training = torch.compiler.is_compiling() and self.training
        if positions is None:
            positions = q_index
            self.positions.check(positions, last=offset + T - 1)
        elif not compiled_training:
            self.positions.check(positions)
        if key_real is None and tokens is not None and (not self.causal or cache is not None):
            is_pad = tokens == self.pad_id
            key_real = ~is_pad if compiled_training or bool(is_pad.any()) else None
        k_positions, k_real = positions, key_real
        if cache is not None:
            k_positions, k_real = cache.append(positions, key_real)
        visibility = Visibility(q_index, torch.arange(offset + T, device=device), self.causal,
                                prefix_len, documents, k_real, sees_itself=True,
                                fresh=offset == 0)  # fmt: skip
        bias = self.positions.bias(positions, k_positions)
        content = self.positions.content_dependent
        # pure causal self-attention over a fresh sequence: the fused kernel applies
        # causality itself (flash / memory-efficient path, no (T, T) mask); a kind builds its
        # own pattern from the padding; one new query over an unpadded cache sees every key
        plain = visibility.plain_causal and bias is None and not content and not self.sparse
        single_step = cache is not None and offset > 0 and T == 1 and k_real is None
        dense = not (plain or single_step or self.sparse)
        inputs = AttentionInputs(
            mask=visibility.dense() if dense else None,
            bias=bias,
            rope=self.positions.rotary(positions),
            is_causal=plain,
            scores=partial(self.positions.scores, q_pos=positions, k_pos=k_positions)
            if content
            else None,
            key_real=k_real,
        )

        return positions, inputs
