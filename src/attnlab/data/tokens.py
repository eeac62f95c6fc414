"""``data=tokens``: language modelling on a folder that ``attnlab-prepare`` wrote.

The shards are mapped (``np.memmap``), never loaded: opening a folder costs one
read of ``index.json`` and one map per shard, whatever the corpus size.

Training batches are ``{"tokens": (batch_size, block_size + 1)}``, drawn one of two ways
(``sampling``):

* ``random`` — nanoGPT's sampling: each block starts at a uniformly random token
  offset of the training split (with replacement), blocks may cross document and
  shard boundaries;
* ``sequential`` — one pass over the split in order, block ``i`` starting at token
  ``i × block_size`` (consecutive blocks share one token, as the evaluation tiling).

Sample ``i`` of epoch ``e`` is a function of ``(seed, e, i)`` alone: a counter-based
hash (SplitMix64) turns the index into an offset, so no permutation of billions of
offsets is ever held. Step ``t`` of a run on ``W`` processes with batches of ``B``
takes samples ``[t·W·B, (t+1)·W·B)`` of that global order, rank ``r`` its ``r``-th
slice of ``B``: the ranks read disjoint samples, and the order depends on (seed,
epoch, rank, world size) only. A checkpoint records how many samples of the epoch
were taken; a resumed run continues with the next one on every rank — on as many
processes as before, or on another number, or with another batch size: no sample is
repeated. When the global batch (processes × batch size) grows from g to g′ mid-epoch,
Lightning ends that epoch by its own count of steps, up to k·(1 − g/g′) steps early after
k steps (a warning says so); the next epoch is whole.

Validation and test read a fixed set of held-out blocks tiling the split (or
``eval_blocks`` evenly spaced ones), in order, as ``data=text`` does.

``document_mask``: every batch also carries ``"documents"`` (B, block_size + 1), each
token's document within its block (the number of ``<eos>`` before it: a document's own
``<eos>`` is its last token), and attention stays within a document.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from attnlab.data.base import AttnlabDataModule
from attnlab.data.sampling import epoch_seed
from attnlab.data.shard_verification import verify_shards
from attnlab.data.shards import AGAIN, ShardedTokens, read_index
from attnlab.data.text import TokenBlocks, eval_starts
from attnlab.data.tokenizers import load_tokenizer
from attnlab.errors import ConfigError, DataError
from attnlab.special_tokens import EOS

SAMPLINGS = ("random", "sequential")
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele, Lea & Flood 2014) on a ``uint64`` array:
    distinct inputs give well-mixed, independent-looking 64-bit outputs."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def documents_of(tokens: torch.Tensor) -> torch.Tensor:
    """(B, L) int32: each position's document within its row, counting the ``<eos>``
    tokens before it."""
    ends = (tokens == EOS).to(torch.int32)
    return ends.cumsum(1, dtype=torch.int32) - ends


def with_documents(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``default_collate`` plus the batch's ``"documents"``."""
    batch = default_collate(items)
    batch["documents"] = documents_of(batch["tokens"])
    return batch


def sample_starts(indices: np.ndarray, n_tokens: int, block_size: int, sampling: str,
                  seed: int, epoch: int) -> np.ndarray:  # fmt: skip
    """Where samples ``indices`` (global, within the epoch) start in a split of ``n_tokens``."""
    span = block_size + 1
    if sampling == "sequential":
        return (indices % ((n_tokens - 1) // block_size)) * block_size
    keyed = indices.astype(np.uint64) ^ np.uint64(epoch_seed(seed, epoch, 0x70CE))
    return (splitmix64(keyed) % np.uint64(n_tokens - span + 1)).astype(np.int64)


class TokenBatches(IterableDataset):
    """The training batches of one rank: step ``t`` (from ``start`` samples into the
    epoch) is global samples ``start + t·W·B + r·B …`` (see the module docstring).

    DataLoader workers take every ``num_workers``-th step, which the loader hands out
    in step order.
    """

    def __init__(self, tokens: ShardedTokens, block_size: int, batch_size: int, sampling: str,
                 seed: int, samples_per_epoch: int, rank: int = 0, world_size: int = 1,
                 document_mask: bool = False) -> None:  # fmt: skip
        self.tokens, self.block_size, self.batch_size = tokens, block_size, batch_size
        self.document_mask = document_mask
        self.sampling, self.seed, self.samples_per_epoch = sampling, seed, samples_per_epoch
        self.rank, self.world_size = rank, world_size
        self.epoch, self.start = 0, 0

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def steps(self, start: int = 0) -> int:
        """Steps left in the epoch from ``start`` samples in."""
        return max(0, (self.samples_per_epoch - start) // self.global_batch)

    def __len__(self) -> int:
        return self.steps()

    def batch(self, step: int, start: int | None = None) -> dict[str, torch.Tensor]:
        """This rank's batch at ``step`` after ``start`` samples of the epoch."""
        first = (self.start if start is None else start) + step * self.global_batch
        first += self.rank * self.batch_size
        indices = np.arange(first, first + self.batch_size, dtype=np.int64)
        starts = sample_starts(indices, len(self.tokens), self.block_size, self.sampling,
                               self.seed, self.epoch)  # fmt: skip
        tokens = self.tokens.blocks(starts, self.block_size + 1)
        if self.document_mask:
            return {"tokens": tokens, "documents": documents_of(tokens)}
        return {"tokens": tokens}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        worker = get_worker_info()
        first, every = (worker.id, worker.num_workers) if worker else (0, 1)
        for step in range(first, self.steps(self.start), every):
            yield self.batch(step)


class TokenStreamLoader(DataLoader):
    """The training loader: its position in the epoch (samples taken, of the global
    order) is saved in Lightning checkpoints and restored on resume."""

    def __init__(self, dataset: TokenBatches, epoch_of: Callable[[], int | None] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(dataset, batch_size=None, **kwargs)
        self.epoch_of = epoch_of or (lambda: None)
        self._epoch, self._taken, self._resume_at = 0, 0, None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        data: TokenBatches = self.dataset  # type: ignore[assignment]
        if self._resume_at is not None:
            self._epoch, self._taken = self._resume_at
            self._resume_at = None
        else:
            epoch = self.epoch_of()  # the trainer's epoch; without one, count passes here
            if epoch is not None:
                self._epoch = epoch
            elif self._taken:
                self._epoch += 1
            self._taken = 0
        data.epoch, data.start = self._epoch, self._taken
        for batch in super().__iter__():
            self._taken += data.global_batch
            yield batch

    def state_dict(self) -> dict[str, int]:
        data: TokenBatches = self.dataset  # type: ignore[assignment]
        return {"epoch": self._epoch, "samples_taken": self._taken,
                "world_size": data.world_size, "batch_size": data.batch_size}  # fmt: skip

    def load_state_dict(self, state: dict[str, int]) -> None:
        data: TokenBatches = self.dataset  # type: ignore[assignment]
        taken = int(state.get("samples_taken", 0))
        if data.steps(taken) == 0:  # saved at the end of an epoch: the next one starts afresh
            return
        resume_at = (int(state.get("epoch", 0)), taken)
        if resume_at == self._resume_at:
            return  # handed the same state twice (attnlab.callbacks.resume.LoaderPosition)
        self._resume_at = resume_at
        before = int(state.get("world_size", 1)) * int(state.get("batch_size", data.batch_size))
        if data.global_batch > before:
            import warnings

            done = taken // before
            warnings.warn(
                f"data=tokens: resumed {done} steps into an epoch with a global batch of "
                f"{data.global_batch} (was {before}); this epoch ends up to "
                f"{done - done * before // data.global_batch} steps early, the next is whole",
                stacklevel=2,
            )


class TokensDataModule(AttnlabDataModule):
    """Language modelling on pre-tokenized shards (``attnlab-prepare``), any corpus size."""

    task = "lm"

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        block_size: int = 1024,
        sampling: Literal["random", "sequential"] = "random",
        samples_per_epoch: int | None = None,
        eval_blocks: int | None = None,
        batch_size: int = 12,
        num_workers: int = 0,
        seed: int = 0,
        document_mask: bool = False,
    ) -> None:
        super().__init__()
        if sampling not in SAMPLINGS:
            raise ConfigError(f"data.sampling: unknown {sampling!r}; choose one of {SAMPLINGS}")
        self.path = Path(os.path.expanduser(str(path))) if path not in (None, "") else None
        self.block_size, self.sampling = int(block_size), sampling
        self.samples_per_epoch, self.eval_blocks = samples_per_epoch, eval_blocks
        self.batch_size, self.num_workers, self.seed = int(batch_size), int(num_workers), int(seed)
        self.document_mask = bool(document_mask)
        self.splits: dict[str, ShardedTokens] = {}
        self._built = False

    def _build(self) -> None:
        if self._built:
            return
        if self.path is None:
            raise DataError(
                "data.path is not set; prepare a folder with `attnlab-prepare <text files> "
                "--out FOLDER` and set data.path=FOLDER"
            )
        index = read_index(self.path)  # every field used below is checked there
        self.index = index
        self.tokenizer = self._tokenizer(index)
        self.vocab_size = int(index["vocab_size"])
        for split in ("train", "val", "test"):
            if split in index["splits"]:
                self.splits[split] = ShardedTokens(self.path, index, split, "data.path")
        verify_shards(self.path, index, list(self.splits))
        self.splits.setdefault("test", self.splits["val"])
        for split, tokens in self.splits.items():
            if len(tokens) < self.block_size + 2:
                raise DataError(
                    f"data.block_size: {self.block_size} is too long for the {split} split of "
                    f"{self.path} ({len(tokens)} tokens); use data.block_size<="
                    f"{max(1, len(tokens) - 2)} or prepare more {split} text"
                )
        self._built = True

    def _tokenizer(self, index: dict[str, Any]) -> Any:
        """The folder's tokenizer, whose vocabulary must be ``index.json``'s."""
        path = self.path / index["tokenizer"]["file"]
        if not path.is_file():
            raise DataError(f"data.path: {self.path} lacks {path.name}, the tokenizer its "
                            f"index.json names; {AGAIN}")  # fmt: skip
        tokenizer = load_tokenizer(path, foreign=True)
        if tokenizer.vocab_size != index["vocab_size"]:
            raise DataError(
                f"data.path: {path} holds a vocabulary of {tokenizer.vocab_size}, but "
                f"index.json's vocab_size is {index['vocab_size']}; {AGAIN}"
            )
        return tokenizer

    def prepare_data(self) -> None:
        """Check the folder and read its index (nothing to download or tokenize)."""
        self._build()

    def setup(self, stage: str | None = None) -> None:
        self._build()

    def longest(self) -> dict[str, int]:
        return {"tokens": self.block_size + 1}

    def samples(self) -> int:
        """Samples in an epoch: ``samples_per_epoch``, else one per block of the split."""
        if self.samples_per_epoch is not None:
            return int(self.samples_per_epoch)
        return (len(self.splits["train"]) - 1) // self.block_size

    def train_dataloader(self) -> DataLoader:
        """This rank's share of the epoch's samples; see the module docstring."""
        import warnings

        # Lightning warns that workers could duplicate an IterableDataset's items: here each
        # worker takes its own steps (TokenBatches.__iter__), so the length is exact
        warnings.filterwarnings("ignore", message=".*IterableDataset.*has `__len__` defined")
        self._build()
        trainer = getattr(self, "trainer", None)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        dataset = TokenBatches(self.splits["train"], self.block_size, self.batch_size,
                               self.sampling, self.seed, self.samples(), rank, world,
                               self.document_mask)  # fmt: skip
        if not len(dataset):
            raise DataError(
                f"data.samples_per_epoch: {self.samples()} samples make no batch of "
                f"{self.batch_size} on {world} process(es); raise it or lower data.batch_size"
            )
        return TokenStreamLoader(
            dataset, epoch_of=lambda: trainer.current_epoch if trainer else None,
            num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
            generator=self._generator(),
        )  # fmt: skip

    def _eval_loader(self, split: str) -> DataLoader:
        self._build()
        tokens = self.splits[split]
        starts = eval_starts(len(tokens), self.block_size, self.eval_blocks)
        return DataLoader(TokenBlocks(tokens, self.block_size, starts),  # type: ignore[arg-type]
                          batch_size=self.batch_size, num_workers=self.num_workers,
                          generator=self._generator(),
                          collate_fn=with_documents if self.document_mask else None)  # fmt: skip

    def _generator(self) -> torch.Generator:
        """A loader's own generator: a new iterator then draws its workers' seed from it,
        not from the global one, so a validation mid-run leaves dropout's random numbers as
        they were (a resumed run draws what the run that never stopped drew)."""
        return torch.Generator().manual_seed(self.seed)

    def val_dataloader(self) -> DataLoader:
        """Blocks tiling the validation split, in order."""
        return self._eval_loader("val")

    def test_loader(self) -> DataLoader:
        """Blocks tiling the test split (the validation split when there is none)."""
        return self._eval_loader("test")
