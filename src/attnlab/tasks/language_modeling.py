"""Language modelling: causal LM (GPT, decoder_only) and masked LM (BERT, encoder_only).

Causal: predict token t+1 from tokens ≤ t. Masked (Devlin et al. 2019, §3.1):
choose 15 % of positions; replace 80 % of them by [MASK], 10 % by a random
token, keep 10 %; predict the original tokens at the chosen positions only.

``task.loss_by_position=[128,256,512]`` (causal) adds the val/test loss of the tokens
predicted from 1–128, 129–256, 257–512 and 513+ tokens of context (``val/loss_pos_001-128``
…): whether a model uses context beyond a length is whether its loss keeps falling past it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from attnlab.errors import ConfigError
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


def position_buckets(edges: list[int]) -> list[tuple[str, int, int | None]]:
    """(metric name, lo, hi) of each context-length bucket of ``edges``: ``loss_pos_<lo>-<hi>``
    for the tokens predicted from lo…hi tokens of context, ``loss_pos_<lo>+`` past the last
    edge; the numbers zero-padded to the widest."""
    width = len(str(edges[-1] + 1))
    buckets: list[tuple[str, int, int | None]] = []
    lo = 1
    for hi in edges:
        buckets.append((f"loss_pos_{lo:0{width}d}-{hi:0{width}d}", lo, hi))
        lo = hi + 1
    return [*buckets, (f"loss_pos_{lo:0{width}d}+", lo, None)]


def context_lengths(length: int, documents: Tensor | None = None) -> Tensor:
    """How many tokens each of ``length`` causal predictions reads: position j (from 0) reads
    j + 1, or with ``documents`` (B, length) of document ids only those of its own document,
    j − (its document's first position) + 1. Shape (1 or B, length)."""
    device = documents.device if documents is not None else None
    position = torch.arange(length, device=device)
    if documents is None:
        return (position + 1).unsqueeze(0)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    first = torch.where(starts, position, torch.zeros_like(position)).cummax(dim=1).values
    return position - first + 1


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
        edges = self.task_cfg.loss_by_position
        if edges and self.model.feeding.lm == "masked":  # never dropped silently
            raise ConfigError(
                f"task.loss_by_position={edges} buckets a causal language model's loss by "
                "context length, and this model is a masked LM (every token sees the whole "
                "block); set task.loss_by_position=null"
            )
        self.position_buckets = position_buckets(edges) if edges else []
        self.position_losses = nn.ModuleDict({f"{stage}_{name}": MeanMetric() for stage in
                                              ("val", "test") for name, _, _ in
                                              self.position_buckets})  # fmt: skip

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
        if self.position_buckets:
            self._log_position_losses(logits, labels, batch.get("documents"), stage)

    def _log_position_losses(
        self, logits: Tensor, labels: Tensor, documents: Tensor | None, stage: str
    ) -> None:
        """Each bucket's mean token loss (no smoothing), weighted by its tokens over the split."""
        per_token = nn.functional.cross_entropy(
            logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none"
        )
        length = labels.size(1)
        context = context_lengths(length, None if documents is None else documents[:, :length])
        context = context.expand_as(labels)
        real = labels != IGNORE
        for name, lo, hi in self.position_buckets:
            chosen = real & (context >= lo) & (context <= (hi if hi is not None else length))
            count = int(chosen.sum())
            if count:
                metric = self.position_losses[f"{stage}_{name}"]
                metric.update(per_token[chosen].mean(), count)
                self.log(f"{stage}/{name}", metric)

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
