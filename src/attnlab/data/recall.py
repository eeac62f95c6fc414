"""Multi-query associative recall (MQAR; Arora et al. 2024, "Zoology", §3.1): a synthetic
language-modelling task that needs attention over long range.

Each sequence lists ``n_pairs`` key–value pairs, then asks for ``n_queries`` of the keys
again, each followed by its value, in random order::

    k₁ v₁ k₂ v₂ … k_N v_N   q₁ a₁ q₂ a₂ … q_Q a_Q        (a_i = the value paired with q_i)

Keys and values come from disjoint vocabularies; the keys of one sequence are distinct,
values may repeat. The loss and the accuracy count only the answers: the position of
each query q_i predicts a_i (every other label is -100), so ``val/acc`` is recall
accuracy. A model must retrieve a value from up to 2·N + 2·Q tokens back, which local
or compressed attention may not reach. ``data.gap`` inserts that many filler tokens
between the pairs and the queries, to stretch the distance.

Batches: ``{"tokens": (B, L), "labels": (B, L − 1)}``: the language-modelling format with
the labels given, ``labels[:, t]`` the target of ``tokens[:, t]``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from attnlab.data.base import NUM_SPECIAL, AttnlabDataModule, longest_in
from attnlab.data.synthetic import SPLIT_OFFSETS, SymbolTokenizer, seeded_loader
from attnlab.errors import ConfigError

IGNORE = -100


def recall_example(
    rng: np.random.Generator, n_pairs: int, n_queries: int, n_keys: int, n_values: int, gap: int
) -> tuple[list[int], list[int]]:
    """(tokens, labels) of one sequence, ids before the special-token offset: keys are
    0 … n_keys−1, values n_keys … n_keys+n_values−1, the filler n_keys+n_values."""
    keys = rng.choice(n_keys, size=n_pairs, replace=False)
    values = n_keys + rng.integers(0, n_values, size=n_pairs)
    asked = rng.choice(n_pairs, size=n_queries, replace=False)
    filler = n_keys + n_values
    tokens = [int(t) for pair in zip(keys, values, strict=True) for t in pair]
    tokens += [filler] * gap
    for i in asked:
        tokens += [int(keys[i]), int(values[i])]
    labels = [IGNORE] * (len(tokens) - 1)
    start = 2 * n_pairs + gap
    for j in range(n_queries):
        query = start + 2 * j
        labels[query] = tokens[query + 1]  # the query's position predicts its answer
    return tokens, labels


class AssociativeRecallDataModule(AttnlabDataModule):
    """Seeded MQAR sequences of one length (no padding), as language-modelling batches."""

    task = "lm"
    given_labels = True  # batches carry their labels: a causal LM only

    def __init__(
        self,
        n_pairs: int = 32,
        n_queries: int = 16,
        n_keys: int = 64,
        n_values: int = 64,
        gap: int = 0,
        train_size: int = 20_000,
        val_size: int = 500,
        test_size: int = 500,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        for key, value in (("n_pairs", n_pairs), ("n_queries", n_queries), ("n_keys", n_keys),
                           ("n_values", n_values), ("train_size", train_size),
                           ("val_size", val_size), ("test_size", test_size),
                           ("batch_size", batch_size)):  # fmt: skip
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"data.{key}={value} must be a positive integer")
        if not isinstance(gap, int) or gap < 0:
            raise ConfigError(f"data.gap={gap} must be an integer >= 0")
        if n_pairs > n_keys:
            raise ConfigError(
                f"data.n_pairs={n_pairs} needs as many distinct keys, but data.n_keys={n_keys}; "
                "raise data.n_keys or lower data.n_pairs"
            )
        if n_queries > n_pairs:
            raise ConfigError(
                f"data.n_queries={n_queries} exceeds data.n_pairs={n_pairs}: each pair is asked "
                "at most once; lower data.n_queries"
            )
        self.shape = (n_pairs, n_queries, n_keys, n_values, gap)
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        symbols = [f"k{i}" for i in range(n_keys)] + [f"v{i}" for i in range(n_values)] + ["_"]
        self.tokenizer = SymbolTokenizer(symbols)
        self.vocab_size = self.tokenizer.vocab_size
        self.sequence_length = 2 * n_pairs + gap + 2 * n_queries
        self.splits: dict[str, list[dict[str, Tensor]]] = {}

    def _generate(self, split: str) -> list[dict[str, Tensor]]:
        rng = np.random.default_rng([self.seed, SPLIT_OFFSETS[split], 7])
        out = []
        for _ in range(self.sizes[split]):
            tokens, labels = recall_example(rng, *self.shape)
            labels_t = torch.tensor(labels)
            out.append({
                "tokens": torch.tensor(tokens) + NUM_SPECIAL,
                "labels": torch.where(labels_t == IGNORE, labels_t, labels_t + NUM_SPECIAL),
            })  # fmt: skip
        return out

    def setup(self, stage: str | None = None) -> None:
        for split in ("train", "val", "test"):
            if split not in self.splits:
                self.splits[split] = self._generate(split)

    def longest(self) -> dict[str, int]:
        self.setup()
        return longest_in(example for split in self.splits.values() for example in split)

    @staticmethod
    def collate(batch: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        return {key: torch.stack([b[key] for b in batch]) for key in batch[0]}

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return seeded_loader(self.splits[split], self.batch_size, self.collate,
                             self.num_workers, self.seed, shuffle)  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_loader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
