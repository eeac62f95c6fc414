"""Storing variable-length token sequences, padding them, and batching by length."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import BatchSampler, Sampler

from attnlab.data.base import PAD


class PackedSequences:
    """Many id sequences in one flat tensor plus offsets: compact to cache and to index."""

    def __init__(self, flat: torch.Tensor, offsets: torch.Tensor) -> None:
        self.flat = flat
        self.offsets = offsets

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]]) -> PackedSequences:
        """Pack Python lists of ids."""
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        offsets = torch.zeros(len(seqs) + 1, dtype=torch.long)
        torch.cumsum(lengths, 0, out=offsets[1:])
        flat = torch.tensor([i for s in seqs for i in s], dtype=torch.int32)
        return cls(flat, offsets)

    def to_state(self) -> dict[str, torch.Tensor]:
        """Tensors to cache."""
        return {"flat": self.flat, "offsets": self.offsets}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> PackedSequences:
        """Inverse of ``to_state``."""
        return cls(state["flat"], state["offsets"])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.flat[self.offsets[i] : self.offsets[i + 1]].long()

    @property
    def lengths(self) -> torch.Tensor:
        """Length of every sequence, ``(N,)``."""
        return self.offsets[1:] - self.offsets[:-1]


def pad_batch(seqs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Right-pad 1-D long tensors with ``PAD`` to ``(B, max_len)``."""
    return pad_sequence(list(seqs), batch_first=True, padding_value=PAD)


class BucketBatchSampler(BatchSampler):
    """Batches of similar length, to limit padding (as in fairseq/tensor2tensor bucketing).

    The ``sampler`` supplies indices (already shuffled for training; Lightning
    swaps in a DistributedSampler under DDP). They are cut into chunks of
    ``batch_size * bucket_batches``; each chunk is sorted by length and split
    into batches; the batches are then shuffled, with a generator drawn from
    ``(seed, epoch)`` alone, so an epoch's batches are the same whenever it is
    replayed. :meth:`set_epoch` (called by Lightning before every epoch) passes
    the epoch to the sampler too, and :meth:`skip_batches` starts the next pass
    that many batches in: a run resumed mid-epoch continues with the next unseen
    batch (:class:`attnlab.data.sampling.ResumableDataLoader`).
    """

    def __init__(
        self,
        sampler: Sampler[int] | Sequence[int],
        batch_size: int,
        drop_last: bool = False,
        lengths: Sequence[int] | torch.Tensor = (),
        seed: int = 0,
        bucket_batches: int = 50,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = torch.as_tensor(lengths, dtype=torch.long).tolist()
        self.seed = seed
        self.bucket_batches = bucket_batches
        self.epoch = 0
        self._start = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if callable(getattr(self.sampler, "set_epoch", None)):
            self.sampler.set_epoch(epoch)  # type: ignore[attr-defined]

    def skip_batches(self, n: int) -> None:
        self._start = n

    def _batches(self) -> list[list[int]]:
        indices = list(self.sampler)
        chunk = self.batch_size * self.bucket_batches
        batches: list[list[int]] = []
        for start in range(0, len(indices), chunk):
            part = indices[start : start + chunk]
            part.sort(key=self.lengths.__getitem__)
            for b in range(0, len(part), self.batch_size):
                batch = part[b : b + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        from attnlab.data.sampling import epoch_generator

        start, self._start = self._start, 0
        # Lightning sets the epoch on the inner sampler (EpochRandomSampler, DistributedSampler)
        epoch = getattr(self.sampler, "epoch", self.epoch)
        batches = self._batches()
        order = torch.randperm(len(batches), generator=epoch_generator(self.seed, epoch))
        for j in order[start:].tolist():
            yield batches[j]

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        chunk = self.batch_size * self.bucket_batches
        full, rest = divmod(n, chunk)
        per_chunk = self.bucket_batches
        if self.drop_last:
            return full * per_chunk + rest // self.batch_size
        return full * per_chunk + -(-rest // self.batch_size)
