"""Sentence classification from TSV/CSV files or a Hugging Face dataset.

Each file has a header row; ``text_column`` and ``label_column`` name the
columns (a list gives alternative names, e.g. SST-2's ``sentence`` in train and
``content`` in dev). Labels are integers ``0..K-1`` and ``num_classes`` is the
largest label plus one. With a single ``path``, an evenly spaced
``val_fraction`` of its rows validates (and tests), so a file sorted by label
still gives a balanced split. The same holds when only a training file is given
(``data.files.val=null``); ``holdout=sentences`` then holds out whole sentences instead of
rows, for data whose rows are phrases of its sentences (GLUE's SST-2 train holds every
phrase of the treebank's parse trees): the validation rows are complete sentences and no
phrase of them trains (:func:`sentence_split`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from attnlab.data.base import UNK
from attnlab.data.batching import PackedSequences, pad_batch
from attnlab.data.cache import CachedDataModule
from attnlab.data.files import existing_file, file_identity, read_table
from attnlab.data.hub import hf_column, hf_fingerprint, hf_split, load_hf_dataset
from attnlab.data.sampling import EpochRandomSampler
from attnlab.data.tokenizers import train_tokenizer
from attnlab.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")
Examples = tuple[list[str], list[int]]


class LabelledSequences(Dataset):
    """Token ids with one integer label each."""

    def __init__(self, ids: PackedSequences, labels: torch.Tensor) -> None:
        self.ids, self.labels = ids, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ids[i], self.labels[i]


def collate_labelled(items: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``{"input_ids": (B, L) right-padded with PAD, "labels": (B,)}``."""
    ids, labels = zip(*items, strict=True)
    return {"input_ids": pad_batch(ids), "labels": torch.stack(labels).long()}


def _names(column: str | Sequence[str]) -> list[str]:
    return [column] if isinstance(column, str) else [str(c) for c in column]


def read_examples(
    path: Any, key: str, text_column: list[str], label_column: list[str], delimiter: str | None
) -> Examples:
    """Texts and integer labels of one TSV/CSV file; DataError names file, line and column."""
    table = read_table(existing_file(path, key), key, delimiter)
    ti = table.column(text_column, "data.text_column")
    li = table.column(label_column, "data.label_column")
    texts, labels = [], []
    for row, line in zip(table.rows, table.line_numbers, strict=True):
        if max(ti, li) >= len(row):
            raise DataError(
                f"{key}: {table.path} line {line} has {len(row)} fields but the header has "
                f"{len(table.header)}; check data.delimiter"
            )
        cell = row[li].strip()
        try:
            label = int(cell)
        except ValueError:
            label = -1
        if label < 0:
            raise DataError(
                f"{key}: {table.path} line {line}, column {table.header[li]!r}: label {cell!r} "
                "is not an integer 0..K-1; map class names to integers first"
            )
        texts.append(row[ti])
        labels.append(label)
    return texts, labels


def evenly_spaced_split(n: int, val_fraction: float) -> tuple[list[int], list[int]]:
    """Row indices for (train, val): ``val_fraction`` of rows, evenly spread over the file."""
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must lie in (0, 1), got {val_fraction}")
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    val = set(torch.linspace(0, n - 1, n_val).round().long().tolist())
    return [i for i in range(n) if i not in val], sorted(val)


HOLDOUTS = ("rows", "sentences")


def sentence_split(texts: Sequence[str], val_fraction: float) -> tuple[list[int], list[int]]:
    """Row indices for (train, val) holding out whole sentences: ``val_fraction`` of the
    sentences, evenly spread, validate, and every row whose words are a contiguous span of a
    held-out sentence leaves training. A sentence is a row whose words (lower-cased, split on
    whitespace) are no proper span of another row's: in SST-2 the treebank's sentences, whose
    phrases are the other rows."""
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must lie in (0, 1), got {val_fraction}")
    words = [tuple(text.lower().split()) for text in texts]

    def spans(row: tuple[str, ...], proper: bool) -> set[tuple[str, ...]]:
        n = len(row)
        return {row[i:j] for i in range(n) for j in range(i + 1, n + 1) if not proper or j - i < n}

    inner: set[tuple[str, ...]] = set()
    for row in set(words):
        inner |= spans(row, proper=True)
    sentences = [i for i, row in enumerate(words) if row and row not in inner]
    picked = evenly_spaced_split(len(sentences), val_fraction)[1] if len(sentences) > 1 else []
    val = [sentences[k] for k in picked]
    held: set[tuple[str, ...]] = set()
    for i in val:
        held |= spans(words[i], proper=False)
    chosen = set(val)
    return [i for i, row in enumerate(words) if i not in chosen and row not in held], val


class ClassificationDataModule(CachedDataModule):
    """Labelled sentences → ``{"input_ids", "labels"}`` batches."""

    task = "classification"

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        files: Mapping[str, str | None] | None = None,
        hf: Mapping[str, Any] | None = None,
        text_column: str | Sequence[str] = "text",
        label_column: str | Sequence[str] = "label",
        delimiter: str | None = None,
        tokenizer: str = "bpe",
        vocab_size: int = 8000,
        max_len: int = 128,
        val_fraction: float = 0.1,
        holdout: str = "rows",
        num_classes: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, seed, cache_dir)
        self.path = path
        self.files = {k: v for k, v in files.items() if v} if files else None
        self.files = self.files or None  # all null (classification.yaml's defaults): not given
        self.hf = dict(hf) if hf and hf.get("name") else None
        self.text_column = _names(text_column)
        self.label_column = _names(label_column)
        self.delimiter = delimiter
        self.tokenizer_kind = tokenizer
        self.requested_vocab_size = vocab_size
        self.max_len = int(max_len)
        self.val_fraction = float(val_fraction)
        if holdout not in HOLDOUTS:
            raise ConfigError(f"data.holdout={holdout} is not one of {', '.join(HOLDOUTS)}: "
                              "rows holds out evenly spaced rows, sentences whole sentences "
                              "and their phrases")
        self.holdout = holdout
        self.requested_num_classes = num_classes
        self.datasets: dict[str, LabelledSequences] = {}

    # -- sources ---------------------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        settings = {
            "tokenizer": self.tokenizer_kind,
            "vocab_size": None if self.tokenizer_kind == "char" else self.requested_vocab_size,
            "columns": [self.text_column, self.label_column],
            "delimiter": self.delimiter,
            "max_len": self.max_len,
            "val_fraction": self.val_fraction,
            **({"holdout": self.holdout} if self.holdout != "rows" else {}),  # old caches stay
        }
        if self.hf:
            self._hf_dataset = load_hf_dataset(self.hf["name"], self.hf.get("config"))
            return {"hf": self.hf, "fingerprint": hf_fingerprint(self._hf_dataset), **settings}
        if self.files:
            self._sources = {"train": existing_file(self.files.get("train"), "data.files.train")}
            for split in ("val", "test"):
                if self.files.get(split):
                    self._sources[split] = existing_file(self.files[split], f"data.files.{split}")
        elif self.path:
            self._sources = {"train": existing_file(self.path, "data.path")}
        else:
            raise DataError(
                "data.path is not set; set data.path=/path/to/data.tsv, "
                "data.files={train: …, val: …} or data.hf.name=<dataset>"
            )
        return {"files": {s: file_identity(p) for s, p in self._sources.items()}, **settings}

    def _read_hf(self) -> dict[str, Examples]:
        ds = self._hf_dataset
        names = {
            "train": self.hf.get("split") or "train",
            "val": self.hf.get("val_split") or "validation",
            "test": self.hf.get("test_split") or "test",
        }
        out: dict[str, Examples] = {}
        for split, name in names.items():
            if split != "train" and name not in ds:
                continue
            part = hf_split(ds, name, f"data.hf.{split}_split")
            text_name = next((c for c in self.text_column if c in part.column_names), None)
            label_name = next((c for c in self.label_column if c in part.column_names), None)
            texts = hf_column(part, text_name or self.text_column[0], "data.text_column")
            labels = hf_column(part, label_name or self.label_column[0], "data.label_column")
            bad = next((x for x in labels if not isinstance(x, int) or x < 0), None)
            if bad is not None:
                raise DataError(
                    f"data.label_column: Hugging Face split {name!r} has label {bad!r}; "
                    "labels must be integers 0..K-1"
                )
            out[split] = (list(texts), list(labels))
        return out

    def _read_examples(self) -> dict[str, Examples]:
        if self.hf:
            examples = self._read_hf()
        else:
            examples = {
                split: read_examples(
                    path,
                    f"data.files.{split}" if self.files else "data.path",
                    self.text_column,
                    self.label_column,
                    self.delimiter,
                )
                for split, path in self._sources.items()
            }
        if "val" in examples and self.holdout != "rows":  # a validation set is given
            raise ConfigError(
                f"data.holdout={self.holdout} chooses what validates when it is carved from "
                "train, but a validation set is given; set data.files.val=null (or drop "
                "data.holdout)"
            )
        if "val" not in examples:
            texts, labels = examples["train"]
            split = sentence_split if self.holdout == "sentences" else None
            train_idx, val_idx = (split(texts, self.val_fraction) if split else
                                  evenly_spaced_split(len(texts), self.val_fraction))
            if not train_idx or not val_idx:
                source = self._sources.get("train") if not self.hf else self.hf.get("name")
                unit = "rows" if self.holdout == "rows" else "rows (data.holdout=sentences)"
                raise DataError(
                    f"data.val_fraction: {source} has {len(texts)} labelled {unit}, too few to "
                    f"hold out {self.val_fraction:g} of them for validation and train on the "
                    "rest; add rows or give a validation file (data.files.val=…)"
                )
            examples["train"] = ([texts[i] for i in train_idx], [labels[i] for i in train_idx])
            examples["val"] = ([texts[i] for i in val_idx], [labels[i] for i in val_idx])
        return examples

    # -- tokenize once, cache ----------------------------------------------------------------------
    def _tokenize(self) -> dict[str, Any]:
        examples = self._read_examples()
        tok = train_tokenizer(self.tokenizer_kind, examples["train"][0], self.requested_vocab_size)
        payload: dict[str, Any] = {"tokenizer": tok.to_json()}
        for split, (texts, labels) in examples.items():
            # An empty text becomes one <unk> so every example has a token to pool over.
            ids = [s[: self.max_len] or [UNK] for s in tok.encode_batch(texts)]
            payload[split] = {
                "ids": PackedSequences.from_lists(ids).to_state(),
                "labels": torch.tensor(labels, dtype=torch.long),
            }
        return payload

    def _install(self, payload: dict[str, Any]) -> None:
        for split in SPLITS:
            if payload.get(split) is None:  # no test data: test on val
                self.datasets[split] = self.datasets["val"]
                continue
            ids = PackedSequences.from_state(payload[split]["ids"])
            self.datasets[split] = LabelledSequences(ids, payload[split]["labels"])
        largest = max(int(d.labels.max()) for d in self.datasets.values())
        if self.requested_num_classes is None:
            self.num_classes = largest + 1
        elif largest >= self.requested_num_classes:
            raise DataError(
                f"data.num_classes: {self.requested_num_classes} but the data has label {largest}; "
                f"set data.num_classes>={largest + 1} or null"
            )
        else:
            self.num_classes = int(self.requested_num_classes)

    # -- loaders -------------------------------------------------------------------------------
    def longest(self) -> dict[str, int]:
        self._build()
        return {"input_ids": max(int(d.ids.lengths.max()) for d in self.datasets.values())}

    def train_dataloader(self) -> DataLoader:
        """Shuffled batches, deterministic for ``seed``."""
        self._build()
        dataset = self.datasets["train"]
        sampler = EpochRandomSampler(dataset, seed=self.seed)
        return self._loader(dataset, sampler=sampler, collate_fn=collate_labelled)

    def _eval_loader(self, split: str) -> DataLoader:
        self._build()
        return self._loader(self.datasets[split], shuffle=False, collate_fn=collate_labelled)

    def val_dataloader(self) -> DataLoader:
        """Validation examples in file order."""
        return self._eval_loader("val")

    def test_loader(self) -> DataLoader:
        """Test examples in file order (validation examples when there is no test data)."""
        return self._eval_loader("test")
