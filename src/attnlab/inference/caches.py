"""Decoding caches: what one generation keeps of the tokens it has read.

Every attention layer's cache answers one protocol (:class:`attnlab.nn.kernels.LayerCache`):
``update(k, v, inputs)`` stores the new keys and values and returns the
:class:`~attnlab.nn.kernels.Past` the layer's kernel reads; ``past`` is what it holds;
``reorder(index)`` keeps batch rows (beam search). Which cache a layer gets follows from
what its kernel ``keeps`` (:class:`~attnlab.nn.kernels.Keeps`):

==================  ====================================================================
``DynamicKV``       every key and value, appended into buffers with room to spare
``WindowKV``        the last w keys and values (a causal sliding window, Mistral's SWA)
``RunningSums``     linear attention's S = Σ φ(K_j)V_jᵀ and Z = Σ φ(K_j) in place of the
                    keys (Katharopoulos et al. 2020, eq. 9–10): O(d²) a step
``MemoryKV``        cross-attention: the projected encoder keys and values, kept once
``StaticKV``        every key in buffers allocated once (gpt-fast's static cache), so each
                    step has the same shapes: one compiled graph, CUDA-graph replay
(``own_cache``)     a mixer's own state, updated by the mixer itself: Mamba-2's h and conv
                    window (:class:`attnlab.nn.mamba2.Mamba2State`), of constant size
==================  ====================================================================

A stack's cache (:class:`DecodingCache`, :class:`StaticCache`) holds one
:class:`LayerCaches` per layer and the positions and padding of every cached key, so
masks and relative position biases for new queries cover the whole history; it also
builds the stack's :class:`~attnlab.nn.kernels.AttentionInputs` for the new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from attnlab.nn.kernels import AttentionInputs, Keeps, LayerCache, Past
from attnlab.nn.visibility import Visibility


class DynamicKV:
    """Keys/values of every step so far.

    They sit in buffers with room to spare, doubled when full, so one decoding step writes
    its new keys in place instead of copying the whole history (``torch.cat`` per step
    made decoding quadratic in memory traffic). ``past`` holds views of the filled part.
    """

    def __init__(self) -> None:
        self.past: Past | None = None
        self.buffers: tuple[Tensor, Tensor] | None = None

    def update(self, k: Tensor, v: Tensor, inputs: AttentionInputs | None = None) -> Past:
        if self.past is None:  # the prompt: no buffer until the first appended step
            self.past = Past(k, v)
            return self.past
        n, t = self.past.k.size(2), k.size(2)
        if self.buffers is None or self.buffers[0].size(2) < n + t:
            grown = []
            for filled in self.past[:2]:
                B, H, _, D = filled.shape
                buffer = filled.new_empty(B, H, max(2 * (n + t), 64), D)
                buffer[:, :, :n] = filled
                grown.append(buffer)
            self.buffers = (grown[0], grown[1])
        for buffer, new in zip(self.buffers, (k, v), strict=True):
            buffer[:, :, n : n + t] = new
        self.past = Past(self.buffers[0][:, :, : n + t], self.buffers[1][:, :, : n + t])
        return self.past

    def reorder(self, index: Tensor) -> None:
        if self.past is None:
            return
        n = self.past.k.size(2)
        if self.buffers is None:
            self.past = self.past.select(index)
            return
        k, v = (buffer.index_select(0, index) for buffer in self.buffers)
        self.buffers, self.past = (k, v), Past(k[:, :, :n], v[:, :, :n])


class WindowKV:
    """The last ``window`` keys and values: a causal sliding window needs no earlier ones."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.past: Past | None = None

    def update(self, k: Tensor, v: Tensor, inputs: AttentionInputs | None = None) -> Past:
        if self.past is not None:
            k, v = torch.cat([self.past.k, k], dim=2), torch.cat([self.past.v, v], dim=2)
        self.past = Past(k[:, :, -self.window :], v[:, :, -self.window :])
        return Past(k, v)  # the new queries see the window before each of them

    def reorder(self, index: Tensor) -> None:
        if self.past is not None:
            self.past = self.past.select(index)


class RunningSums:
    """Linear attention's state: ``sums(k, v, key_real, rope)`` = (S, Z) of the keys read so
    far (``rope``: the rotation at the new keys' positions, RoFormer §3.4.3).

    The prompt is attended causally over its own keys; every later step reads the sums of
    the keys before it (``Past.state``) and adds its own to them."""

    def __init__(self, sums: Any) -> None:
        self.sums = sums
        self.state: tuple[Tensor, Tensor] | None = None
        self.past: Past | None = None

    def update(self, k: Tensor, v: Tensor, inputs: AttentionInputs) -> Past:
        real = None if inputs.key_real is None else inputs.key_real[:, -k.size(2) :]
        S, Z = self.sums(k, v, real, inputs.rope)
        before = self.state
        self.state = (S, Z) if before is None else (before[0] + S, before[1] + Z)
        self.past = Past(k, v, before)
        return self.past

    def reorder(self, index: Tensor) -> None:
        if self.state is not None:
            S, Z = self.state
            self.state = (S.index_select(0, index), Z.index_select(0, index))


class MemoryKV:
    """Cross-attention's keys and values, projected from the encoder output once."""

    def __init__(self) -> None:
        self.past: Past | None = None

    def update(self, k: Tensor, v: Tensor, inputs: AttentionInputs | None = None) -> Past:
        self.past = Past(k, v)
        return self.past

    def reorder(self, index: Tensor) -> None:
        if self.past is not None:
            self.past = self.past.select(index)


class StaticKV:
    """One layer's keys and values in buffers allocated once, (B, H_kv, capacity, d_head): a
    step writes its keys into the slots ``inputs.cache_index`` and attends over every slot,
    the unfilled ones masked."""

    def __init__(self, k: Tensor, v: Tensor) -> None:
        self.k_buffer, self.v_buffer = k, v
        self.past: Past | None = Past(k, v)

    def update(self, k: Tensor, v: Tensor, inputs: AttentionInputs) -> Past:
        index = inputs.cache_index
        self.k_buffer[:, :, index] = k
        self.v_buffer[:, :, index] = v
        return self.past  # type: ignore[return-value]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows in place (the buffers keep their addresses)."""
        for buffer in (self.k_buffer, self.v_buffer):
            buffer.copy_(buffer.index_select(0, index))


def cache_for(keeps: Keeps) -> LayerCache:
    """The dynamic cache of a kernel that keeps ``keeps``."""
    if keeps.own_cache is not None:  # Mamba-2's state (attnlab.nn.mamba2.Mamba2State)
        return keeps.own_cache()
    if keeps.running_state is not None:
        return RunningSums(keeps.running_state)
    if keeps.window is not None:
        return WindowKV(keeps.window)
    return DynamicKV()


@dataclass
class LayerCaches:
    """One layer's caches: its self-attention's and, in an encoder-decoder, its
    cross-attention's."""

    self_attn: LayerCache
    cross_attn: LayerCache | None = None

    def reorder(self, index: Tensor) -> None:
        self.self_attn.reorder(index)
        if self.cross_attn is not None:
            self.cross_attn.reorder(index)


class DecodingCache:
    """The dynamic cache of one stack: a :class:`LayerCaches` per layer, and the positions
    and padding of every cached key."""

    def __init__(self, layers: list[LayerCaches]) -> None:
        self.layers = layers
        self.positions: Tensor | None = None  # (B|1, T_cached)
        self.key_real: Tensor | None = None  # (B, T_cached) or None when no padding

    @classmethod
    def for_stack(cls, stack: Any) -> DecodingCache:
        """Empty caches for every layer of ``stack``, each as its kernel keeps."""
        return cls([
            LayerCaches(
                cache_for(layer.self_attn.keeps),
                MemoryKV() if layer.cross_attn is not None else None,
            )
            for layer in stack.layers
        ])  # fmt: skip

    @property
    def length(self) -> int:
        return 0 if self.positions is None else self.positions.size(-1)

    def attention_inputs(
        self, stack: Any, tokens: Tensor | None, positions: Tensor | None,
        key_real: Tensor | None, prefix_len: Tensor | None,
    ) -> tuple[Tensor, AttentionInputs]:  # fmt: skip
        """The stack's own inputs for the new tokens, over this history."""
        return stack.attention_inputs(tokens, positions, key_real, prefix_len, history=self)

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
            layer.reorder(index)
        if self.positions is not None and self.positions.size(0) > 1:
            self.positions = self.positions.index_select(0, index)
        if self.key_real is not None:
            self.key_real = self.key_real.index_select(0, index)


def serves_static(stack: Any, capacity: int) -> bool:
    """Whether a :class:`StaticCache` of ``capacity`` slots serves ``stack``: kernels that
    can read fixed slots (full attention: the other kinds keep what they need of the past
    in their own way) and positions that reach ``capacity - 1``."""
    if not all(layer.self_attn.keeps.fixed_slots for layer in stack.layers):
        return False
    try:
        stack.positions.check(torch.arange(capacity), last=capacity - 1)
    except ValueError:
        return False
    return True


class StaticCache:
    """A decoding cache allocated once for ``capacity`` tokens (gpt-fast's static KV cache).

    Every self-attention layer writes its new keys/values into preallocated buffers
    (:class:`StaticKV`) at the slots after the last filled one, and each new query attends
    over all ``capacity`` slots with the unfilled ones masked, so a decoding step has the
    same shapes at every length: one compiled graph serves the whole generation (and
    replays as a CUDA graph). ``slot`` counts the filled slots on the device, so no step
    reads a Python integer that changes.

    Built from a :class:`DecodingCache` that has read the prompt (``from_prompt``): the
    prompt itself runs the dynamic path once, so its logits are those of the dynamic cache.
    """

    def __init__(self, layers: list[LayerCaches], positions: Tensor, key_real: Tensor):
        self.layers = layers
        self.positions, self.key_real = positions, key_real  # (B, capacity): of each slot
        self.slots = torch.arange(positions.size(1), device=positions.device)
        self.slot = torch.zeros(1, dtype=torch.long, device=positions.device)

    @property
    def capacity(self) -> int:
        return self.positions.size(1)

    @property
    def static_layers(self) -> list[StaticKV]:
        return [layer.self_attn for layer in self.layers]  # type: ignore[misc]

    @classmethod
    def from_prompt(
        cls, cache: DecodingCache, capacity: int, reuse: StaticCache | None = None
    ) -> StaticCache:
        """The keys, values, positions and padding of ``cache`` in buffers of ``capacity``
        slots (at least its length); cross-attention caches are kept as they are.

        ``reuse``: a static cache of an earlier generation; when its buffers have the
        shapes, dtypes and device this one needs, they are overwritten instead of new ones
        allocated, so a compiled step (and its CUDA graph) keeps reading the same addresses
        from one generation (one validation batch) to the next."""
        assert cache.positions is not None, "the prompt has not been read"
        if reuse is not None and reuse.fits(cache, capacity):
            return reuse.refill(cache)
        n = cache.length
        pasts = [layer.self_attn.past for layer in cache.layers]
        B = pasts[0].k.size(0)  # type: ignore[union-attr]
        device = cache.positions.device
        positions = torch.zeros(B, capacity, dtype=torch.long, device=device)
        positions[:, :n] = cache.positions
        key_real = torch.zeros(B, capacity, dtype=torch.bool, device=device)
        key_real[:, :n] = True if cache.key_real is None else cache.key_real
        layers = []
        for layer, past in zip(cache.layers, pasts, strict=True):
            buffers = []
            for filled in past[:2]:  # type: ignore[index]
                buffer = filled.new_zeros(B, filled.size(1), capacity, filled.size(3))
                buffer[:, :, :n] = filled
                buffers.append(buffer)
            layers.append(LayerCaches(StaticKV(*buffers), layer.cross_attn))
        static_cache = cls(layers, positions, key_real)
        static_cache.slot.fill_(n)
        return static_cache

    def fits(self, cache: DecodingCache, capacity: int) -> bool:
        """Whether this cache's buffers can hold ``cache``'s prompt with ``capacity`` slots."""
        if self.capacity != capacity or len(self.layers) != len(cache.layers):
            return False
        if self.positions.device != cache.positions.device:  # type: ignore[union-attr]
            return False
        for static, layer in zip(self.static_layers, cache.layers, strict=True):
            k, v = layer.self_attn.past[:2]  # type: ignore[index]
            if not (
                static.k_buffer.shape[:2] == k.shape[:2]
                and static.k_buffer.shape[3] == k.shape[3]
                and static.k_buffer.dtype == k.dtype
                and static.v_buffer.shape[3] == v.shape[3]
            ):
                return False
        return True

    def refill(self, cache: DecodingCache) -> StaticCache:
        """This cache, emptied and holding ``cache``'s prompt (``from_prompt`` in place)."""
        n = cache.length
        self.positions.zero_()
        self.positions[:, :n] = cache.positions
        self.key_real.zero_()
        self.key_real[:, :n] = True if cache.key_real is None else cache.key_real
        for mine, layer in zip(self.layers, cache.layers, strict=True):
            static = mine.self_attn
            for buffer, filled in zip(
                (static.k_buffer, static.v_buffer),  # type: ignore[attr-defined]
                layer.self_attn.past[:2],  # type: ignore[index]
                strict=True,
            ):
                buffer.zero_()
                buffer[:, :, :n] = filled
            mine.cross_attn = layer.cross_attn
        self.slot.fill_(n)
        return self

    def tensors(self) -> list[Tensor]:
        """Every buffer written in place (``torch._dynamo.mark_static_address`` for CUDA
        graphs)."""
        kv = [t for layer in self.static_layers for t in (layer.k_buffer, layer.v_buffer)]
        return [*kv, self.positions, self.key_real, self.slot]

    def record(self, index: Tensor, positions: Tensor, key_real: Tensor) -> None:
        """Store the positions (B|1, T) and padding (B, T) of the new tokens in slots
        ``index`` (T,)."""
        self.positions[:, index] = positions.expand(self.positions.size(0), -1)
        self.key_real[:, index] = key_real

    def attention_inputs(
        self, stack: Any, tokens: Tensor | None, positions: Tensor | None,
        key_real: Tensor | None, prefix_len: Tensor | None,
    ) -> tuple[Tensor, AttentionInputs]:  # fmt: skip
        """The stack's inputs over the slots: the mask, biases and position terms cover all
        of them, and nothing depends on how many are filled (no host sync, no Python
        integer that changes from step to step). The positions were checked once for the
        whole capacity (``serves_static``)."""
        assert tokens is not None, "a static cache decodes tokens"
        if key_real is None:  # a finished row is fed padding: hidden as a key
            key_real = tokens != stack.pad_id
        index = self.slot + torch.arange(tokens.size(1), device=tokens.device)
        self.slot.add_(tokens.size(1))  # the layers write at ``cache_index``, not at ``slot``
        if positions is None:
            positions = index
        self.record(index, positions.view(-1, index.size(0)), key_real)
        scheme = stack.positions
        # the slots are the keys: causal by slot, the unfilled ones (not real) hidden
        visibility = Visibility(index, self.slots, causal=True, prefix_len=prefix_len,
                                key_real=self.key_real, sees_itself=True)  # fmt: skip
        return positions, AttentionInputs(
            mask=visibility.dense(),
            bias=scheme.bias(positions, self.positions),
            rope=scheme.rotary(positions),
            scores=partial(scheme.scores, q_pos=positions, k_pos=self.positions)
            if scheme.content_dependent
            else None,
            cache_index=index,
        )

    def reorder(self, index: Tensor) -> None:
        """Select batch rows in place (beam search), the buffers keeping their addresses."""
        for layer in self.layers:
            layer.reorder(index)
        for buffer in (self.positions, self.key_real):
            buffer.copy_(buffer.index_select(0, index))
