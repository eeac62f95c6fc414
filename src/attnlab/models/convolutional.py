"""The convolutional baseline the Transformer replaced (``model=conv``): ConvS2S.

Gehring et al. 2017, "Convolutional Sequence to Sequence Learning" — the convolutional
family "Attention Is All You Need" compares against (§1, Table 2):

* seq2seq         an encoder of gated convolution blocks reads the source at once; a
                  decoder of causal blocks, each with its own attention over the encoder
                  (multi-step attention, §3.3), generates the target
* lm              the decoder alone, without attention: the gated convolutional language
                  model (Dauphin et al. 2017, §3)
* classification  the encoder, pooled (``model.pool``: mean | max)

The blocks, the attention and the initialisation are in :mod:`attnlab.nn.convolution`.
Generation's cache is the last k − 1 inputs of every decoder layer (a convolution sees no
further back): one step costs one window per layer (:mod:`attnlab.inference.convolutional`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.components.architectures import ConvolutionalConfig
from attnlab.errors import ConfigError
from attnlab.model_config import ModelConfig
from attnlab.models.flops import output_flops
from attnlab.models.interface import Architecture
from attnlab.models.stack import make_positions
from attnlab.models.transformer import mean_over_real
from attnlab.nn.convolution import (
    ConvLayer,
    ConvMemory,
    GradScale,
    MultiStepAttention,
    normed_linear,
)
from attnlab.nn.positions import Positions


class ConvEncoder(nn.Module):
    """e_j = w_j + p_j (§3.1), mapped to C channels, the residual GLU blocks, back to f:

        z^u = W_out h^L,  the attention's keys;  (z^u + e)·√0.5,  its values  (§3.3, eq. 2)

    Padding is zero at every block's input, so a real token near the end of a right-padded
    source sees what it would see unpadded. The gradient reaching z^u is divided by the
    number of attention mechanisms reading it (§3.4; the source embeddings are excluded).
    """

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding, readers: int) -> None:
        super().__init__()
        f, C, p = cfg.d_model, cfg.conv_channels or cfg.d_model, cfg.dropout
        self.embedding, self.pad_id, self.readers = embedding, cfg.pad_id, readers
        self.positions = make_positions(cfg, causal=False, grid=None)
        self.dropout = nn.Dropout(p)
        self.into = normed_linear(f, C, dropout=p)
        self.layers = nn.ModuleList(
            ConvLayer(C, cfg.kernel_size, p, causal=False, attention=None)
            for _ in range(cfg.encoder_layers)
        )
        self.out = normed_linear(C, f)

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, S) -> z^u (B, S, f), e (B, S, f) and the real positions (B, S)."""
        real = src != self.pad_id
        pos = torch.arange(src.size(1), device=src.device)
        self.positions.check(pos, last=src.size(1) - 1)
        e = self.dropout(self.positions.embed(self.embedding(src), pos))
        keep = real[..., None].to(e.dtype)
        x = self.into(e)
        for layer in self.layers:
            x = layer(x * keep)
        return self.out(x) * keep, e, real

    def memory(self, src: Tensor) -> ConvMemory:
        z, e, real = self(src)
        z = GradScale.apply(z, 1.0 / self.readers)
        m = real.sum(1, keepdim=True).to(z.dtype).clamp(min=1)[..., None]  # (B, 1, 1)
        return ConvMemory(z, (z + e) * math.sqrt(0.5), real, m.sqrt())


class ConvDecoder(nn.Module):
    """g_i = w_i + p_i (§3.1), mapped to C channels; causal GLU blocks, each with its own
    attention over the encoder (§3.3) when there is one; back to f (the output layer's
    input, W_o h^L in §3.2's softmax). ``real`` marks a left-padded prompt's tokens: their
    positions count from its first real token and padding is zero at every block's input,
    as the decoder's own left padding is."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding, attends: bool) -> None:
        super().__init__()
        f, C, p = cfg.d_model, cfg.conv_channels or cfg.d_model, cfg.dropout
        self.embedding, self.kernel_size = embedding, cfg.kernel_size
        self.positions = make_positions(cfg, causal=True, grid=None)
        self.dropout = nn.Dropout(p)
        self.into = normed_linear(f, C, dropout=p)
        self.layers = nn.ModuleList(
            ConvLayer(C, cfg.kernel_size, p, causal=True,
                      attention=MultiStepAttention(C, f) if attends else None)
            for _ in range(cfg.decoder_layers)
        )  # fmt: skip
        self.out = normed_linear(C, f)

    def embed(self, tokens: Tensor, pos: Tensor) -> Tensor:
        """g: token + position embeddings (B, T, f)."""
        return self.dropout(self.positions.embed(self.embedding(tokens), pos))

    def forward(self, tokens: Tensor, memory: ConvMemory | None = None,
                real: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:  # fmt: skip
        """(B, T) -> outputs (B, T, f) and each layer's last k − 1 inputs (the cache)."""
        if real is None:
            pos = torch.arange(tokens.size(1), device=tokens.device)
            self.positions.check(pos, last=tokens.size(1) - 1)
        else:
            pos = (real.long().cumsum(1) - 1).clamp(min=0)
            self.positions.check(pos)
        g = self.embed(tokens, pos)
        keep = None if real is None else real[..., None].to(g.dtype)
        x, history = self.into(g), []
        for layer in self.layers:
            if keep is not None:
                x = x * keep
            history.append(last_inputs(x, self.kernel_size - 1))
            x = layer(x, g, memory)
        return self.out(x), history

    def step(self, token: Tensor, pos: Tensor, memory: ConvMemory | None,
             history: list[Tensor]) -> tuple[Tensor, list[Tensor]]:  # fmt: skip
        """One more token (B,) at positions ``pos`` (B,) -> output (B, f) and the updated
        cache: each layer convolves its k − 1 cached inputs and the new one."""
        self.positions.check(pos)
        g = self.embed(token[:, None], pos[:, None])
        x, updated = self.into(g), []
        for layer, past in zip(self.layers, history, strict=True):
            window = torch.cat([past, x], dim=1)
            updated.append(window[:, 1:])
            x = layer.step(window, g, memory)
        return self.out(x)[:, 0], updated


def last_inputs(x: Tensor, n: int) -> Tensor:
    """The last ``n`` positions of (B, T, C), left-padded with zeros when T < n."""
    if x.size(1) >= n:
        return x[:, x.size(1) - n :]
    return nn.functional.pad(x, (0, 0, n - x.size(1), 0))


class ConvSeq2Seq(Architecture):
    """ConvS2S (Gehring et al. 2017), the gated convolutional LM (Dauphin et al. 2017).

    Keys: ``d_model`` (f: embeddings, attention, the encoder's output), ``conv_channels``
    (C, the blocks' width; null: f), ``kernel_size`` (k), ``n_layers`` /
    ``n_encoder_layers`` / ``n_decoder_layers``, ``dropout`` (embeddings, every block's
    input, the output layer's input), ``pos`` (added to the embeddings: ``learned``, the
    paper's, sinusoidal or none; max_len bounds a table), ``tie_embeddings``, ``pool``,
    ``init`` (``paper``: §3.5, the only one). The Transformer-only keys (``n_heads``,
    ``d_ff``, ``norm``, ``norm_type``, ``ffn``, ``attn_impl``, ``scale_embeddings``,
    ``embed_norm``, …) have defaults everywhere and are not used here.
    """

    feeding = ConvolutionalConfig.feeding
    decoding = "convolutional"  # attnlab.inference.convolutional

    def __init__(self, cfg: ModelConfig, task: str = "seq2seq") -> None:
        super().__init__(cfg, task)
        f, V, p = cfg.d_model, cfg.vocab_size, cfg.dropout
        self.embedding = self.embedding_table(V, f, cfg.pad_id)
        if task == "seq2seq":
            source = self.embedding if cfg.tie == "all" else self.embedding_table(V, f, cfg.pad_id)
            self.encoder = ConvEncoder(cfg, source, readers=cfg.decoder_layers)
            self.decoder = ConvDecoder(cfg, self.embedding, attends=True)
        elif task == "lm":
            self.decoder = ConvDecoder(cfg, self.embedding, attends=False)
        elif task == "classification":
            self.encoder = ConvEncoder(cfg, self.embedding, readers=1)
        else:
            raise ConfigError(f"model={cfg.name} {self.feeding.refusal(task)}")
        self.dropout = nn.Dropout(p)
        if task != "classification":
            if cfg.tie == "none":
                self.lm_head = normed_linear(f, V, dropout=p)
            else:  # Press & Wolf 2017: the output layer is the embedding (no weight norm)
                self.lm_head = nn.Linear(f, V)
                nn.init.zeros_(self.lm_head.bias)
                self.lm_head.weight = self.embedding.weight
        for module in self.modules():  # a learned position table: N(0, 0.1), as embeddings
            if isinstance(module, Positions):
                for param in module.parameters():
                    nn.init.normal_(param, 0.0, 0.1)

    def embedding_table(self, V: int, f: int, pad_id: int) -> nn.Embedding:
        """Embeddings N(0, 0.1) (§3.5), the padding row 0."""
        table = nn.Embedding(V, f, padding_idx=pad_id)
        nn.init.normal_(table.weight, 0.0, 0.1)
        with torch.no_grad():
            table.weight[pad_id].zero_()
        return table

    def output_logits(self, hidden: Tensor) -> Tensor:
        return self.lm_head(self.dropout(hidden))

    def forward(self, tokens: Tensor, tgt_in: Tensor | None = None) -> Tensor:
        """seq2seq: source (B, S), BOS + target (B, T) -> logits (B, T, vocab);
        lm: tokens (B, T) -> logits (B, T, vocab); classification: ``pooled``."""
        if self.task == "lm":
            return self.output_logits(self.decoder(tokens)[0])
        if self.task == "classification":
            return self.pooled(tokens)
        if tgt_in is None:
            raise ValueError("model=conv on seq2seq data reads a source and a decoder input")
        return self.output_logits(self.decoder(tgt_in, self.encode(tokens))[0])

    def encode(self, src: Tensor) -> ConvMemory:
        """Source tokens -> what every decoder layer's attention reads."""
        return self.encoder.memory(src)

    def pooled(self, inputs: Tensor) -> Tensor:
        """``mean`` (default) or ``max`` of the encoder's outputs z^u over real tokens."""
        z, _, real = self.encoder(inputs)
        if self.pool_for(self.task) == "max":
            return z.masked_fill(~real[..., None], float("-inf")).amax(1).clamp(min=-1e4)
        return mean_over_real(z, real)

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        """Matrix products only, multiply-add = 2; f = d_model, C = conv_channels, k.

        * per token and block: the convolution onto 2C channels, 2·k·C·2C
        * per token, each side: the maps into and out of the blocks, 2·2·f·C
        * per target position and decoder block with attention: W_d and W_c 2·2·C·f, the
          scores and the weighted sum over the source 2·2·S·f; the output layer 2·f·V

        ``src_len`` = 0 is the language model (the decoder without attention).
        (Classification is counted by its task as ``(length, 1)``: the encoder plus one
        decoder step, which it does not run.)
        """
        f, C, k = cfg.d_model, cfg.conv_channels or cfg.d_model, cfg.kernel_size
        block = 2 * k * C * 2 * C
        ends = 2 * 2 * f * C

        def side(length: int, blocks: int) -> int:
            return length * (ends + blocks * block)

        decoder = side(tgt_len, cfg.decoder_layers) + output_flops(cfg, tgt_len)
        if src_len == 0:
            return decoder
        attention = cfg.decoder_layers * tgt_len * (2 * 2 * C * f + 2 * 2 * src_len * f)
        return side(src_len, cfg.encoder_layers) + decoder + attention
