"""The three architectures, composed from the same stacks (Vaswani et al. 2017, Fig. 1).

* ``EncoderOnly``     bidirectional encoder + LM head (BERT-style masked LM)
* ``DecoderOnly``     causal decoder + LM head (GPT-style; prefix-LM optional)
* ``EncoderDecoder``  encoder, and a decoder whose cross-attention reads the
                      encoder output (the original Transformer, T5, BART)

All return logits over the vocabulary; ``hidden`` / ``encode`` / ``decode``
give the states that classification heads and generation use.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.models.config import ModelConfig
from attnlab.models.initialization import apply_deepnorm_gain, initialize
from attnlab.models.stack import DecodingCache, TokenEmbedding, TransformerStack
from attnlab.nn.norms import deepnorm_constants
from attnlab.registry import Registry

ARCHITECTURES: Registry[type[TransformerModel]] = Registry("model")


class TransformerModel(nn.Module):
    """Shared parts: output projection (optionally tied) and initialisation."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embeddings)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def _finish(self, n_layers: int, stacks: dict[str, TransformerStack]) -> None:
        initialize(self, self.cfg.init, self.cfg.d_model, n_layers)
        if self.cfg.norm == "deepnorm":
            constants = deepnorm_constants(
                self.cfg.name, self.cfg.encoder_layers, self.cfg.decoder_layers
            )
            for role, stack in stacks.items():
                apply_deepnorm_gain(stack.layers, constants[role][1])
        if self.cfg.tie != "none":
            # "we share the same weight matrix between the … embedding layers and
            # the pre-softmax linear transformation" (§3.4)
            self.lm_head.weight = self.embedding.weight

    def _alpha(self, role: str) -> float:
        if self.cfg.norm != "deepnorm":
            return 1.0
        constants = deepnorm_constants(
            self.cfg.name, self.cfg.encoder_layers, self.cfg.decoder_layers
        )
        return constants[role][0]

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


@ARCHITECTURES.register("encoder_only")
class EncoderOnly(TransformerModel):
    """A bidirectional encoder; every position sees every non-padding position."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.encoder = TransformerStack(
            cfg, self.embedding, cfg.n_layers, causal=False, residual_alpha=self._alpha("encoder")
        )
        self._finish(cfg.n_layers, {"encoder": self.encoder})

    def hidden(self, tokens: Tensor, key_real: Tensor | None = None) -> Tensor:
        return self.encoder(tokens, key_real=key_real)  # (B, T, d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.lm_head(self.hidden(tokens))  # (B, T, vocab)


@ARCHITECTURES.register("decoder_only")
class DecoderOnly(TransformerModel):
    """A causal decoder without cross-attention (GPT). ``prefix_len`` makes it a prefix-LM."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.decoder = TransformerStack(
            cfg, self.embedding, cfg.n_layers, causal=True, residual_alpha=self._alpha("decoder")
        )
        self._finish(cfg.n_layers, {"decoder": self.decoder})

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

    def new_cache(self) -> DecodingCache:
        return DecodingCache(len(self.decoder.layers))


@ARCHITECTURES.register("encoder_decoder")
class EncoderDecoder(TransformerModel):
    """Encoder over the source; decoder over the shifted target with cross-attention."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        # the target side owns self.embedding (tied to the output projection);
        # the source side shares it when the vocabulary is shared and tying is "all"
        share_source = cfg.tie == "all"
        self.src_embedding = (
            self.embedding
            if share_source
            else TokenEmbedding(cfg.vocab_size, cfg.d_model, cfg.scale_embeddings)
        )
        self.encoder = TransformerStack(
            cfg, self.src_embedding, cfg.encoder_layers, causal=False,
            residual_alpha=self._alpha("encoder"),
        )  # fmt: skip
        self.decoder = TransformerStack(
            cfg, self.embedding, cfg.decoder_layers, causal=True, cross=True,
            residual_alpha=self._alpha("decoder"),
        )  # fmt: skip
        self._finish(
            cfg.encoder_layers + cfg.decoder_layers,
            {"encoder": self.encoder, "decoder": self.decoder},
        )

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

    def new_cache(self) -> DecodingCache:
        return DecodingCache(len(self.decoder.layers))


def build_model(cfg: ModelConfig) -> TransformerModel:
    """Instantiate the architecture named by ``cfg.name``."""
    return ARCHITECTURES.get(cfg.name)(cfg)
