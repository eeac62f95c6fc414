"""What every attnlab data module provides to the tasks.

Token ids 0–5 are reserved for the special tokens below in every vocabulary
(synthetic, character or BPE), so tasks and models never need to ask a
tokenizer for them.

Batch formats (all tensors ``torch.long`` unless marked):

* ``seq2seq``        ``{"src": (B, S), "tgt": (B, T)}`` right-padded with ``PAD``;
  neither side carries BOS/EOS — the task adds them (teacher forcing).
* ``lm``             ``{"tokens": (B, block_size + 1)}`` contiguous text, no padding;
  a causal LM predicts ``tokens[:, 1:]`` from ``tokens[:, :-1]``.
* ``classification`` ``{"input_ids": (B, L), "labels": (B,)}``, ``input_ids``
  right-padded with ``PAD``.
* ``image_classification`` ``{"pixels": float32 (B, C, H, W), "labels": (B,)}``,
  square images normalised per channel by the training split's mean and std;
  the data module's ``model_inputs`` (``image_size``, ``channels``,
  ``patch_size``) says what the model must be built for, and ``vocab_size`` is 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import lightning as L
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from attnlab.special_tokens import BOS, EOS, MASK, NUM_SPECIAL, PAD, SEP, SPECIAL_TOKENS, UNK

__all__ = [
    "AttnlabDataModule", "BOS", "EOS", "MASK", "NUM_SPECIAL", "PAD", "SEP", "SPECIAL_TOKENS",
    "TASKS", "Tokenizer", "UNK",
]  # fmt: skip

TASKS = ("seq2seq", "lm", "classification", "image_classification")


class Tokenizer(Protocol):
    """Text <-> ids. Implementations keep ids 0–5 for ``SPECIAL_TOKENS``."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def save(self, path: str | Path) -> None: ...


class AttnlabDataModule(L.LightningDataModule):
    """Base class: subclasses set ``task``, ``vocab_size`` (and ``num_classes``), and give
    Lightning's ``train_dataloader`` and ``val_dataloader`` and attnlab's
    :meth:`test_loader` (this class's ``test_dataloader`` hands that to Lightning)."""

    task: str = "lm"
    vocab_size: int = 0
    num_classes: int | None = None
    tokenizer: Tokenizer | None = None

    @classmethod
    def task_for(cls, config: dict[str, Any]) -> str:
        """The task this module serves with the ``data.*`` keys ``config``, known before it is
        built (an architecture that cannot take it is refused before a run starts)."""
        return cls.task

    def decode(self, ids: list[int]) -> str:
        """Token ids to text, dropping special tokens; used for BLEU and generation."""
        ids = [i for i in ids if i >= NUM_SPECIAL]
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids)
        return " ".join(str(i) for i in ids)

    def encode(self, text: str) -> list[int]:
        """Text to token ids (no specials); synthetic data reads space-separated ids."""
        if self.tokenizer is not None:
            return self.tokenizer.encode(text)
        return [int(t) for t in text.split()]

    def longest(self) -> dict[str, int] | None:
        """The longest length of each sequence in a batch, over every split, keyed as the
        batch is (``{"tokens": block_size + 1}``, ``{"src": S, "tgt": T}``, …): what a
        model with a position table must reach, known before training. None: not a
        token sequence (images)."""
        return None

    def save_tokenizer(self, run_dir: str | Path) -> None:
        """Write the tokenizer into the run directory so eval/generate decode alike."""
        if self.tokenizer is not None:
            self.tokenizer.save(Path(run_dir) / "tokenizer.json")

    def test_dataloader(self) -> DataLoader:
        """Lightning's hook: the subclass's :meth:`test_loader`, split over the processes of
        a distributed run without repeated examples (:func:`without_repeats`)."""
        return without_repeats(self.test_loader(), self.trainer)

    def test_loader(self) -> DataLoader:
        """The test split's loader; each subclass provides it (here: Lightning's refusal of a
        data module without one)."""
        return super().test_dataloader()


def without_repeats(loader: DataLoader, trainer: L.Trainer | None) -> DataLoader:
    """``loader`` split over the processes of ``trainer`` without repeats.

    Lightning gives an evaluation loader a ``DistributedSampler``, which pads the last
    processes' shares with repeated examples, so up to world size − 1 test examples would
    count twice in test/loss, accuracy and BLEU. A loader that reads the set in order gets
    Lightning's ``UnrepeatedDistributedSampler`` instead (uneven shares; the fit's DDP wrapper
    is gone by the test, so no step waits on another process), which Lightning keeps as it
    is. One process, or a loader with a sampler of its own: ``loader`` unchanged.
    """
    if trainer is None or trainer.world_size == 1:
        return loader
    in_order = type(loader.batch_sampler) is BatchSampler and isinstance(
        loader.sampler, SequentialSampler)  # fmt: skip
    if not in_order:
        return loader
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

    return DataLoader(
        loader.dataset, batch_size=loader.batch_size, collate_fn=loader.collate_fn,
        sampler=UnrepeatedDistributedSampler(loader.dataset, shuffle=False,
                                             num_replicas=trainer.world_size,
                                             rank=trainer.global_rank),
        num_workers=loader.num_workers, pin_memory=loader.pin_memory,
        worker_init_fn=loader.worker_init_fn, persistent_workers=loader.persistent_workers,
    )  # fmt: skip


def longest_in(examples: Iterable[dict[str, Any]]) -> dict[str, int]:
    """``longest`` of examples that are dicts of tensors: the longest 1-D tensor per key."""
    out: dict[str, int] = {}
    for example in examples:
        for key, value in example.items():
            if getattr(value, "dim", lambda: 0)() == 1:
                out[key] = max(out.get(key, 0), int(value.size(0)))
    return out
