"""The models that race each other, built at identical sizes.

* ours: :class:`attnlab.models.DecoderOnly` / :class:`attnlab.models.EncoderDecoder`
* Hugging Face ``GPT2LMHeadModel`` (Pre-LN, GELU, learned positions, tied embeddings)
* ``torch.nn.Transformer`` (Post-LN, ReLU) between attnlab's own embeddings and
  output layer, so only the layers differ
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models import ModelConfig, TransformerModel, build_model
from attnlab.models.stack import TokenEmbedding
from attnlab.nn.positions import SinusoidalPositions

FIRST_TOKEN = 6  # ids below are specials (PAD = 0): random batches hold no padding


@dataclass(frozen=True)
class BenchSize:
    """One benchmark configuration; ``baby`` is nanoGPT's shakespeare_char "baby GPT"
    at 4 layers and 4 heads (its README's CPU setting)."""

    name: str
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    block: int = 64
    batch: int = 12
    vocab: int = 65

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SIZES = {
    "tiny": BenchSize("tiny", n_layers=2, n_heads=2, d_model=32, block=16, batch=2),  # smoke test
    "baby": BenchSize("baby"),
    "d512": BenchSize("d512", n_heads=8, d_model=512),  # head size 64, as in GPT-2
}


def random_tokens(size: BenchSize, length: int, device: torch.device, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(FIRST_TOKEN, size.vocab, (size.batch, length), generator=generator)
    return tokens.to(device)


def our_decoder_only(size: BenchSize, **overrides: Any) -> TransformerModel:
    """GPT-2's block: Pre-LN, GELU, learned positions, tied embeddings, no dropout."""
    values = dict(
        name="decoder_only", vocab_size=size.vocab, d_model=size.d_model, n_heads=size.n_heads,
        n_layers=size.n_layers, dropout=0.0, norm="pre", ffn="gelu", pos="learned",
        tie_embeddings=True, max_len=size.block,
    )  # fmt: skip
    values.update(overrides)
    return build_model(ModelConfig(**values).validated())


def our_encoder_decoder(size: BenchSize) -> TransformerModel:
    """The paper's Transformer: Post-LN, ReLU, sinusoidal positions, no dropout."""
    cfg = ModelConfig(
        name="encoder_decoder", vocab_size=size.vocab, d_model=size.d_model,
        n_heads=size.n_heads, n_layers=size.n_layers, dropout=0.0, norm="post", ffn="relu",
        pos="sinusoidal", tie_embeddings=True, max_len=size.block,
    )  # fmt: skip
    return build_model(cfg.validated())


def transformers_folder() -> Path:
    """Where transformers is found besides the environment: ``$ATTNLAB_HF_PARITY``, else
    ``<venv>/hf-parity``, the folder ``make setup`` installs it into for the export parity
    tests. It is kept out of the venv's own packages because torchmetrics imports it in
    every process where it can; only the processes that need it (this bench, the parity
    tests) put the folder on their path."""
    return Path(os.environ.get("ATTNLAB_HF_PARITY") or Path(sys.prefix) / "hf-parity")


def find_transformers() -> None:
    """Put :func:`transformers_folder` on this process's path, after the environment's own
    packages (a transformers installed there, ``pip install 'attnlab[bench]'``, wins).
    attnlab-bench calls it when it runs a Hugging Face comparison."""
    folder = transformers_folder()
    if folder.is_dir() and str(folder) not in sys.path:
        sys.path.append(str(folder))


def hf_gpt2(size: BenchSize) -> nn.Module | None:
    """``transformers.GPT2LMHeadModel`` of the same size, or None when not installed."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    config = GPT2Config(
        vocab_size=size.vocab, n_positions=size.block, n_embd=size.d_model,
        n_layer=size.n_layers, n_head=size.n_heads, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, use_cache=False, attn_implementation="sdpa", bos_token_id=None,
        eos_token_id=None,
    )  # fmt: skip
    return GPT2LMHeadModel(config)


def gpt2_state_dict(model: TransformerModel) -> dict[str, Tensor]:
    """attnlab ``decoder_only`` weights (GPT-2's block, learned positions, tied embeddings)
    under ``GPT2LMHeadModel``'s names; its Conv1D layers store W transposed (in × out)."""
    ours = model.state_dict()
    out = {
        "transformer.wte.weight": ours["embedding.weight_table.weight"],
        "transformer.wpe.weight": ours["decoder.positions.table.weight"],
        "transformer.ln_f.weight": ours["decoder.final_norm.weight"],
        "transformer.ln_f.bias": ours["decoder.final_norm.bias"],
        "lm_head.weight": ours["lm_head.weight"],
    }
    names = {  # GPT-2 name: (attnlab name, transposed)
        "ln_1": ("attn_residual.norm", False), "attn.c_attn": ("self_attn.in_proj", True),
        "attn.c_proj": ("self_attn.out_proj", True), "ln_2": ("ffn_residual.norm", False),
        "mlp.c_fc": ("ffn.linear1", True), "mlp.c_proj": ("ffn.linear2", True),
    }  # fmt: skip
    for i in range(model.cfg.n_layers):
        for theirs, (name, transposed) in names.items():
            weight = ours[f"decoder.layers.{i}.{name}.weight"]
            out[f"transformer.h.{i}.{theirs}.weight"] = weight.t() if transposed else weight
            out[f"transformer.h.{i}.{theirs}.bias"] = ours[f"decoder.layers.{i}.{name}.bias"]
    return out


class TorchTransformerSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` with attnlab's token embedding, sinusoidal positions and
    tied output layer. nn.Transformer adds a final LayerNorm to each stack even when
    Post-LN, one norm more per stack than ours."""

    def __init__(self, size: BenchSize) -> None:
        super().__init__()
        d = size.d_model
        self.embedding = TokenEmbedding(size.vocab, d, scale=True)
        self.positions = SinusoidalPositions(d, size.n_heads, size.block, causal=False)
        self.transformer = nn.Transformer(
            d_model=d, nhead=size.n_heads, num_encoder_layers=size.n_layers,
            num_decoder_layers=size.n_layers, dim_feedforward=4 * d, dropout=0.0,
            batch_first=True, norm_first=False,
        )  # fmt: skip
        self.lm_head = nn.Linear(d, size.vocab, bias=False)
        self.lm_head.weight = self.embedding.weight

    def _embed(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.positions.embed(self.embedding(tokens), positions)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        src_pad = src == 0  # padding masks, as ours computes them
        hidden = self.transformer(
            self._embed(src), self._embed(tgt_in), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
        )  # fmt: skip
        return self.lm_head(hidden)


def logits_of(output: Any) -> Tensor:
    """Hugging Face models return an output object; ours return the logits."""
    return output if isinstance(output, Tensor) else output.logits


def training_step(model: nn.Module, inputs: tuple[Tensor, ...], labels: Tensor) -> Any:
    """A closure doing one AdamW step: forward, cross-entropy, backward, update."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = logits_of(model(*inputs))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))
        loss.backward()
        optimizer.step()

    return step
