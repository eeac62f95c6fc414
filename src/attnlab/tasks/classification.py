"""Sequence classification with each architecture (the table in DESIGN.md).

* encoder_only:    mean of the encoder states over real tokens (BERT-style pooling)
* decoder_only:    the state of the last real token, which has seen the whole input
                   (with model.prefix_lm=true the whole input is the prefix: every token sees
                   every other, as in T5's prefix LM applied to classification)
* encoder_decoder: the decoder reads one start token over the encoder output (BART §3.2)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from attnlab.data.base import BOS, PAD
from attnlab.errors import ConfigError
from attnlab.models import DecoderOnly, EncoderDecoder, EncoderOnly
from attnlab.tasks.base import Task


class ClassificationTask(Task):
    """A linear head over a pooled sequence representation; logs loss and accuracy."""

    kind = "classification"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.hparams.num_classes or self.hparams.num_classes < 2:
            raise ConfigError("classification needs at least 2 classes; check data labels")
        n = int(self.hparams.num_classes)
        self.head = nn.Sequential(
            nn.Dropout(self.model_cfg.dropout), nn.Linear(self.model_cfg.d_model, n)
        )
        for stage in ("val", "test"):
            setattr(self, f"{stage}_loss", MeanMetric())
            setattr(self, f"{stage}_acc", MulticlassAccuracy(n, average="micro"))

    def pooled(self, input_ids: Tensor) -> Tensor:
        """(B, L) token ids -> (B, d_model) sequence representation."""
        real = input_ids != PAD
        if isinstance(self.model, EncoderOnly):
            hidden = self.model.hidden(input_ids)
            weights = real.unsqueeze(-1).to(hidden.dtype)
            return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
        if isinstance(self.model, DecoderOnly):
            prefix_len = real.sum(1) if self.model_cfg.prefix_lm else None
            hidden = self.model.hidden(input_ids, prefix_len=prefix_len)
            last = (real.sum(1) - 1).clamp(min=0)
            return hidden[torch.arange(input_ids.size(0), device=input_ids.device), last]
        assert isinstance(self.model, EncoderDecoder)
        memory, memory_real = self.model.encode(input_ids)
        start = input_ids.new_full((input_ids.size(0), 1), BOS)
        return self.model.decoder(start, memory=memory, memory_real=memory_real)[:, 0]

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.head(self.pooled(input_ids))  # (B, num_classes)

    def sequence_lengths(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        length = batch["input_ids"].size(1)
        return (length, 1) if isinstance(self.model, EncoderDecoder) else (0, length)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.loss(self(batch["input_ids"]), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["labels"].size(0))
        return loss

    def _evaluate(self, batch: dict[str, Tensor], stage: str) -> None:
        logits = self(batch["input_ids"])
        labels = batch["labels"]
        getattr(self, f"{stage}_loss").update(self.loss(logits, labels, 0.0), labels.numel())
        getattr(self, f"{stage}_acc").update(logits.argmax(-1), labels)
        self.log(f"{stage}/loss", getattr(self, f"{stage}_loss"), prog_bar=True)
        self.log(f"{stage}/acc", getattr(self, f"{stage}_acc"), prog_bar=True)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")
