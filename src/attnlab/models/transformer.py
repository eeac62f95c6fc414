"""The three Transformer architectures, composed from the same stacks (Vaswani et al. 2017, Fig. 1).

* ``EncoderOnly``     bidirectional encoder + LM head (BERT-style masked LM)
* ``DecoderOnly``     causal decoder + LM head (GPT-style; prefix-LM optional)
* ``EncoderDecoder``  encoder, and a decoder whose cross-attention reads the
                      encoder output (the original Transformer, T5, BART)

Each implements :class:`~attnlab.models.interface.Architecture` and declares its
:class:`~attnlab.models.interface.Feeding`; the tasks and generation use only that.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab.components.architectures import (
    DecoderOnlyConfig,
    EncoderDecoderConfig,
    EncoderOnlyConfig,
)
from attnlab.errors import ConfigError
from attnlab.model_config import ModelConfig
from attnlab.models.flops import output_flops, transformer_flops
from attnlab.models.initialization import initialize
from attnlab.models.interface import Architecture
from attnlab.models.parametrization import Readout
from attnlab.models.stack import TokenEmbedding, TransformerStack
from attnlab.nn.norms import RESIDUALS, StackDepth
from attnlab.special_tokens import BOS, PAD


class TransformerModel(Architecture):
    """Shared parts: token embedding, output projection (optionally tied), initialisation."""

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__(cfg, task)
        self.embedding = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embeddings)
        self.lm_head = Readout(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.softcap = cfg.get("final_softcap")
        if self.lm_head.softcap is not None and task not in ("lm", "seq2seq"):
            raise ConfigError(f"model.final_softcap={self.lm_head.softcap} applies to lm or "
                              f"seq2seq data, and this data is {task}; remove it")  # fmt: skip

    def _finish(self, n_layers: int, depths: dict[str, StackDepth]) -> None:
        """Initialise (``model.init``, then the residual scheme's own step per stack) and tie."""
        initialize(self, self.cfg.init, self.cfg.d_model, n_layers, self.cfg.zero_init_residual)
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


class EncoderOnly(TransformerModel):
    """A bidirectional encoder; every position sees every non-padding position (BERT)."""

    feeding = EncoderOnlyConfig.feeding

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__(cfg, task)
        depth = StackDepth("encoder", n_encoder=cfg.n_layers, n_decoder=0)
        self.encoder = TransformerStack(cfg, self.embedding, cfg.n_layers, False, depth=depth)
        self._finish(cfg.n_layers, {"encoder": depth})

    def hidden(self, tokens: Tensor, key_real: Tensor | None = None,
               documents: Tensor | None = None) -> Tensor:  # fmt: skip
        return self.encoder(tokens, key_real=key_real, documents=documents)  # (B, T, d_model)

    def forward(self, tokens: Tensor, documents: Tensor | None = None) -> Tensor:
        return self.lm_head(self.hidden(tokens, documents=documents))  # (B, T, vocab)

    def pooled(self, inputs: Tensor) -> Tensor:
        """BERT-style pooling: the mean of the encoder states over real tokens."""
        return mean_over_real(self.hidden(inputs), inputs != PAD)

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        length = src_len + tgt_len  # one sequence (a language model: src_len = 0)
        return transformer_flops(cfg, length, cfg.n_layers) + output_flops(cfg, length)


class DecoderOnly(TransformerModel):
    """A causal decoder without cross-attention (GPT). ``prefix_len`` makes it a prefix-LM."""

    feeding = DecoderOnlyConfig.feeding
    decoding = "transformer"  # attnlab.inference.decoding: decoder, hidden, lm_head

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
        cache: Any = None,
        prefix_len: Tensor | None = None,
        documents: Tensor | None = None,
    ) -> Tensor:
        return self.decoder(tokens, positions=positions, key_real=key_real, cache=cache,
                            prefix_len=prefix_len, documents=documents)  # fmt: skip

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

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        length = src_len + tgt_len  # one sequence (a language model: src_len = 0)
        return transformer_flops(cfg, length, cfg.n_layers) + output_flops(cfg, length)


class EncoderDecoder(TransformerModel):
    """Encoder over the source; decoder over the shifted target with cross-attention."""

    feeding = EncoderDecoderConfig.feeding
    decoding = "transformer"  # attnlab.inference.decoding: encode, decoder, lm_head

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
        cache: Any = None,
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

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        return (
            transformer_flops(cfg, src_len, cfg.encoder_layers)
            + transformer_flops(cfg, tgt_len, cfg.decoder_layers, memory_len=src_len)
            + output_flops(cfg, tgt_len)
        )


def _default_task(cfg: ModelConfig, task: str | None) -> str:
    """``task``, or the first task the architecture's feeding serves."""
    if task is None:
        from attnlab.components.feeding import TASK_KINDS

        task = next(t for t in TASK_KINDS if cfg.architecture.feeding.serves(t))
    return task


def build_model(cfg: ModelConfig, task: str | None = None) -> Architecture:
    """The architecture ``cfg`` names, built by its config for data of kind ``task`` (default:
    the first task its feeding serves), in the parametrisation ``model.param`` chose."""
    model = cfg.architecture.build(cfg, _default_task(cfg, task))
    if "param" in cfg:
        cfg.component("param").apply(model, cfg)
    return model

