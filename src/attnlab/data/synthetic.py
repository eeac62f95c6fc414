"""Synthetic tasks: generated in memory from the seed, no downloads.

seq2seq  ``copy`` (y = x), ``reverse`` (y = x reversed), ``sort`` (y = sorted x),
         ``addition`` (x = "a+b" in digits, y = the digits of a + b)
classification  ``majority`` (label = the most frequent symbol; ties → smallest)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from attnlab.data.base import NUM_SPECIAL, PAD, SPECIAL_TOKENS, AttnlabDataModule, longest_in
from attnlab.data.sampling import EpochRandomSampler, ResumableDataLoader
from attnlab.errors import ConfigError

SPLIT_OFFSETS = {"train": 0, "val": 1, "test": 2}


class SymbolTokenizer:
    """Names for synthetic symbols: ids ≥ 6 map to ``symbols``; text is space-separated."""

    def __init__(self, symbols: list[str]) -> None:
        self.symbols = list(symbols)
        self.index = {s: i + NUM_SPECIAL for i, s in enumerate(self.symbols)}
        self.vocab_size = NUM_SPECIAL + len(self.symbols)

    def encode(self, text: str) -> list[int]:
        tokens = text.split() if " " in text.strip() else list(text.strip())
        unknown = [t for t in tokens if t not in self.index]
        if unknown:
            raise ConfigError(
                f"prompt symbol {unknown[0]!r} is not in this task's vocabulary "
                f"({' '.join(self.symbols)}); write space-separated symbols"
            )
        return [self.index[t] for t in tokens]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.symbols[i - NUM_SPECIAL] for i in ids if i >= NUM_SPECIAL)

    def save(self, path: str | Path) -> None:
        import json

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"kind": "symbols", "symbols": self.symbols}))


ADDITION_MAX_DIGITS = 18  # the longest operand below numpy's int64 bound (10**18)


def _digits(n: int) -> list[int]:
    return [int(c) for c in str(n)]


def make_pair(kind: str, rng: np.random.Generator, n_symbols: int, min_len: int, max_len: int
              ) -> tuple[list[int], list[int]]:  # fmt: skip
    """One (source, target) pair of symbol indices (0-based, before the special offset)."""
    if kind == "addition":  # symbols 0–9 are digits, 10 is "+"
        a, b = (int(rng.integers(0, 10 ** int(rng.integers(min_len, max_len + 1)))) for _ in "ab")
        return _digits(a) + [10] + _digits(b), _digits(a + b)
    length = int(rng.integers(min_len, max_len + 1))
    src = rng.integers(0, n_symbols, size=length).tolist()
    transform: dict[str, Callable[[list[int]], list[int]]] = {
        "copy": lambda x: list(x),
        "majority": lambda x: list(x),  # the label is computed from the source
        "reverse": lambda x: x[::-1],
        "sort": sorted,
    }
    return src, transform[kind](src)


def majority_label(src: list[int]) -> int:
    counts = np.bincount(src)
    return int(np.argmax(counts))  # argmax takes the first maximum: ties → smallest


def seeded_loader(
    examples: list, batch_size: int, collate: Callable, num_workers: int, seed: int,
    shuffle: bool,
) -> DataLoader:  # fmt: skip
    """A loader over in-memory examples; shuffled, the order of epoch e depends on (seed, e)
    only, so a run resumes mid-epoch exactly."""
    generator = torch.Generator().manual_seed(seed)
    if shuffle:
        sampler = EpochRandomSampler(examples, seed=seed)
        return ResumableDataLoader(
            examples, batch_size=batch_size, sampler=sampler, collate_fn=collate,
            num_workers=num_workers, generator=generator,
        )  # fmt: skip
    return DataLoader(examples, batch_size=batch_size, shuffle=False, collate_fn=collate,
                      num_workers=num_workers, generator=generator)  # fmt: skip


class SyntheticDataModule(AttnlabDataModule):
    """Seeded synthetic data for one of the five tasks above, padded per batch."""

    KINDS = ("copy", "reverse", "sort", "addition", "majority")

    @classmethod
    def task_for(cls, config: dict[str, Any]) -> str:
        return "classification" if config.get("kind", "reverse") == "majority" else "seq2seq"

    def __init__(
        self,
        kind: str = "reverse",
        n_symbols: int = 10,
        min_len: int = 1,
        max_len: int = 10,
        train_size: int = 10_000,
        val_size: int = 500,
        test_size: int = 500,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if kind not in self.KINDS:
            raise ConfigError(f"data.kind={kind} is not valid; use one of: {', '.join(self.KINDS)}")
        for key, value in (("n_symbols", n_symbols), ("min_len", min_len),
                           ("max_len", max_len), ("train_size", train_size),
                           ("val_size", val_size), ("test_size", test_size),
                           ("batch_size", batch_size)):  # fmt: skip
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"data.{key}={value} must be a positive integer")
        if min_len > max_len:
            raise ConfigError(f"data.min_len={min_len} exceeds data.max_len={max_len}; swap them")
        if kind == "addition" and max_len > ADDITION_MAX_DIGITS:  # operands are drawn as int64
            raise ConfigError(f"data.max_len={max_len} digits is too long for addition's "
                              f"operands; use at most {ADDITION_MAX_DIGITS}")  # fmt: skip
        self.kind, self.seed = kind, seed
        self.task = self.task_for({"kind": kind})
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.n_symbols = 11 if kind == "addition" else n_symbols
        self.min_len, self.max_len = min_len, max_len
        self.batch_size, self.num_workers = batch_size, num_workers
        symbols = (
            [str(i) for i in range(10)] + ["+"]
            if kind == "addition"
            else [str(i) for i in range(self.n_symbols)]
        )
        self.tokenizer = SymbolTokenizer(symbols)
        self.vocab_size = self.tokenizer.vocab_size
        self.num_classes = self.n_symbols if kind == "majority" else None
        self.splits: dict[str, list[dict[str, Tensor]]] = {}

    def _generate(self, split: str) -> list[dict[str, Tensor]]:
        rng = np.random.default_rng([self.seed, SPLIT_OFFSETS[split]])
        examples = []
        for _ in range(self.sizes[split]):
            src, tgt = make_pair(self.kind, rng, self.n_symbols, self.min_len, self.max_len)
            item = {"src": torch.tensor(src) + NUM_SPECIAL}
            if self.task == "classification":
                label = torch.tensor(majority_label(src))
                examples.append({"input_ids": item["src"], "labels": label})
            else:
                examples.append({**item, "tgt": torch.tensor(tgt) + NUM_SPECIAL})
        return examples

    def setup(self, stage: str | None = None) -> None:
        for split in ("train", "val", "test"):
            if split not in self.splits:
                self.splits[split] = self._generate(split)

    def longest(self) -> dict[str, int]:
        self.setup()
        return longest_in(example for split in self.splits.values() for example in split)

    @staticmethod
    def collate(batch: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        out = {}
        for key in batch[0]:
            values = [b[key] for b in batch]
            out[key] = (
                torch.stack(values)
                if values[0].dim() == 0
                else pad_sequence(values, batch_first=True, padding_value=PAD)
            )
        return out

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return seeded_loader(self.splits[split], self.batch_size, self.collate,
                             self.num_workers, self.seed, shuffle)  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_loader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


__all__ = ["SPECIAL_TOKENS", "SymbolTokenizer", "SyntheticDataModule"]
