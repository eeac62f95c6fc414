"""Shuffling that a resumed run repeats exactly, even from the middle of an epoch.

A ``RandomSampler`` seeded once per DataLoader continues its generator from
epoch to epoch, so a run resumed from a checkpoint (a new DataLoader) replays
epoch 0's order, and from the first batch. Here the order of epoch ``e`` is a
function of ``(seed, e)`` alone, and the DataLoader reports how many batches of
the current epoch it has served; Lightning stores that in the checkpoint
(``state_dict``) and hands it back on resume (``load_state_dict``), so the
resumed epoch continues with the next unseen batch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

_CHUNK = 8192  # indices converted to Python at a time


@functools.lru_cache(maxsize=256)  # a pure function asked once a batch by data=tokens
def epoch_seed(seed: int, epoch: int, *more: int) -> int:
    """A 64-bit seed for ``(seed, epoch, *more)``; distinct keys give unrelated seeds."""
    key = [int(seed) & 0xFFFFFFFF, int(epoch), *map(int, more)]
    state = np.random.SeedSequence(key).generate_state(2)
    return int(state[0]) << 32 | int(state[1])


def epoch_generator(seed: int, epoch: int, *more: int) -> torch.Generator:
    """A generator for ``(seed, epoch, *more)``; distinct keys give unrelated streams."""
    return torch.Generator().manual_seed(epoch_seed(seed, epoch, *more))


class EpochRandomSampler(RandomSampler):
    """Indices in a random order drawn from ``(seed, epoch)``, without replacement.

    ``num_samples`` larger than the data set chains several permutations (as
    ``RandomSampler`` does). Lightning calls :meth:`set_epoch` before every epoch;
    :meth:`skip` starts the next pass that many indices in (a resumed epoch).
    Subclassing ``RandomSampler`` tells Lightning that the loader shuffles, so a
    DDP run still gets a shuffling ``DistributedSampler``.
    """

    def __init__(self, data_source: Sized, seed: int = 0, num_samples: int | None = None) -> None:
        super().__init__(data_source, num_samples=num_samples)
        self.seed = seed
        self.epoch = 0
        self._start = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip(self, n: int) -> None:
        self._start = n

    def __iter__(self) -> Iterator[int]:
        n, start = len(self.data_source), self._start  # type: ignore[arg-type]
        self._start = 0  # the next epoch is whole again
        generator = epoch_generator(self.seed, self.epoch)
        order = torch.cat([torch.randperm(n, generator=generator)
                           for _ in range(-(-self.num_samples // n))])  # fmt: skip
        # handed out in chunks: a million-index epoch does not wait on one long .tolist()
        for chunk in order[start : self.num_samples].split(_CHUNK):
            yield from chunk.tolist()


class ResumableDataLoader(DataLoader):
    """A DataLoader whose position within the epoch is saved in Lightning checkpoints.

    Lightning fetches one batch per training step from a loader of known length,
    so the number of batches this loader has handed out is the number of steps
    taken in the epoch. On resume, an :class:`EpochRandomSampler` starts after
    those batches; any other sampler (a ``DistributedSampler`` under DDP, which
    also shuffles by epoch) has them drawn and dropped.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epoch = 0
        self._served = 0
        self._resume_at = 0

    def _epoch_sampler(self) -> EpochRandomSampler | None:
        sampler = getattr(self.batch_sampler, "sampler", self.sampler)
        return sampler if isinstance(sampler, EpochRandomSampler) else None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        skip, self._resume_at = self._resume_at, 0
        sampler = self._epoch_sampler()
        self._epoch = sampler.epoch if sampler is not None else self._epoch
        batches = self.batch_sampler
        drop = 0
        if sampler is not None and skip and callable(getattr(batches, "skip_batches", None)):
            batches.skip_batches(skip)  # type: ignore[union-attr]  # a bucketed epoch
        elif sampler is not None and skip and self.batch_size is not None:
            sampler.skip(skip * self.batch_size)
        else:
            drop = skip
        self._served = skip
        for i, batch in enumerate(super().__iter__()):
            if i < drop:
                continue
            self._served += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self._epoch, "batches_served": self._served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        served = int(state.get("batches_served", 0))
        if served >= len(self):  # saved at the end of an epoch: the next one starts afresh
            return
        sampler = self._epoch_sampler()
        if sampler is not None:
            epoch = int(state.get("epoch", sampler.epoch))
            setter = getattr(self.batch_sampler, "set_epoch", sampler.set_epoch)
            setter(epoch)
        self._resume_at = served
