"""Language modelling: causal LM (GPT, decoder_only) and masked LM (BERT, encoder_only).

Causal: predict token t+1 from tokens ≤ t. Masked (Devlin et al. 2019, §3.1):
choose 15 % of positions; replace 80 % of them by [MASK], 10 % by a random
token, keep 10 %; predict the original tokens at the chosen positions only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from attnlab.special_tokens import MASK, NUM_SPECIAL
from attnlab.tasks.base import Task

IGNORE = -100


def mask_tokens(
    tokens: Tensor,
    vocab_size: int,
    probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's 80/10/10 corruption -> (inputs, labels with -100 at unchosen positions)."""

    def uniform() -> Tensor:
        return torch.rand(tokens.shape, generator=generator, device=tokens.device)

    chosen = (uniform() < probability) & (tokens >= NUM_SPECIAL)
    labels = tokens.masked_fill(~chosen, IGNORE)
    roll = uniform()
    to_mask = chosen & (roll < 0.8)
    to_random = chosen & (roll >= 0.8) & (roll < 0.9)
    random_tokens = torch.randint(
        NUM_SPECIAL, vocab_size, tokens.shape, generator=generator, device=tokens.device
    )
    inputs = tokens.masked_fill(to_mask, MASK)
    inputs = torch.where(to_random, random_tokens, inputs)
    return inputs, labels


class LanguageModelTask(Task):
    """Causal or masked LM, as the architecture's feeding declares; logs loss, ppl, acc."""

    kind = "lm"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mlm_probability = self.task_cfg.mlm_probability
        vocab = self.model_cfg.vocab_size
        for stage in ("val", "test"):
            setattr(self, f"{stage}_loss", MeanMetric())
            accuracy = MulticlassAccuracy(vocab, average="micro", ignore_index=IGNORE)
            setattr(self, f"{stage}_acc", accuracy)

    def inputs_and_labels(
        self,
        tokens: Tensor,
        generator: torch.Generator | None = None,
        labels: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Model inputs and labels. ``labels`` (B, L − 1), when the data gives them (for
        example only the answers of associative recall), replace the next tokens."""
        if self.model.feeding.lm == "masked":  # the pipeline refuses data with given labels
            return mask_tokens(
                tokens[:, :-1], self.model_cfg.vocab_size, self.mlm_probability, generator
            )
        return tokens[:, :-1], tokens[:, 1:] if labels is None else labels

    def sequence_lengths(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        return 0, batch["tokens"].size(1) - 1

    def tokens_in_batch(self, batch: dict[str, Tensor]) -> int:
        return int(batch["tokens"].numel())

    def logits(self, inputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The model's logits; with ``batch["documents"]`` (data.document_mask=true) each
        token attends within its own document only."""
        documents = batch.get("documents")
        if documents is None:
            return self.model(inputs)
        return self.model(inputs, documents=documents[:, : inputs.size(1)])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        inputs, labels = self.inputs_and_labels(batch["tokens"], labels=batch.get("labels"))
        return self.training_loss(self.logits(inputs, batch), labels, inputs.size(0))

    def _evaluate(self, batch: dict[str, Tensor], batch_idx: int, stage: str) -> None:
        tokens = batch["tokens"]
        # a fixed corruption per batch, so masked-LM validation losses are comparable
        seed = self.seed * 100_003 + batch_idx
        generator = torch.Generator(device=tokens.device).manual_seed(seed)
        inputs, labels = self.inputs_and_labels(tokens, generator, batch.get("labels"))
        logits = self.logits(inputs, batch)
        n_tokens = int((labels != IGNORE).sum())
        getattr(self, f"{stage}_loss").update(self.loss(logits, labels, smoothing=0.0), n_tokens)
        getattr(self, f"{stage}_acc").update(logits.argmax(-1), labels)
        self.log(f"{stage}/loss", getattr(self, f"{stage}_loss"), prog_bar=True)
        self.log(f"{stage}/acc", getattr(self, f"{stage}_acc"))

    def _log_ppl(self, stage: str) -> None:
        """Perplexity = exp(mean token cross-entropy) over the whole split."""
        metric = getattr(self, f"{stage}_loss")
        if metric.update_count:
            self.log(f"{stage}/ppl", torch.exp(metric.compute().clamp(max=50)))

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "test")

    def on_validation_epoch_end(self) -> None:
        self._log_ppl("val")

    def on_test_epoch_end(self) -> None:
        self._log_ppl("test")
