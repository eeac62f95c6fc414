"""A classification gate from outside attnlab's model code: torch's own
``nn.TransformerEncoder`` as a classifier over the mean of its states.

The architecture study's SST-2 baseline is an attnlab encoder-only model that reads the label
from the mean of its encoder states. To show that it reaches what that architecture reaches
elsewhere *in the same setup*, this script trains torch's ``nn.TransformerEncoder`` (Vaswani
et al. 2017, §3.1, its encoder stack; Devlin et al. 2019's use of it for classification) with
its own loop on the batches attnlab's data module gives for the same ``attnlab-train``
overrides — the same sentences, BPE vocabulary, length cut, held-out rows, batch size and
order — and scores it the same way: the best checkpoint by the run's
``callbacks.model_checkpoint`` (the study's: held-out accuracy, max; the first on a tie), its
accuracy and cross-entropy on the test set (SST-2 dev). Nothing of attnlab's model, task,
optimiser or schedule code is used: only its configuration and its data.

What the reference is: a token embedding scaled by √d_model (§3.4; drawn N(0, d_model^-½) so
that the scaled embedding has unit scale) plus a learned position embedding (BERT; drawn
N(0, 0.02), BERT's ``initializer_range``), dropout on their sum (§5.4), torch's encoder layers
(GELU or ReLU feed-forward, eq. 2; ``norm_first`` for Pre-LN with a final LayerNorm, else the
paper's Post-LN without one; dropout on the attention weights as ``model.attn_dropout``),
padding masked from every key, the mean of the states of the real tokens, dropout and a linear
layer to the classes (torch's own initialisation everywhere else, not attnlab's
``model.init``); cross-entropy (label smoothing as ``task.label_smoothing``), AdamW with the
run's β, ε and weight decay on the linear maps' weights (not on biases, norms or embedding
tables), linear warm-up then flat or cosine decay to ``optim.min_lr``, the gradient norm
clipped at ``trainer.gradient_clip_val``. A non-finite training loss ends the run as
``diverged``, untested (exit 1). Settings it does not implement are refused in one line
(exit 2) rather than ignored.

Writes ``OUT/summary.json`` in the form ``attnlab-compare`` reads, so a study can test its
baseline against the reference with ``--vs``:

    OMP_NUM_THREADS=1 python experiments/reference_classification.py OUT \\
        experiment=study_architectures_sst2_encoder ++data.holdout=sentences seed=0
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attnlab.cli.compose import compose_config
from attnlab.cli.pipeline import build_data, build_task
from attnlab.special_tokens import PAD

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_common import (  # noqa: E402
    COMMON,
    arguments,
    autocast,
    check_model,
    device_of,
    entry,
    fit,
    settings_of,
    write_summary,
)

# what the reference implements; any other value of these keys is refused
IMPLEMENTS = {"name": "encoder_only", "pos": "learned", "ffn": ("gelu", "relu"),
              "norm_type": "layernorm", "block": "sequential", "attention": "full", "param": "sp",
              "scale_embeddings": True, "bias": True, "embed_norm": False, "qk_norm": False,
              "n_kv_heads": None, "pool": (None, "mean"), "init": "paper",
              "zero_init_residual": False, "attn_softcap": None}  # fmt: skip


class Reference(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, d_ff: int,
                 dropout: float, attention_dropout: float, max_len: int, classes: int,
                 norm_first: bool, activation: str) -> None:  # fmt: skip
        super().__init__()
        self.width = width
        self.embedding = nn.Embedding(vocab, width, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, std=width**-0.5)
        self.positions = nn.Embedding(max_len, width)
        nn.init.normal_(self.positions.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(width, heads, d_ff, dropout, activation=activation,
                                           batch_first=True, norm_first=norm_first)  # fmt: skip
        layer.self_attn.dropout = attention_dropout  # dropout on the attention weights
        self.encoder = nn.TransformerEncoder(
            layer, layers, norm=nn.LayerNorm(width) if norm_first else None,
            enable_nested_tensor=False,
        )  # fmt: skip
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(width, classes))

    def forward(self, tokens: Tensor) -> Tensor:
        real = tokens != PAD
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.embedding(tokens) * math.sqrt(self.width) + self.positions(positions)
        h = self.encoder(self.dropout(x), src_key_padding_mask=~real)
        mask = real.unsqueeze(-1).to(h.dtype)
        pooled = (h * mask).sum(1) / mask.sum(1)  # the mean over the real tokens
        return self.head(pooled)


def main(argv: list[str]) -> None:
    _, out, overrides = arguments(argv, "reference_classification.py", ())
    cfg = compose_config(overrides)
    setting = settings_of(cfg, COMMON, ("val/loss", "val/acc"),
                          optional=("trainer.limit_val_batches",))
    data = build_data(cfg)
    resolved = build_task(cfg, data).model_cfg  # the model's keys with their defaults filled in
    check_model(resolved, IMPLEMENTS)
    device, dtype = device_of(cfg.trainer)
    torch.manual_seed(int(setting["seed"]))
    model = Reference(
        data.vocab_size, int(resolved.d_model), int(resolved.n_heads), int(resolved.n_layers),
        int(resolved.ff_dim), float(resolved.dropout), float(resolved.attn_dropout),
        int(resolved.max_len), int(data.num_classes), norm_first=resolved.norm == "pre",
        activation=str(resolved.ffn),
    ).to(device)  # fmt: skip
    limit = setting["trainer.limit_val_batches"]
    smoothing = float(setting["task.label_smoothing"])

    def logits_of(batch: dict[str, Tensor]) -> Tensor:
        with autocast(device, dtype):
            return model(batch["input_ids"].to(device)).float()

    def train_loss(batch: dict[str, Tensor]) -> Tensor:
        labels = batch["labels"].to(device)
        return F.cross_entropy(logits_of(batch), labels, label_smoothing=smoothing)

    def evaluate(loader: Iterable[dict[str, Tensor]], stage: str,
                 batches: int | None = None) -> dict[str, float]:  # fmt: skip
        loss, right, count = 0.0, 0, 0
        for i, batch in enumerate(loader):
            if i == batches:
                break
            logits, labels = logits_of(batch), batch["labels"].to(device)
            loss += float(F.cross_entropy(logits, labels, reduction="sum"))
            right += int((logits.argmax(-1) == labels).sum())
            count += labels.numel()
        return {f"{stage}/loss": loss / count, f"{stage}/acc": right / count}

    start = time.time()
    result = fit(model, data, setting, cfg, train_loss,
                 lambda: evaluate(data.val_dataloader(), "val", limit))  # fmt: skip
    metrics: dict[str, float] = {  # as attnlab's params: the model's, not the classifier's
        "params": sum(p.numel() for n, p in model.named_parameters() if not n.startswith("head."))
    }
    if result.status == "completed":  # the test, from the checkpoint the monitor chose
        model.load_state_dict(result.best_state)
        model.eval()
        with torch.no_grad():
            metrics.update(evaluate(data.test_loader(), "test"))
    name = f"reference_{cfg.get('experiment_name') or 'classification'}"
    shape = ("norm", "n_layers", "d_model", "n_heads", "d_ff", "ffn")  # its model, for --by
    writer = "experiments/reference_classification.py (torch.nn.TransformerEncoder)"
    write_summary(out, name, writer, {key: getattr(resolved, key) for key in shape}, setting,
                  overrides, result, metrics, start)  # fmt: skip


if __name__ == "__main__":
    entry(main)
