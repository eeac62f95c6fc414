"""A stack of layers with its embeddings, positions, masks and decoding cache.

The three architectures differ only in which stacks they own and how they
connect them; everything shared lives here.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attnlab.models.config import ModelConfig
from attnlab.nn.attention import AttentionInputs, StaticLayerCache
from attnlab.nn.dropout import Dropout
from attnlab.nn.layers import DecoderLayer, EncoderLayer, LayerSpec, ParallelLayer
from attnlab.nn.norms import RESIDUALS, StackDepth, make_norm
from attnlab.nn.positions import POSITIONS, Positions


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


class DecodingCache:
    """Keys/values of earlier steps for incremental decoding, one dict per layer.

    Also remembers the positions and padding of every cached key, so masks and
    relative position biases for new queries cover the whole history.
    """

    def __init__(self, n_layers: int) -> None:
        self.layers: list[dict[str, Tensor]] = [{} for _ in range(n_layers)]
        self.positions: Tensor | None = None  # (B|1, T_cached)
        self.key_real: Tensor | None = None  # (B, T_cached) or None when no padding

    @property
    def length(self) -> int:
        return 0 if self.positions is None else self.positions.size(-1)

    def append(self, positions: Tensor, key_real: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Record new tokens; return the positions and padding of all keys so far."""
        positions = positions if positions.dim() == 2 else positions.unsqueeze(0)
        n_old, n_new = self.length, positions.size(-1)
        if self.positions is not None:
            B = max(self.positions.size(0), positions.size(0))
            positions = torch.cat([self.positions.expand(B, -1), positions.expand(B, -1)], -1)
        if self.key_real is not None or (key_real is not None and n_old):
            rows = (key_real if key_real is not None else self.key_real).size(0)
            device = positions.device
            old = self.key_real
            if old is None:
                old = torch.ones(rows, n_old, dtype=torch.bool, device=device)
            new = key_real
            if new is None:
                new = torch.ones(rows, n_new, dtype=torch.bool, device=device)
            key_real = torch.cat([old, new], dim=1)
        self.positions, self.key_real = positions, key_real
        return positions, key_real

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses)."""
        for layer in self.layers:
            for name, tensor in layer.items():
                if name in ("k", "v") and f"{name}_buffer" in layer:
                    continue  # a view of its buffer: re-taken below
                layer[name] = tensor.index_select(0, index)
            for name in ("k", "v"):
                if f"{name}_buffer" in layer:
                    layer[name] = layer[f"{name}_buffer"][:, :, : layer[name].size(2)]
        if self.positions is not None and self.positions.size(0) > 1:
            self.positions = self.positions.index_select(0, index)
        if self.key_real is not None:
            self.key_real = self.key_real.index_select(0, index)


class StaticCache:
    """A decoding cache allocated once for ``capacity`` tokens (gpt-fast's static KV cache).

    Every self-attention layer writes its new keys/values into preallocated buffers
    (:class:`~attnlab.nn.attention.StaticLayerCache`) at the slots after the last filled
    one, and each new query attends over all ``capacity`` slots with the unfilled ones
    masked, so a decoding step has the same shapes at every length: one compiled graph
    serves the whole generation (and replays as a CUDA graph). ``slot`` counts the filled
    slots on the device, so no step reads a Python integer that changes.

    Built from a :class:`DecodingCache` that has read the prompt (``from_prompt``): the
    prompt itself runs the dynamic path once, so its logits are those of today's cache.
    """

    def __init__(self, layers: list[StaticLayerCache], positions: Tensor, key_real: Tensor):
        self.layers = layers
        self.positions, self.key_real = positions, key_real  # (B, capacity): of each slot
        self.slots = torch.arange(positions.size(1), device=positions.device)
        self.slot = torch.zeros(1, dtype=torch.long, device=positions.device)

    @property
    def capacity(self) -> int:
        return self.positions.size(1)

    @classmethod
    def from_prompt(
        cls, cache: DecodingCache, capacity: int, reuse: StaticCache | None = None
    ) -> StaticCache:
        """The keys, values, positions and padding of ``cache`` in buffers of ``capacity``
        slots (at least its length); cross-attention entries are kept as they are.

        ``reuse``: a static cache of an earlier generation; when its buffers have the
        shapes, dtypes and device this one needs, they are overwritten instead of new ones
        allocated, so a compiled step (and its CUDA graph) keeps reading the same addresses
        from one generation (one validation batch) to the next."""
        assert cache.positions is not None, "the prompt has not been read"
        if reuse is not None and reuse.fits(cache, capacity):
            return reuse.refill(cache)
        n = cache.length
        B = cache.layers[0]["k"].size(0)
        device = cache.positions.device
        positions = torch.zeros(B, capacity, dtype=torch.long, device=device)
        positions[:, :n] = cache.positions
        key_real = torch.zeros(B, capacity, dtype=torch.bool, device=device)
        key_real[:, :n] = True if cache.key_real is None else cache.key_real
        layers = []
        for layer in cache.layers:
            k, v = layer["k"], layer["v"]
            buffers = []
            for filled in (k, v):
                buffer = filled.new_zeros(B, filled.size(1), capacity, filled.size(3))
                buffer[:, :, :n] = filled
                buffers.append(buffer)
            static = StaticLayerCache(*buffers)
            static.update((name, t) for name, t in layer.items() if name.startswith("cross_"))
            layers.append(static)
        static_cache = cls(layers, positions, key_real)
        static_cache.slot.fill_(n)
        return static_cache

    def fits(self, cache: DecodingCache, capacity: int) -> bool:
        """Whether this cache's buffers can hold ``cache``'s prompt with ``capacity`` slots."""
        if self.capacity != capacity or len(self.layers) != len(cache.layers):
            return False
        if self.positions.device != cache.positions.device:  # type: ignore[union-attr]
            return False
        return all(
            static.k_buffer.shape[:2] == layer["k"].shape[:2]
            and static.k_buffer.shape[3] == layer["k"].shape[3]
            and static.k_buffer.dtype == layer["k"].dtype
            and static.v_buffer.shape[3] == layer["v"].shape[3]
            for static, layer in zip(self.layers, cache.layers, strict=True)
        )

    def refill(self, cache: DecodingCache) -> StaticCache:
        """This cache, emptied and holding ``cache``'s prompt (``from_prompt`` in place)."""
        n = cache.length
        self.positions.zero_()
        self.positions[:, :n] = cache.positions
        self.key_real.zero_()
        self.key_real[:, :n] = True if cache.key_real is None else cache.key_real
        for static, layer in zip(self.layers, cache.layers, strict=True):
            for buffer, filled in ((static.k_buffer, layer["k"]), (static.v_buffer, layer["v"])):
                buffer.zero_()
                buffer[:, :, :n] = filled
            static.clear()
            static.update((name, t) for name, t in layer.items() if name.startswith("cross_"))
        self.slot.fill_(n)
        return self

    def tensors(self) -> list[Tensor]:
        """Every buffer written in place (``torch._dynamo.mark_static_address`` for CUDA
        graphs)."""
        kv = [t for layer in self.layers for t in (layer.k_buffer, layer.v_buffer)]
        return [*kv, self.positions, self.key_real, self.slot]

    def record(self, index: Tensor, positions: Tensor, key_real: Tensor) -> None:
        """Store the positions (B|1, T) and padding (B, T) of the new tokens in slots
        ``index`` (T,)."""
        self.positions[:, index] = positions.expand(self.positions.size(0), -1)
        self.key_real[:, index] = key_real

    def visible(self, index: Tensor, prefix_len: Tensor | None) -> Tensor:
        """(B, 1, T, capacity): ``attention_mask`` over the slots, for queries at ``index``."""
        slots = self.slots.view(1, 1, -1)
        mask = slots <= index.view(1, -1, 1)
        if prefix_len is not None:
            mask = mask | (slots < prefix_len.view(-1, 1, 1))
        mask = (mask & self.key_real.unsqueeze(1)) | (slots == index.view(1, -1, 1))
        return mask.unsqueeze(1)

    def reorder(self, index: Tensor) -> None:
        """Select batch rows in place (beam search), the buffers keeping their addresses."""
        for layer in self.layers:
            layer.reorder(index)
        for buffer in (self.positions, self.key_real):
            buffer.copy_(buffer.index_select(0, index))


def attention_mask(
    q_index: Tensor,
    k_index: Tensor,
    key_real: Tensor | None,
    causal: bool,
    prefix_len: Tensor | None = None,
) -> Tensor | None:
    """Boolean mask (B|1, 1, Tq, Tk), True where query i may attend to key j.

    causal: j ≤ i; prefix-LM also lets every query see keys j < prefix_len
    (Raffel et al. 2020, §3.2.1); padding: keys that are padding are hidden.
    A query may always see itself, so a padding query never has an empty row.
    """
    mask: Tensor | None = None
    if causal:
        mask = (k_index.view(1, -1) <= q_index.view(-1, 1)).unsqueeze(0)  # (1, Tq, Tk)
        if prefix_len is not None:
            mask = mask | (k_index.view(1, 1, -1) < prefix_len.view(-1, 1, 1))
    if key_real is not None:
        keys = key_real.unsqueeze(1)  # (B, 1, Tk)
        mask = keys if mask is None else mask & keys
        mask = mask | (k_index.view(1, 1, -1) == q_index.view(1, -1, 1))
    return None if mask is None else mask.unsqueeze(1)


def kind_spec(cfg: ModelConfig, causal: bool) -> Any:
    """The :class:`~attnlab.nn.attention_kinds.KindSpec` of ``model.attention`` and its keys."""
    from attnlab.nn.attention_kinds import KindSpec

    return KindSpec(
        causal=causal, window=cfg.window, n_global=cfg.n_global, block=cfg.attn_block,
        n_random=cfg.n_random, linformer_k=cfg.linformer_k, max_len=cfg.max_len,
        d_head=cfg.d_model // cfg.n_heads, n_heads=cfg.n_heads,
    )  # fmt: skip


def make_positions(cfg: ModelConfig, causal: bool, grid: tuple[int, int] | None) -> Positions:
    """The ``model.pos`` scheme; image schemes (``needs_grid``) also get the patch grid."""
    cls = POSITIONS.get(cfg.pos)
    if cls.needs_grid:
        return cls(cfg.d_model, cfg.n_heads, cfg.max_len, causal, grid=grid)
    return cls(cfg.d_model, cfg.n_heads, cfg.max_len, causal)


class TransformerStack(nn.Module):
    """Embed tokens, add positions, apply dropout, run the layers, final norm.

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
        self.causal, self.pad_id = causal, cfg.pad_id
        self.checkpointing = cfg.activation_checkpointing
        self.sparse = cfg.attention != "full"
        self.embedding = embedding
        # relative buckets look both ways unless attention is purely causal: a prefix-LM
        # sees keys to its right inside the prefix (Mesh TF, Unitransformer.fully_autoregressive)
        fully_causal = causal and not cfg.prefix_lm
        self.positions = make_positions(cfg, fully_causal, grid)
        self.dropout = Dropout(cfg.dropout)
        spec = LayerSpec(
            d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.ff_dim, dropout=cfg.dropout,
            attn_dropout=cfg.attn_dropout, norm=cfg.norm, norm_type=cfg.norm_type, ffn=cfg.ffn,
            attn_impl=cfg.attn_impl, depth=depth or StackDepth(), n_kv_heads=cfg.n_kv_heads,
            qk_norm=cfg.qk_norm, block=cfg.block, attention_kind=cfg.attention,
            kind_spec=kind_spec(cfg, causal and not cfg.prefix_lm),
        )  # fmt: skip

        def layer() -> nn.Module:
            if cfg.block == "parallel":
                return ParallelLayer(spec)
            return DecoderLayer(spec, cross) if causal else EncoderLayer(spec)

        self.layers = nn.ModuleList(layer() for _ in range(n_layers))
        self.final_norm = (
            make_norm(cfg.norm_type, cfg.d_model)
            if RESIDUALS.get(cfg.norm).final_norm
            else nn.Identity()
        )

    def forward(
        self,
        tokens: Tensor | None,
        positions: Tensor | None = None,
        key_real: Tensor | None = None,
        memory: Tensor | None = None,
        memory_real: Tensor | None = None,
        cache: DecodingCache | None = None,
        prefix_len: Tensor | None = None,
        embeds: Tensor | None = None,
    ) -> Tensor:
        """tokens (B, T) -> hidden states (B, T, d_model).

        ``embeds`` (B, T, d_model) replaces ``tokens`` (pass None) for inputs that are
        not tokens, such as image patches; positions are added to them all the same.

        ``key_real`` marks real (non-padding) tokens; by default every token
        that is not ``pad_id``. A causal stack over a fresh sequence skips that
        default: padding there trails the real tokens (attnlab's batches are
        right-padded), causality already hides it from them, and not looking
        keeps the fused causal kernel and avoids a host sync. Left-padded input
        must pass ``key_real`` (generation does). With a cache, tokens are the
        new ones only.
        """
        B, T = embeds.shape[:2] if embeds is not None else tokens.shape  # type: ignore[union-attr]
        device = (embeds if embeds is not None else tokens).device  # type: ignore[union-attr]
        if isinstance(cache, StaticCache):
            positions, inputs = self._static_inputs(tokens, positions, key_real, cache, prefix_len)
        else:
            positions, inputs = self._inputs(
                tokens, positions, key_real, cache, prefix_len, T, device
            )

        memory_inputs = None
        if memory is not None:
            memory_mask = None if memory_real is None else memory_real[:, None, None, :]
            memory_inputs = AttentionInputs(mask=memory_mask)

        x = embeds if embeds is not None else self.embedding(tokens)
        x = self.dropout(self.positions.embed(x, positions))
        for i, layer in enumerate(self.layers):
            if self.causal:
                layer_cache = cache.layers[i] if cache is not None else None
                args = (x, inputs, memory, memory_inputs, layer_cache)
            else:
                args = (x, inputs)
            if self.checkpointing and self.training:
                x = checkpoint(layer, *args, use_reentrant=False)
            else:
                x = layer(*args)
        return self.final_norm(x)

    def _inputs(
        self, tokens: Tensor | None, positions: Tensor | None, key_real: Tensor | None,
        cache: DecodingCache | None, prefix_len: Tensor | None, T: int, device: torch.device,
    ) -> tuple[Tensor, AttentionInputs]:  # fmt: skip
        """The positions of the new tokens and what every self-attention layer needs."""
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
        # one new query over an unpadded cache may see every key: no mask to build
        single_step = cache is not None and offset > 0 and T == 1 and k_real is None
        mask = None
        sparse = self.sparse  # the kind builds its own pattern: no (T, T) mask
        if not single_step and not sparse:
            k_index = torch.arange(offset + T, device=device)
            mask = attention_mask(q_index, k_index, k_real, self.causal, prefix_len)
        bias = self.positions.bias(positions, k_positions)
        # pure causal self-attention over a fresh sequence: let the fused kernel
        # apply causality itself (flash / memory-efficient path, no (T, T) mask)
        content = self.positions.content_dependent
        fast_causal = self.causal and offset == 0 and k_real is None and prefix_len is None
        fast_causal = fast_causal and bias is None and not content and not sparse
        inputs = AttentionInputs(
            mask=None if fast_causal else mask,
            bias=bias,
            rope=self.positions.rotary(positions),
            is_causal=fast_causal,
            scores=partial(self.positions.scores, q_pos=positions, k_pos=k_positions)
            if content
            else None,
            key_real=k_real,
            q_offset=offset,
        )

        return positions, inputs

    def _static_inputs(
        self, tokens: Tensor | None, positions: Tensor | None, key_real: Tensor | None,
        cache: StaticCache, prefix_len: Tensor | None,
    ) -> tuple[Tensor, AttentionInputs]:  # fmt: skip
        """``_inputs`` over a :class:`StaticCache`: the mask, biases and position terms cover
        all its slots, and nothing depends on how many are filled (no host sync, no Python
        integer that changes from step to step). The caller checked the positions once for
        the whole capacity (``supports_static``)."""
        assert tokens is not None, "a static cache decodes tokens"
        if key_real is None:  # a finished row is fed padding: hidden as a key, as in _inputs
            key_real = tokens != self.pad_id
        index = cache.slot + torch.arange(tokens.size(1), device=tokens.device)
        cache.slot.add_(tokens.size(1))  # the layers write at ``cache_index``, not at ``slot``
        if positions is None:
            positions = index
        cache.record(index, positions.view(-1, index.size(0)), key_real)
        content = self.positions.content_dependent
        return positions, AttentionInputs(
            mask=cache.visible(index, prefix_len),
            bias=self.positions.bias(positions, cache.positions),
            rope=self.positions.rotary(positions),
            scores=partial(self.positions.scores, q_pos=positions, k_pos=cache.positions)
            if content
            else None,
            cache_index=index,
        )

    def supports_static(self, capacity: int) -> bool:
        """Whether a :class:`StaticCache` of ``capacity`` slots serves this stack: full
        attention (the other kinds keep what they need of the past in their own way) and
        positions that reach ``capacity - 1``."""
        if self.sparse:
            return False
        try:
            self.positions.check(torch.arange(capacity), last=capacity - 1)
        except ValueError:
            return False
        return True
