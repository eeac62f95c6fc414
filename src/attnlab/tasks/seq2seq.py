"""Sequence-to-sequence: copy, reverse, sort, addition, translation.

Teacher forcing (Vaswani et al. 2017, §3.1): the decoder reads the target
shifted right (BOS + y₁…y_{n}) and predicts y₁…y_n + EOS. A decoder-only
model reads ``source ⟶ SEP ⟶ target`` as one sequence and is trained on the
target part only, causally or as a prefix-LM (source bidirectional).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import SacreBLEUScore

from attnlab.inference.generation import generate
from attnlab.special_tokens import BOS, EOS, PAD, SEP
from attnlab.tasks.base import Task, attached_trainer

IGNORE = -100


def teacher_forcing(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """(B, T) right-padded target -> decoder input BOS+y and labels y+EOS, (B, T+1)."""
    B = tgt.size(0)
    lengths = (tgt != PAD).sum(1)
    decoder_in = torch.cat([tgt.new_full((B, 1), BOS), tgt], dim=1)
    labels = torch.cat([tgt, tgt.new_full((B, 1), PAD)], dim=1)
    labels[torch.arange(B, device=tgt.device), lengths] = EOS
    return decoder_in, labels.masked_fill(labels == PAD, IGNORE)


def join_source_target(src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Pack ``src SEP tgt EOS`` per row, padding moved to the end.

    Returns (sequence (B, L), labels (B, L) — the next token where it is part
    of the target or EOS, else -100 —, prefix length = |src| + 1 per row).
    """
    B = src.size(0)
    sep = src.new_full((B, 1), SEP)
    pad = src.new_full((B, 1), PAD)
    seq = torch.cat([src, sep, tgt, pad], dim=1)
    src_len, tgt_len = (src != PAD).sum(1), (tgt != PAD).sum(1)
    # segment ids: 0 source, 1 separator, 2 target/EOS, 3 padding
    segment = torch.cat(
        [
            torch.where(src != PAD, 0, 3),
            torch.ones_like(sep),
            torch.where(tgt != PAD, 2, 3),
            torch.full_like(pad, 3),
        ],
        dim=1,
    )
    order = torch.argsort(segment.eq(3).int(), dim=1, stable=True)  # real tokens first
    seq, segment = seq.gather(1, order), segment.gather(1, order)
    eos_at = src_len + 1 + tgt_len
    rows = torch.arange(B, device=src.device)
    seq[rows, eos_at], segment[rows, eos_at] = EOS, 2
    labels = torch.full_like(seq, IGNORE)
    labels[:, :-1] = torch.where(segment[:, 1:] == 2, seq[:, 1:], IGNORE)
    return seq, labels, src_len + 1


def left_pad_prompts(src: Tensor) -> Tensor:
    """Right-padded sources -> left-padded ``src SEP`` prompts for decoder-only decoding."""
    B = src.size(0)
    prompt = torch.cat([src, src.new_full((B, 1), PAD)], dim=1)
    lengths = (src != PAD).sum(1)
    prompt[torch.arange(B, device=src.device), lengths] = SEP
    order = torch.argsort(prompt.ne(PAD).int(), dim=1, stable=True)  # padding first
    return prompt.gather(1, order)


def bucket_name(low: int, high: int | None) -> str:
    return f"len_{low:02d}-{high:02d}" if high is not None else f"len_{low:02d}+"


BLEU_OPTIONS = {"tokenize": "13a", "smooth_method": "none", "lowercase": False}


def bleu_signature() -> str:
    """sacreBLEU's signature of the BLEU attnlab reports (Post 2018), e.g.
    ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:none|version:2.4.3``: one reference, 13a
    tokenisation, no smoothing — what torchmetrics' ``SacreBLEUScore`` computes (a test
    checks both give the same corpus score)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(**BLEU_OPTIONS)
    bleu.corpus_score(["a"], [["a"]])  # the signature counts the references it has seen
    return bleu.get_signature().format()


def reports_bleu(metrics: dict[str, float]) -> bool:
    """Whether ``metrics`` hold a BLEU (``val/bleu``, ``test/bleu_len_01-10``, …), which then
    travels with :func:`bleu_signature`."""
    return any(name.rsplit("/", 1)[-1].startswith("bleu") for name in metrics)


def bleu_by_length(examples: list[tuple[int, str, str]], edges: list[int]) -> dict[str, float]:
    """Corpus sacreBLEU per source-length bucket (Bahdanau et al. 2015, Fig. 2: BLEU against
    sentence length): ``edges`` are the buckets' upper ends in source words, the last bucket
    is open. Returns ``bleu_len_<lo>-<hi>`` and the sentence count ``n_len_<lo>-<hi>``."""
    from sacrebleu.metrics import BLEU

    bounds = [(1 if i == 0 else edges[i - 1] + 1, edge) for i, edge in enumerate(edges)]
    out: dict[str, float] = {}
    for low, high in [*bounds, (edges[-1] + 1, None)]:
        chosen = [(h, r) for n, h, r in examples if n >= low and (high is None or n <= high)]
        name = bucket_name(low, high)
        out[f"n_{name}"] = float(len(chosen))
        if chosen:
            hyps, refs = zip(*chosen, strict=True)
            out[f"bleu_{name}"] = BLEU(**BLEU_OPTIONS).corpus_score(list(hyps), [list(refs)]).score
    return out


class Seq2SeqTask(Task):
    """Teacher-forced training; greedy/beam free-running decoding for exact match and BLEU."""

    kind = "seq2seq"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        vocab = self.model_cfg.vocab_size
        bleu = self.task_cfg.bleu  # None: on when the data module has references
        self.bleu_enabled: bool | None = None if bleu is None else bool(bleu)
        self.decode_every = self.task_cfg.decode_every_n_epochs
        # task.bleu_by_length or attnlab-eval by_length=…: source-length buckets for test BLEU
        self.length_buckets: list[int] | None = self.task_cfg.bleu_by_length
        self._by_length: list[tuple[int, str, str]] = []
        for stage in ("val", "test"):
            setattr(self, f"{stage}_loss", MeanMetric())
            accuracy = MulticlassAccuracy(vocab, average="micro", ignore_index=IGNORE)
            setattr(self, f"{stage}_acc", accuracy)
            setattr(self, f"{stage}_exact", MeanMetric())
            options = {k: v for k, v in BLEU_OPTIONS.items() if k != "smooth_method"}
            setattr(self, f"{stage}_bleu", SacreBLEUScore(**options))  # smooth=False: "none"

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.bleu_enabled is None:
            datamodule = getattr(attached_trainer(self), "datamodule", None)
            self.bleu_enabled = hasattr(datamodule, "references")

    def forward(self, src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced logits and labels, aligned position by position."""
        if self.model.feeding.seq2seq == "teacher_forcing":
            decoder_in, labels = teacher_forcing(tgt)
            return self.model(src, decoder_in), labels
        seq, labels, prefix_len = join_source_target(src, tgt)
        prefix = prefix_len if self.model_cfg.get("prefix_lm") else None
        return self.model(seq, prefix_len=prefix), labels

    def sequence_lengths(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        S, T = batch["src"].size(1), batch["tgt"].size(1)
        if self.model.feeding.seq2seq == "teacher_forcing":
            return S, T + 1  # BOS + target
        return 0, S + T + 2  # source SEP target EOS

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits, labels = self(batch["src"], batch["tgt"])
        return self.training_loss(logits, labels, batch["src"].size(0))

    @torch.no_grad()
    def translate(self, src: Tensor) -> Tensor:
        """Free-running decoding of a batch of sources -> (B, T) predicted targets."""
        layout = self.model.feeding.prompt_layout("seq2seq")
        inputs = src if layout == "source" else left_pad_prompts(src)
        return generate(self.model, inputs, self.decode_cfg)

    def _evaluate(self, batch: dict[str, Tensor], stage: str) -> None:
        src, tgt = batch["src"], batch["tgt"]
        logits, labels = self(src, tgt)
        n_tokens = int((labels != IGNORE).sum())
        getattr(self, f"{stage}_loss").update(self.loss(logits, labels, smoothing=0.0), n_tokens)
        getattr(self, f"{stage}_acc").update(logits.argmax(-1), labels)
        self.log(f"{stage}/loss", getattr(self, f"{stage}_loss"), prog_bar=True)
        self.log(f"{stage}/acc", getattr(self, f"{stage}_acc"))
        if stage == "val" and self.current_epoch % self.decode_every:
            return
        pred = self.translate(src)
        width = max(pred.size(1), tgt.size(1))
        pred_p = torch.nn.functional.pad(pred, (0, width - pred.size(1)), value=PAD)
        tgt_p = torch.nn.functional.pad(tgt, (0, width - tgt.size(1)), value=PAD)
        getattr(self, f"{stage}_exact").update((pred_p == tgt_p).all(1).float())
        self.log(f"{stage}/exact_match", getattr(self, f"{stage}_exact"), prog_bar=True)
        if self.bleu_enabled:
            decode = self.trainer.datamodule.decode
            hyps = [decode(row) for row in pred.tolist()]
            refs = batch.get("tgt_text") or [decode(row) for row in tgt.tolist()]
            getattr(self, f"{stage}_bleu").update(hyps, [[r] for r in refs])
            if stage == "test" and self.length_buckets:
                lengths = [len(decode(row).split()) for row in src.tolist()]
                self._by_length += zip(lengths, hyps, refs, strict=True)

    def _log_bleu(self, stage: str) -> None:
        """sacreBLEU on detokenised text, reported on the usual 0–100 scale."""
        metric = getattr(self, f"{stage}_bleu")
        if self.bleu_enabled and metric.update_count:
            self.log(f"{stage}/bleu", 100 * metric.compute(), prog_bar=True, sync_dist=False)
            metric.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_bleu("val")

    def on_test_epoch_end(self) -> None:
        from attnlab.callbacks.resume import gather_objects

        self._log_bleu("test")
        if self.length_buckets and self.bleu_enabled:
            # every rank's examples (under DDP each rank decoded its share), in rank order
            examples = [e for part in gather_objects(self._by_length) for e in part]
            if examples:
                for name, value in bleu_by_length(examples, self.length_buckets).items():
                    self.log(f"test/{name}", value, sync_dist=False)
            self._by_length = []

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")
