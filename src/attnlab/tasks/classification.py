"""Classification of token sequences and of images: a linear head over ``model.pooled``.

How an architecture reduces its input to one vector is its own (``model.pool``, the
default declared in its feeding; the table in docs/design.md):

* encoder_only:    mean of the encoder states over real tokens (BERT-style pooling)
* decoder_only:    the state of the last real token, which has seen the whole input
                   (with model.prefix_lm=true the whole input is the prefix: every token sees
                   every other, as in T5's prefix LM applied to classification)
* encoder_decoder: the decoder reads one start token over the encoder output (BART §3.2)
* vit:             the [CLS] token's final state (Dosovitskiy et al. 2021, eq. 4), or the mean
* rnn:             the final state of the encoder, or attention pooling over its states
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from attnlab.errors import ConfigError
from attnlab.models.parametrization import readout
from attnlab.tasks.base import Task


class ClassificationTask(Task):
    """A linear head over a pooled sequence representation; logs loss and accuracy."""

    kind = "classification"
    input_key = "input_ids"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.hparams.num_classes or self.hparams.num_classes < 2:
            raise ConfigError("classification needs at least 2 classes; check data labels")
        n = int(self.hparams.num_classes)
        self.head = nn.Sequential(
            nn.Dropout(self.model_cfg.dropout), readout(self.model_cfg, self.model_cfg.d_model, n)
        )
        for stage in ("val", "test"):
            setattr(self, f"{stage}_loss", MeanMetric())
            setattr(self, f"{stage}_acc", MulticlassAccuracy(n, average="micro"))

    def setup(self, stage: str) -> None:
        first = self.model_cfg.compile and not getattr(self, "_compiled", False)
        super().setup(stage)
        if first:  # forward() calls pooled, not the model's compiled __call__
            self.model.pooled = torch.compile(self.model.pooled)  # type: ignore[method-assign]

    def forward(self, inputs: Tensor) -> Tensor:
        return self.head(self.model.pooled(inputs))  # (B, num_classes)

    def sequence_lengths(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        length = batch[self.input_key].size(1)
        teacher_forcing = self.model.feeding.seq2seq == "teacher_forcing"  # encoder + decoder
        return (length, 1) if teacher_forcing else (0, length)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self.loss(self(batch[self.input_key]), batch["labels"])
        self.log_train_loss(loss, batch["labels"].size(0))
        return self.with_auxiliary_losses(loss, batch["labels"].size(0))

    def _evaluate(self, batch: dict[str, Tensor], stage: str) -> None:
        logits = self(batch[self.input_key])
        labels = batch["labels"]
        getattr(self, f"{stage}_loss").update(self.loss(logits, labels, 0.0), labels.numel())
        getattr(self, f"{stage}_acc").update(logits.argmax(-1), labels)
        self.log(f"{stage}/loss", getattr(self, f"{stage}_loss"), prog_bar=True)
        self.log(f"{stage}/acc", getattr(self, f"{stage}_acc"), prog_bar=True)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")


class ImageClassificationTask(ClassificationTask):
    """Image classification: batches ``{"pixels": (B, C, H, W), "labels": (B,)}``."""

    kind = "image_classification"
    input_key = "pixels"

    def sequence_lengths(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        return 0, self.model.sequence_length  # type: ignore[attr-defined]

    def tokens_in_batch(self, batch: dict[str, Tensor]) -> int:
        """Patches (and [CLS]) processed: the sequence the encoder reads, per image."""
        return int(batch["labels"].size(0)) * self.sequence_lengths(batch)[1]
