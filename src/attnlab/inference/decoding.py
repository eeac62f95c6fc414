"""Decoding states: one batch of generations in progress, for every architecture.

A strategy (greedy, sampling, beam search: :mod:`attnlab.inference.generation`) drives a
:class:`DecodingState` one token at a time: ``logits()`` gives the next-token logits of
every row given all tokens so far, ``append`` adds one token per row, ``select`` keeps
rows ``index`` (beams) and reorders any cache with them. An architecture names the
family of states that decodes it (``Architecture.decoding``, a key of ``DECODINGS``) and
exposes what they call; the states, the caches and the compiled steps live here.

Transformer states (``decoding = "transformer"``) call the architecture's ``decoder``
stack and ``lm_head``, and ``encode(src)`` (source layout) or ``hidden(tokens, …)``
(prompt layout). With ``use_cache`` each step feeds only the new token: the
:class:`~attnlab.inference.caches.DecodingCache` holds what each layer's kernel keeps.
``reserve`` (``decode.cache=static``) then moves the cache into a
:class:`~attnlab.inference.caches.StaticCache` after the prompt and, with
``decode.compile``, runs the compiled one-token step (:class:`FastSteps`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attnlab.errors import ConfigError
from attnlab.inference.caches import DecodingCache, StaticCache, serves_static
from attnlab.special_tokens import BOS, PAD


class DecodingState:
    """One batch of generations in progress: rows can be repeated and reordered (beams)."""

    def logits(self) -> Tensor:
        raise NotImplementedError

    def append(self, token: Tensor) -> None:
        raise NotImplementedError

    def select(self, index: Tensor) -> None:
        raise NotImplementedError

    def reserve(self, max_new_tokens: int, compile: bool) -> None:
        """Optional: at most ``max_new_tokens`` tokens will follow, so a cache may be
        allocated once for them (a static cache) and, with ``compile``, its one-token step
        compiled. The default keeps the state as it is."""


DecodingFamily = Callable[[Any, Tensor, bool], DecodingState]  # (model, inputs, use_cache)
DECODINGS: dict[str, DecodingFamily] = {}  # family name (Architecture.decoding) -> its states


def decoding_family(name: str) -> Callable[[DecodingFamily], DecodingFamily]:
    """Register the decoding states an architecture names in ``decoding = name``."""

    def register(family: DecodingFamily) -> DecodingFamily:
        DECODINGS[name] = family
        return family

    return register


def start_decoding(model: Any, inputs: Tensor, use_cache: bool = True) -> DecodingState:
    """The decoding state of ``model`` for inputs laid out as ``feeding.prompt_layout(task)``
    says; ConfigError in one line when the model does not generate for its task."""
    layout = model.feeding.prompt_layout(model.task)
    if layout is None or model.decoding is None:
        raise ConfigError(f"model={model.cfg.name} cannot generate: "
                          f"{model.feeding.refusal(model.task)}")  # fmt: skip
    return DECODINGS[model.decoding](model, inputs, use_cache)


@decoding_family("transformer")
def transformer_decoding(model: Any, inputs: Tensor, use_cache: bool) -> DecodingState:
    if model.feeding.prompt_layout(model.task) == "source":
        return SourceDecoding(model, inputs, use_cache)
    return PromptDecoding(model, inputs, use_cache)


class Runtime:
    """What the generations of one model share: its compiled steps and pooled static caches.

    Kept with the model (``runtime_of``), so every generation of it — each validation
    batch, each prompt — reuses one compiled graph and, on CUDA, the buffers its CUDA graph
    reads; it goes when the model goes.
    """

    def __init__(self) -> None:
        self.steps: dict[tuple[object, str], object] = {}
        self.static_caches: dict[tuple[int, int], StaticCache] = {}  # by (rows, slots)

    def compiled(self, step: object, device: torch.device) -> object:
        """``torch.compile(step)``, once per step function and device type (guards check
        shapes, not which cache object is passed). On CUDA in ``reduce-overhead`` mode: the
        step replays as a CUDA graph. On a CPU with inductor's C++ wrapper, which calls the
        kernels from C++ instead of Python, and with one-row matmuls as BLAS takes them
        (:mod:`attnlab.inference.row_matmuls`)."""
        key = (step, device.type)
        if key not in self.steps:
            if device.type == "cuda":
                self.steps[key] = torch.compile(step, mode="reduce-overhead")  # type: ignore[call-overload]
            else:
                from attnlab.inference.row_matmuls import OneRowMatmuls

                options = {"cpp_wrapper": True, "post_grad_custom_post_pass": OneRowMatmuls()}
                self.steps[key] = torch.compile(step, options=options)  # type: ignore[call-overload]
        return self.steps[key]


def runtime_of(model: Any) -> Runtime:
    """The model's :class:`Runtime`, made at its first generation (a plain attribute: not a
    submodule, not in the state dict)."""
    runtime = model.__dict__.get("_decoding_runtime")
    if runtime is None:
        runtime = model.__dict__["_decoding_runtime"] = Runtime()
    return runtime


CAPACITY_STEP = 64  # on CUDA a static cache's slots are a multiple of this
POOLED_CACHES = 4  # static caches kept per model for later generations, by shape
# devices whose static caches are pooled: CUDA, where a CUDA graph re-records for new buffers;
# on a CPU fresh buffers decode ~7 % faster than reused ones (baby size, 2 threads)
POOLED_ON = {"cuda"}


class FastSteps:
    """The static cache and compiled step of one generation (``DecodingState.reserve``).

    The first ``logits()`` reads the prompt (or BOS) through the dynamic cache, as
    without it; ``after_first`` then moves that cache into a :class:`StaticCache` of the
    planned capacity, when the stack supports one, and from there on ``step`` gives the
    compiled step when asked for.

    The compiled step's first call in a generation checks all its guards, compiling again
    for a model or shapes it has not seen; the later calls check only the guards that tell
    its compiled graphs apart (``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``:
    the tensors' shapes, dtypes and devices, and whatever once forced a recompilation).
    Nothing the other guards check changes within a generation (the same model, cache and
    shapes at every step), and the graph they would choose was chosen by the first call.
    At the baby size, batch 1, 2 threads: 602 µs a token against 648 µs with every guard
    (``attnlab.bench.decode_builds``).
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.capacity: int | None = None
        self.compile = False
        self.checked = False  # whether the compiled step has run once with all its guards
        self.static = False  # whether the cache is static from here on

    def plan(self, capacity: int, compile: bool) -> None:
        self.capacity, self.compile = capacity, compile

    def step(self, step: object, device: torch.device) -> object:
        if not (self.compile and self.static):
            return step
        fast = self.runtime.compiled(step, device)
        if not self.checked:
            self.checked = True
            return fast
        return functools.partial(_with_distinguishing_guards_only, fast)

    def after_first(self, cache: Any, stack: Any) -> Any:
        """The cache to decode with from the second step on: ``cache`` or its static copy."""
        if cache is None or self.capacity is None:
            return cache
        capacity, self.capacity = self.capacity, None  # once
        device = cache.positions.device
        rounded = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
        if device.type == "cuda" and serves_static(stack, rounded):  # few shapes over batches
            capacity = rounded
        if capacity < cache.length or not serves_static(stack, capacity):
            return cache
        self.static = True
        if device.type not in POOLED_ON:
            return StaticCache.from_prompt(cache, capacity)
        # the buffers of earlier generations, by (rows, slots): reused, so a compiled step's
        # CUDA graph reads the same addresses every generation
        pool = self.runtime.static_caches
        key = (cache.layers[0].self_attn.past.k.size(0), capacity)
        earlier = pool.pop(key, None)
        static = StaticCache.from_prompt(cache, capacity, reuse=earlier)
        pool[key] = static
        while len(pool) > POOLED_CACHES:
            pool.pop(next(iter(pool)))  # the least recently used shape
        if static is not earlier and self.compile and device.type == "cuda":
            for tensor in static.tensors():  # updated in place: CUDA graphs keep them
                torch._dynamo.mark_static_address(tensor)
        return static


def _with_distinguishing_guards_only(fast: Any, *args: object) -> Tensor:
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        return fast(*args)


def _source_step(
    model: Any, new: Tensor, memory: Tensor, memory_real: Tensor, cache: Any
) -> Tensor:
    hidden = model.decoder(new, memory=memory, memory_real=memory_real, cache=cache)
    return model.lm_head(hidden[:, -1]).float()  # only the last position predicts


def _prompt_step(
    model: Any, new: Tensor, positions: Tensor, key_real: Tensor | None, cache: Any,
    prefix_len: Tensor | None,
) -> Tensor:  # fmt: skip
    hidden = model.hidden(
        new, positions=positions, key_real=key_real, cache=cache, prefix_len=prefix_len
    )
    return model.lm_head(hidden[:, -1]).float()


class SourceDecoding(DecodingState):
    """An encoder-decoder's generation: the source encoded once, the decoder fed from BOS.

    With a cache, each step runs the decoder on the newest token only; the cache holds
    every self-attention layer's keys/values and the projected encoder keys/values.
    """

    def __init__(self, model: Any, src: Tensor, use_cache: bool) -> None:
        self.model = model
        self.cache: Any = DecodingCache.for_stack(model.decoder) if use_cache else None
        self.memory, self.memory_real = model.encode(src)
        self.tokens = torch.full((src.size(0), 1), BOS, device=src.device)
        self._fed = 0  # tokens already in the cache
        self.fast = FastSteps(runtime_of(model))

    def reserve(self, max_new_tokens: int, compile: bool) -> None:
        if self.cache is not None:
            self.fast.plan(1 + max_new_tokens, compile)  # BOS and the new tokens

    def logits(self) -> Tensor:
        new = self.tokens[:, self._fed :] if self.cache is not None else self.tokens
        if self.fast.static:  # the same strides at every step
            new = new.clone(memory_format=torch.contiguous_format)
        step = self.fast.step(_source_step, new.device)
        logits = step(self.model, new, self.memory, self.memory_real, self.cache)
        self._fed = self.tokens.size(1)
        self.cache = self.fast.after_first(self.cache, self.model.decoder)
        return logits

    def append(self, token: Tensor) -> None:
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)

    def select(self, index: Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)
        self.memory = self.memory.index_select(0, index)
        self.memory_real = self.memory_real.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


class PromptDecoding(DecodingState):
    """A decoder-only model continuing a left-padded prompt; positions count real tokens only,
    so every row's first real token is at position 0 whatever its padding."""

    def __init__(self, model: Any, prompt: Tensor, use_cache: bool) -> None:
        self.model = model
        self.cache: Any = DecodingCache.for_stack(model.decoder) if use_cache else None
        self.tokens = prompt
        self.key_real = prompt != PAD
        self.padded = not bool(self.key_real.all())
        self.positions = (self.key_real.long().cumsum(-1) - 1).clamp(min=0)
        self.prefix_len = (
            torch.full((prompt.size(0),), prompt.size(1), device=prompt.device)
            if model.cfg.get("prefix_lm")
            else None
        )
        self._fed = 0
        self.fast = FastSteps(runtime_of(model))

    def reserve(self, max_new_tokens: int, compile: bool) -> None:
        if self.cache is not None:
            self.fast.plan(self.tokens.size(1) + max_new_tokens, compile)

    def logits(self) -> Tensor:
        if self.fast.static:  # only the tokens appended since
            step = self.fast.step(_prompt_step, self.tokens.device)
            new, positions, prefix_len = self.tokens, self.positions, self.prefix_len
            logits = step(self.model, new, positions, None, self.cache, prefix_len)
            self.tokens, self.positions = self.tokens[:, :0], self.positions[:, :0]
            return logits
        use_cache = self.cache is not None
        start = self._fed if use_cache else 0
        new = self.tokens[:, start:]
        key_real = None  # no padding among the new tokens: no mask to build
        if self.padded and not (use_cache and start > 0):
            key_real = self.key_real[:, start:]  # generated tokens are never padding
        positions = self.positions[:, start:]
        logits = _prompt_step(self.model, new, positions, key_real, self.cache, self.prefix_len)
        self._fed = self.tokens.size(1)
        self.cache = self.fast.after_first(self.cache, self.model.decoder)
        if self.fast.static:  # from here on, only what is not yet fed
            self._last_position = self.positions[:, -1:]
            self.tokens, self.positions = self.tokens[:, :0], self.positions[:, :0]
        return logits

    def append(self, token: Tensor) -> None:
        if self.fast.static:  # only what is not yet fed: fresh (B, 1) tensors
            self._last_position = self._last_position + 1
            self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)
            self.positions = torch.cat([self.positions, self._last_position], dim=1)
            return
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)
        self.positions = torch.cat([self.positions, self.positions[:, -1:] + 1], dim=1)
        self.key_real = torch.cat([self.key_real, torch.ones_like(token[:, None]).bool()], 1)

    def select(self, index: Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)
        self.positions = self.positions.index_select(0, index)
        self.key_real = self.key_real.index_select(0, index)
        if self.prefix_len is not None:
            self.prefix_len = self.prefix_len.index_select(0, index)
        if self.fast.static:
            self._last_position = self._last_position.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)
