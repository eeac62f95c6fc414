"""The three Transformer architectures, composed from the same stacks (Vaswani et al. 2017, Fig. 1).

* ``EncoderOnly``     bidirectional encoder + LM head (BERT-style masked LM)
* ``DecoderOnly``     causal decoder + LM head (GPT-style; prefix-LM optional)
* ``EncoderDecoder``  encoder, and a decoder whose cross-attention reads the
                      encoder output (the original Transformer, T5, BART)

Each implements :class:`~attnlab.models.interface.Architecture` and declares its
:class:`~attnlab.models.interface.Feeding`; the tasks and generation use only that.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.models.config import ModelConfig
from attnlab.models.flops import output_flops, transformer_flops
from attnlab.models.initialization import initialize
from attnlab.models.interface import ARCHITECTURES, Architecture, DecodingState, Feeding
from attnlab.models.stack import DecodingCache, StaticCache, TokenEmbedding, TransformerStack
from attnlab.nn.norms import RESIDUALS, StackDepth
from attnlab.special_tokens import BOS, PAD


class TransformerModel(Architecture):
    """Shared parts: token embedding, output projection (optionally tied), initialisation."""

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__(cfg, task)
        self.embedding = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embeddings)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def _finish(self, n_layers: int, depths: dict[str, StackDepth]) -> None:
        """Initialise (``model.init``, then the residual scheme's own step per stack) and tie."""
        initialize(self, self.cfg.init, self.cfg.d_model, n_layers)
        residual = RESIDUALS.get(self.cfg.norm)
        stacks = self.stacks()
        for role, depth in depths.items():
            residual.initialize(stacks[role].layers, depth)
        if self.cfg.tie != "none":
            # "we share the same weight matrix between the … embedding layers and
            # the pre-softmax linear transformation" (§3.4)
            self.lm_head.weight = self.embedding.weight

    def stacks(self) -> dict[str, nn.Module]:
        return {name: m for name, m in self.named_children() if isinstance(m, TransformerStack)}


def mean_over_real(hidden: Tensor, real: Tensor) -> Tensor:
    """Mean of (B, T, d) states over the positions where ``real`` (B, T) is True."""
    weights = real.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


@ARCHITECTURES.register("encoder_only")
class EncoderOnly(TransformerModel):
    """A bidirectional encoder; every position sees every non-padding position (BERT)."""

    feeding = Feeding(
        lm="masked",
        classification="mean",
        pools=("mean",),
        refusals={
            "seq2seq": "an encoder-only model cannot generate a target sequence; "
            "use model=decoder_only or model=encoder_decoder",
        },
    )

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__(cfg, task)
        depth = StackDepth("encoder", n_encoder=cfg.n_layers, n_decoder=0)
        self.encoder = TransformerStack(cfg, self.embedding, cfg.n_layers, False, depth=depth)
        self._finish(cfg.n_layers, {"encoder": depth})

    def hidden(self, tokens: Tensor, key_real: Tensor | None = None) -> Tensor:
        return self.encoder(tokens, key_real=key_real)  # (B, T, d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.lm_head(self.hidden(tokens))  # (B, T, vocab)

    def pooled(self, inputs: Tensor) -> Tensor:
        """BERT-style pooling: the mean of the encoder states over real tokens."""
        return mean_over_real(self.hidden(inputs), inputs != PAD)

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        length = src_len + tgt_len  # one sequence (a language model: src_len = 0)
        return transformer_flops(cfg, length, cfg.n_layers) + output_flops(cfg, length)


@ARCHITECTURES.register("decoder_only")
class DecoderOnly(TransformerModel):
    """A causal decoder without cross-attention (GPT). ``prefix_len`` makes it a prefix-LM."""

    feeding = Feeding(
        seq2seq="source_sep_target", lm="causal", classification="last", pools=("last", "mean")
    )
    causal_attention = True

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__(cfg, task)
        depth = StackDepth("decoder", n_encoder=0, n_decoder=cfg.n_layers)
        self.decoder = TransformerStack(cfg, self.embedding, cfg.n_layers, True, depth=depth)
        self._finish(cfg.n_layers, {"decoder": depth})

    def hidden(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        key_real: Tensor | None = None,
        cache: DecodingCache | None = None,
        prefix_len: Tensor | None = None,
    ) -> Tensor:
        return self.decoder(
            tokens, positions=positions, key_real=key_real, cache=cache, prefix_len=prefix_len
        )

    def forward(self, tokens: Tensor, **kwargs: object) -> Tensor:
        return self.lm_head(self.hidden(tokens, **kwargs))  # (B, T, vocab)

    def pooled(self, inputs: Tensor) -> Tensor:
        """``last``: the state of the last real token, which has seen the whole input (with
        model.prefix_lm=true every token sees every other, T5's prefix LM); ``mean``."""
        real = inputs != PAD
        prefix_len = real.sum(1) if self.cfg.prefix_lm else None
        hidden = self.hidden(inputs, prefix_len=prefix_len)
        if self.pool_for(self.task) == "mean":
            return mean_over_real(hidden, real)
        last = (real.sum(1) - 1).clamp(min=0)
        return hidden[torch.arange(inputs.size(0), device=inputs.device), last]

    def start_decoding(self, inputs: Tensor, use_cache: bool = True) -> DecodingState:
        return PromptDecoding(self, inputs, use_cache)

    def new_cache(self) -> DecodingCache:
        return DecodingCache(len(self.decoder.layers))

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        length = src_len + tgt_len  # one sequence (a language model: src_len = 0)
        return transformer_flops(cfg, length, cfg.n_layers) + output_flops(cfg, length)


@ARCHITECTURES.register("encoder_decoder")
class EncoderDecoder(TransformerModel):
    """Encoder over the source; decoder over the shifted target with cross-attention."""

    feeding = Feeding(
        seq2seq="teacher_forcing",
        classification="decoder_start",
        pools=("decoder_start", "mean"),
        refusals={
            "lm": "language modelling has no source sequence for an encoder; "
            "use model=decoder_only (causal LM) or model=encoder_only (masked LM)",
        },
    )
    causal_attention = True  # the decoder's

    def __init__(self, cfg: ModelConfig, task: str = "seq2seq") -> None:
        super().__init__(cfg, task)
        # the target side owns self.embedding (tied to the output projection);
        # the source side shares it when the vocabulary is shared and tying is "all"
        share_source = cfg.tie == "all"
        self.src_embedding = (
            self.embedding
            if share_source
            else TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embeddings)
        )
        N, M = cfg.encoder_layers, cfg.decoder_layers
        depths = {role: StackDepth(role, N, M) for role in ("encoder", "decoder")}
        self.encoder = TransformerStack(
            cfg, self.src_embedding, N, causal=False, depth=depths["encoder"]
        )
        self.decoder = TransformerStack(
            cfg, self.embedding, M, causal=True, cross=True, depth=depths["decoder"]
        )
        self._finish(N + M, depths)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Source tokens -> (memory (B, S, d_model), memory_real (B, S))."""
        src_real = src != self.cfg.pad_id
        return self.encoder(src, key_real=src_real), src_real

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        memory_real: Tensor,
        cache: DecodingCache | None = None,
    ) -> Tensor:
        """Decoder input (BOS + target so far) -> logits (B, T, vocab)."""
        hidden = self.decoder(tgt_in, memory=memory, memory_real=memory_real, cache=cache)
        return self.lm_head(hidden)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, memory_real = self.encode(src)
        return self.decode(tgt_in, memory, memory_real)

    def pooled(self, inputs: Tensor) -> Tensor:
        """``decoder_start``: the decoder reads one start token over the encoder output
        (BART §3.2); ``mean``: the mean of the encoder states."""
        memory, memory_real = self.encode(inputs)
        if self.pool_for(self.task) == "mean":
            return mean_over_real(memory, memory_real)
        start = inputs.new_full((inputs.size(0), 1), BOS)
        return self.decoder(start, memory=memory, memory_real=memory_real)[:, 0]

    def start_decoding(self, inputs: Tensor, use_cache: bool = True) -> DecodingState:
        return SourceDecoding(self, inputs, use_cache)

    def new_cache(self) -> DecodingCache:
        return DecodingCache(len(self.decoder.layers))

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        return (
            transformer_flops(cfg, src_len, cfg.encoder_layers)
            + transformer_flops(cfg, tgt_len, cfg.decoder_layers, memory_len=src_len)
            + output_flops(cfg, tgt_len)
        )


class SourceDecoding(DecodingState):
    """An encoder-decoder's generation: the source encoded once, the decoder fed from BOS.

    With a cache, each step runs the decoder on the newest token only; the cache holds
    every self-attention layer's keys/values and the projected encoder keys/values.
    """

    def __init__(self, model: EncoderDecoder, src: Tensor, use_cache: bool) -> None:
        self.model = model
        self.cache = model.new_cache() if use_cache else None
        self.memory, self.memory_real = model.encode(src)
        self.tokens = torch.full((src.size(0), 1), BOS, device=src.device)
        self._fed = 0  # tokens already in the cache
        self.fast = FastSteps()

    def reserve(self, max_new_tokens: int, compile: bool) -> None:
        if self.cache is not None:
            self.fast.plan(1 + max_new_tokens, compile)  # BOS and the new tokens

    def logits(self) -> Tensor:
        new = self.tokens[:, self._fed :] if self.cache is not None else self.tokens
        if isinstance(self.cache, StaticCache):  # the same strides at every step
            new = new.clone(memory_format=torch.contiguous_format)
        step = self.fast.step(_source_step, self.cache)
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


def _source_step(
    model: EncoderDecoder, new: Tensor, memory: Tensor, memory_real: Tensor,
    cache: DecodingCache | StaticCache | None,
) -> Tensor:  # fmt: skip
    hidden = model.decoder(new, memory=memory, memory_real=memory_real, cache=cache)
    return model.lm_head(hidden[:, -1]).float()  # only the last position predicts


def _prompt_step(
    model: DecoderOnly, new: Tensor, positions: Tensor, key_real: Tensor | None,
    cache: DecodingCache | StaticCache | None, prefix_len: Tensor | None,
) -> Tensor:  # fmt: skip
    hidden = model.hidden(
        new, positions=positions, key_real=key_real, cache=cache, prefix_len=prefix_len
    )
    return model.lm_head(hidden[:, -1]).float()


_COMPILED: dict[tuple[object, str], object] = {}


def compiled(step: object, device: torch.device) -> object:
    """``torch.compile(step)``, once per step function and device type, so every
    generation reuses the graphs (guards check shapes, not which cache object is passed).
    On CUDA in ``reduce-overhead`` mode: the step replays as a CUDA graph. On a CPU with
    inductor's C++ wrapper, which calls the kernels from C++ instead of Python, and with
    one-row matmuls as BLAS takes them (:mod:`attnlab.models.row_matmuls`)."""
    key = (step, device.type)
    if key not in _COMPILED:
        if device.type == "cuda":
            _COMPILED[key] = torch.compile(step, mode="reduce-overhead")  # type: ignore[call-overload]
        else:
            from attnlab.models.row_matmuls import OneRowMatmuls

            options = {"cpp_wrapper": True, "post_grad_custom_post_pass": OneRowMatmuls()}
            _COMPILED[key] = torch.compile(step, options=options)  # type: ignore[call-overload]
    return _COMPILED[key]


CAPACITY_STEP = 64  # on CUDA a static cache's slots are a multiple of this
POOLED_CACHES = 4  # static caches kept per stack for later generations, by shape
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
    (``scripts/decode_step_builds.py``).
    """

    def __init__(self) -> None:
        self.capacity: int | None = None
        self.compile = False
        self.checked = False  # whether the compiled step has run once with all its guards

    def plan(self, capacity: int, compile: bool) -> None:
        self.capacity, self.compile = capacity, compile

    def step(self, step: object, cache: DecodingCache | StaticCache | None) -> object:
        if not (self.compile and isinstance(cache, StaticCache)):
            return step
        fast = compiled(step, cache.slot.device)
        if not self.checked:
            self.checked = True
            return fast
        return functools.partial(_with_distinguishing_guards_only, fast)

    def after_first(
        self, cache: DecodingCache | StaticCache | None, stack: TransformerStack
    ) -> DecodingCache | StaticCache | None:
        if not isinstance(cache, DecodingCache) or self.capacity is None:
            return cache
        capacity, self.capacity = self.capacity, None  # once
        cuda = cache.positions is not None and cache.positions.device.type == "cuda"
        rounded = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
        if cuda and stack.supports_static(rounded):  # few shapes over validation batches
            capacity = rounded
        if capacity < cache.length or not stack.supports_static(capacity):
            return cache
        if cache.positions.device.type not in POOLED_ON:  # type: ignore[union-attr]
            return StaticCache.from_prompt(cache, capacity)
        # the buffers of earlier generations of this stack, by (rows, slots): reused, so a
        # compiled step's CUDA graph reads the same addresses every generation
        pool = stack.__dict__.setdefault("_static_caches", {})  # plain: no module state
        key = (cache.layers[0]["k"].size(0), capacity)
        earlier = pool.pop(key, None)
        static = StaticCache.from_prompt(cache, capacity, reuse=earlier)
        pool[key] = static
        while len(pool) > POOLED_CACHES:
            pool.pop(next(iter(pool)))  # the least recently used shape
        if static is not earlier and self.compile and cuda:
            for tensor in static.tensors():  # updated in place: CUDA graphs keep them
                torch._dynamo.mark_static_address(tensor)
        return static


def _with_distinguishing_guards_only(fast: Any, *args: object) -> Tensor:
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        return fast(*args)


class PromptDecoding(DecodingState):
    """A decoder-only model continuing a left-padded prompt; positions count real tokens only,
    so every row's first real token is at position 0 whatever its padding."""

    def __init__(self, model: DecoderOnly, prompt: Tensor, use_cache: bool) -> None:
        self.model = model
        self.cache = model.new_cache() if use_cache else None
        self.tokens = prompt
        self.key_real = prompt != PAD
        self.padded = not bool(self.key_real.all())
        self.positions = (self.key_real.long().cumsum(-1) - 1).clamp(min=0)
        self.prefix_len = (
            torch.full((prompt.size(0),), prompt.size(1), device=prompt.device)
            if model.cfg.prefix_lm
            else None
        )
        self._fed = 0
        self.fast = FastSteps()

    def reserve(self, max_new_tokens: int, compile: bool) -> None:
        if self.cache is not None:
            self.fast.plan(self.tokens.size(1) + max_new_tokens, compile)

    def logits(self) -> Tensor:
        if isinstance(self.cache, StaticCache):  # only the tokens appended since
            step = self.fast.step(_prompt_step, self.cache)
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
        if isinstance(self.cache, StaticCache):  # from here on, only what is not yet fed
            self._last_position = self.positions[:, -1:]
            self.tokens, self.positions = self.tokens[:, :0], self.positions[:, :0]
        return logits

    def append(self, token: Tensor) -> None:
        if isinstance(self.cache, StaticCache):  # only what is not yet fed: fresh (B, 1) tensors
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
        if isinstance(self.cache, StaticCache):
            self._last_position = self._last_position.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def build_model(cfg: ModelConfig, task: str | None = None) -> Architecture:
    """Instantiate the architecture named by ``cfg.name`` for data of kind ``task``
    (default: the first task its feeding serves)."""
    cls = ARCHITECTURES.get(cfg.name)
    if task is None:
        from attnlab.models.interface import TASK_KINDS

        task = next(t for t in TASK_KINDS if cls.feeding.serves(t))
    return cls(cfg, task)
