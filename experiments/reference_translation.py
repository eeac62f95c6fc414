"""A translation gate from outside attnlab's model code: torch's own ``nn.Transformer``.

The studies' translation baselines are attnlab encoder-decoders. To show that a baseline
reaches what the architecture reaches elsewhere *in the same setup*, this script trains
``torch.nn.Transformer`` (Vaswani et al. 2017, §3: 6 + 6 layers there, the study's sizes
here) with its own loop on the batches attnlab's data module gives for the same
``attnlab-train`` overrides — the same Multi30k pairs, BPE vocabulary, length filter, batch
size and order — and scores it the same way: the best checkpoint by the run's
``callbacks.model_checkpoint`` (validation loss, the only metric it validates) on the same
validation batches, greedy decoding (never a padding, start or mask token), sacreBLEU
(13a, no smoothing) on the detokenised test sentences. Nothing of attnlab's model, task,
optimiser, schedule or decoding code is used: only its configuration, its data and the BLEU
options it reports with.

What the reference is, as the paper describes it: a shared source/target/output embedding
scaled by √d_model (§3.4), sinusoidal positions added (§3.5, eq. in that section), dropout on
their sum (§5.4), torch's encoder and decoder layers (ReLU FFN, eq. 2; ``norm_first`` for
Pre-LN, else the paper's Post-LN; dropout on the attention weights as ``model.attn_dropout``),
a final LayerNorm on each stack (``nn.Transformer`` has one for Post-LN too; attnlab's Post-LN
has none), torch's own initialisation (not attnlab's ``model.init``), label-smoothed
cross-entropy (§5.4), AdamW with the run's β and ε (attnlab's defaults filled in by its
optimiser registry) and no weight decay, linear warm-up then flat (``constant``) or cosine decay to
``optim.min_lr``, and the gradient norm clipped at ``trainer.gradient_clip_val`` (0: none); a
non-finite training loss ends the run as ``diverged``, untested (exit 1), as attnlab's guard does.
Settings it does not implement are refused in one line (exit 2) rather than ignored.

Writes ``OUT/summary.json`` in the form ``attnlab-compare`` reads (``status``, ``config``,
``overrides``, ``metrics``, ``bleu_signature``), so a study can test its baseline against the
reference with ``--vs``:

    OMP_NUM_THREADS=1 python experiments/reference_translation.py OUT \\
        experiment=study_architectures_encdec seed=0

``--init=attnlab`` (first) is a diagnostic, not a gate: the reference initialised as attnlab's
``model.init=paper`` initialises (see :func:`attnlab_init`), named ``reference_<experiment>_
attnlab_init``, to tell whether a gap between the two comes from the initialisation;
``--init=qkv`` makes only the first of its two changes (``reference_<experiment>_qkv_init``),
to tell which of them does.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU
from torch import Tensor, nn
from torch.nn import functional as F

from attnlab.cli.compose import compose_config
from attnlab.cli.pipeline import build_data, build_task
from attnlab.special_tokens import BOS, EOS, MASK, PAD
from attnlab.tasks.seq2seq import BLEU_OPTIONS  # the BLEU attnlab reports, not its code

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_common import (  # noqa: E402
    COMMON,
    arguments,
    autocast,
    check_model,
    device_of,
    entry,
    fit,
    refuse,
    settings_of,
    write_summary,
)

IGNORE = -100
# what the reference implements; any other value of these keys is refused
IMPLEMENTS = {"name": "encoder_decoder", "pos": "sinusoidal", "ffn": "relu",
              "norm_type": "layernorm", "block": "sequential", "attention": "full", "param": "sp",
              "tie_embeddings": True, "scale_embeddings": True, "bias": True, "embed_norm": False,
              "qk_norm": False, "n_kv_heads": None, "final_softcap": None, "init": "paper",
              "zero_init_residual": False, "attn_softcap": None}  # fmt: skip
# what it reads besides COMMON, the model and the optimiser; the study presets set every one
SETTINGS = (*COMMON, "trainer.limit_val_batches", "decode.strategy", "decode.max_new_tokens")


def sinusoids(length: int, width: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…) (§3.5)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(1e4) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class Reference(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, encoder_layers: int,
                 decoder_layers: int, d_ff: int, dropout: float, attention_dropout: float,
                 norm_first: bool) -> None:  # fmt: skip
        super().__init__()
        self.width = width
        self.embedding = nn.Embedding(vocab, width, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, std=width**-0.5)
        self.register_buffer("positions", sinusoids(1024, width), persistent=False)
        self.dropout = nn.Dropout(dropout)
        with warnings.catch_warnings():  # Pre-LN layers skip its nested-tensor fast path
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = nn.Transformer(
                d_model=width, nhead=heads, num_encoder_layers=encoder_layers,
                num_decoder_layers=decoder_layers, dim_feedforward=d_ff, dropout=dropout,
                activation="relu", batch_first=True, norm_first=norm_first,
            )  # fmt: skip
        for module in self.transformer.modules():  # dropout on the attention weights
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = attention_dropout

    def embed(self, tokens: Tensor) -> Tensor:
        x = self.embedding(tokens) * math.sqrt(self.width)
        return self.dropout(x + self.positions[: tokens.size(1)])

    def encode(self, src: Tensor) -> Tensor:
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=src == PAD)

    def decode(self, memory: Tensor, src: Tensor, prefix: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(
            prefix.size(1), device=prefix.device, dtype=torch.bool
        )
        h = self.transformer.decoder(self.embed(prefix), memory, tgt_mask=causal,
                                     tgt_is_causal=True,
                                     memory_key_padding_mask=src == PAD)  # fmt: skip
        return h @ self.embedding.weight.T  # the output projection shares the embedding (§3.4)

    def forward(self, src: Tensor, prefix: Tensor) -> Tensor:
        return self.decode(self.encode(src), src, prefix)


def shifted(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Right-padded targets -> decoder input BOS y and labels y EOS (padding ignored)."""
    rows = torch.arange(tgt.size(0), device=tgt.device)
    prefix = torch.cat([torch.full_like(tgt[:, :1], BOS), tgt], dim=1)
    labels = torch.cat([tgt, torch.full_like(tgt[:, :1], PAD)], dim=1)
    labels[rows, (tgt != PAD).sum(1)] = EOS
    return prefix, labels.masked_fill(labels == PAD, IGNORE)


@torch.no_grad()
def greedy(model: Reference, src: Tensor, max_new: int) -> list[list[int]]:
    memory = model.encode(src)
    out = torch.full((src.size(0), 1), BOS, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_new):
        logits = model.decode(memory, src, out)[:, -1]
        logits[:, [PAD, BOS, MASK]] = -math.inf  # never generated: padding, a start, a mask
        step = logits.argmax(-1)
        step = step.masked_fill(done, PAD)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == EOS
        if done.all():
            break
    hypotheses = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(EOS)] if EOS in row else row
        hypotheses.append([t for t in row if t != PAD])
    return hypotheses


def attnlab_init(model: Reference, biases: bool = True) -> None:
    """The diagnostic ``--init=attnlab``: the two ways attnlab's ``model.init=paper`` differs
    from torch's own initialisation, applied to the reference — W_Q, W_K and W_V each a Xavier
    draw of its own (torch draws them as one stacked 3d × d matrix, so about 0.71× smaller)
    and every linear bias zero (torch's feed-forward biases are uniform). Whether a gap to
    attnlab's model closes with it tells whether the initialisation is the cause. Without
    ``biases`` (``--init=qkv``) torch's biases are kept."""
    for module in model.transformer.modules():
        if isinstance(module, nn.MultiheadAttention):
            for part in module.in_proj_weight.data.chunk(3):
                nn.init.xavier_uniform_(part)
        if biases and isinstance(module, nn.Linear | nn.MultiheadAttention):
            for name, param in module.named_parameters(recurse=False):
                if "bias" in name:
                    nn.init.zeros_(param)


def main(argv: list[str]) -> None:
    init, out, overrides = arguments(argv, "reference_translation.py", ("attnlab", "qkv"))
    cfg = compose_config(overrides)
    setting = settings_of(cfg, SETTINGS, ("val/loss",), weight_decay=False)
    if setting["decode.strategy"] != "greedy":
        refuse(f"decode.strategy={setting['decode.strategy']}: the reference decodes greedily only")
    data = build_data(cfg)
    resolved = build_task(cfg, data).model_cfg  # the model's keys with their defaults filled in
    check_model(resolved, IMPLEMENTS)
    device, dtype = device_of(cfg.trainer)
    torch.manual_seed(int(setting["seed"]))
    layers = int(resolved.n_layers)
    model = Reference(
        data.vocab_size, int(resolved.d_model), int(resolved.n_heads),
        int(resolved.n_encoder_layers or layers), int(resolved.n_decoder_layers or layers),
        int(resolved.ff_dim), float(resolved.dropout), float(resolved.attn_dropout),
        norm_first=resolved.norm == "pre",
    ).to(device)  # fmt: skip
    if init != "torch":
        attnlab_init(model, biases=init == "attnlab")
    val_batches = int(setting["trainer.limit_val_batches"])
    smoothing = float(setting["task.label_smoothing"])

    def logits_and_labels(batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        prefix, labels = shifted(batch["tgt"].to(device))
        with autocast(device, dtype):
            return model(batch["src"].to(device), prefix).float().flatten(0, 1), labels.flatten()

    def train_loss(batch: dict[str, Tensor]) -> Tensor:
        logits, labels = logits_and_labels(batch)
        return F.cross_entropy(logits, labels, ignore_index=IGNORE, label_smoothing=smoothing)

    def validate() -> dict[str, float]:
        total, count = 0.0, 0
        for i, batch in enumerate(data.val_dataloader()):
            if i == val_batches:
                break
            logits, labels = logits_and_labels(batch)
            total += float(F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum"))
            count += int((labels != IGNORE).sum())
        return {"val/loss": total / count}

    start = time.time()
    result = fit(model, data, setting, cfg, train_loss, validate)
    metrics: dict[str, float] = {"params": sum(p.numel() for p in model.parameters())}
    bleu, extra = BLEU(**BLEU_OPTIONS), []
    if result.status == "completed":  # the test, from the checkpoint the monitor chose
        model.load_state_dict(result.best_state)
        model.eval()
        hypotheses, references = [], []
        max_new = int(setting["decode.max_new_tokens"])
        for batch in data.test_loader():
            with autocast(device, dtype):
                rows = greedy(model, batch["src"].to(device), max_new)
            hypotheses += [data.decode(row) for row in rows]
            references += [data.decode(row) for row in batch["tgt"].tolist()]
        metrics["test/bleu"] = bleu.corpus_score(hypotheses, [references]).score
        extra.append(("bleu_signature", bleu.get_signature().format()))
    name = f"reference_{cfg.get('experiment_name') or 'translation'}"
    name += f"_{init}_init" if init != "torch" else ""
    shape = ("norm", "n_layers", "d_model", "n_heads", "d_ff")  # its model, for --by
    write_summary(out, name, "experiments/reference_translation.py (torch.nn.Transformer)",
                  {key: getattr(resolved, key) for key in shape}, setting, overrides, result,
                  metrics, start, extra)  # fmt: skip


if __name__ == "__main__":
    entry(main)
