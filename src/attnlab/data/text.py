"""Language-modelling data: one long token stream cut into blocks, as in nanoGPT.

Sources (first one set wins): ``hf.name`` (a Hugging Face dataset), ``files``
(``{train, val, test}``; a missing val is carved from train, a missing test
reuses val), or ``path`` (one file: the first ``1 - val_fraction`` of it trains,
the last ``val_fraction`` validates and tests).

Training draws blocks of ``block_size + 1`` tokens at random offsets (every
offset is a sample; the order is shuffled by a generator seeded with ``seed``).
Validation and test read a fixed set of blocks tiling the whole split (or
``eval_blocks`` evenly spaced ones), in order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from attnlab.data.cache import CachedDataModule
from attnlab.data.files import existing_file, file_identity, read_text
from attnlab.data.hub import hf_column, hf_fingerprint, hf_split, load_hf_dataset
from attnlab.data.sampling import EpochRandomSampler
from attnlab.data.tokenizers import AnyTokenizer, CharTokenizer, train_tokenizer
from attnlab.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")


class TokenBlocks(Dataset):
    """``{"tokens": tokens[s : s + block_size + 1]}`` for each start ``s`` (all starts if None)."""

    def __init__(
        self, tokens: torch.Tensor, block_size: int, starts: torch.Tensor | None = None
    ) -> None:
        self.tokens = tokens
        self.block_size = block_size
        self.starts = starts

    def __len__(self) -> int:
        if self.starts is not None:
            return len(self.starts)
        return len(self.tokens) - self.block_size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        s = int(self.starts[i]) if self.starts is not None else i
        return {"tokens": self.tokens[s : s + self.block_size + 1].long()}


def eval_starts(n_tokens: int, block_size: int, eval_blocks: int | None) -> torch.Tensor:
    """Starts of blocks covering the split evenly: all non-overlapping ones, or ``eval_blocks``."""
    last = n_tokens - block_size - 1  # the last start whose block fits
    if eval_blocks is None:
        return torch.arange(0, last + 1, block_size)
    return torch.linspace(0, last, int(eval_blocks)).round().long().unique()


def split_by_fraction(text: str, val_fraction: float) -> tuple[str, str]:
    """First ``1 - f`` of the text for training, the last ``f`` for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must lie in (0, 1), got {val_fraction}")
    cut = int(len(text) * (1.0 - val_fraction))
    return text[:cut], text[cut:]


def encode_text(tokenizer: AnyTokenizer, text: str, lines_per_chunk: int = 512) -> torch.Tensor:
    """The whole text as one int32 id stream; BPE encodes chunks of lines in parallel."""
    if isinstance(tokenizer, CharTokenizer):
        return torch.tensor(tokenizer.encode(text), dtype=torch.int32)
    lines = text.splitlines(keepends=True)
    chunks = [
        "".join(lines[i : i + lines_per_chunk]) for i in range(0, len(lines), lines_per_chunk)
    ]
    ids = [i for chunk in tokenizer.encode_batch(chunks) for i in chunk]
    return torch.tensor(ids, dtype=torch.int32)


class TextDataModule(CachedDataModule):
    """Character- or BPE-level language modelling on local text or a Hugging Face dataset."""

    task = "lm"

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        files: Mapping[str, str | None] | None = None,
        hf: Mapping[str, Any] | None = None,
        tokenizer: str = "char",
        vocab_size: int | None = None,
        block_size: int = 64,
        val_fraction: float = 0.1,
        eval_blocks: int | None = None,
        samples_per_epoch: int | None = None,
        batch_size: int = 12,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, seed, cache_dir)
        self.path = path
        self.files = {k: v for k, v in files.items() if v} if files else None
        self.files = self.files or None  # all null (text.yaml's defaults): not given
        self.hf = dict(hf) if hf and hf.get("name") else None
        self.tokenizer_kind = tokenizer
        self.requested_vocab_size = vocab_size
        self.block_size = int(block_size)
        self.val_fraction = float(val_fraction)
        self.eval_blocks = eval_blocks
        self.samples_per_epoch = samples_per_epoch
        self.splits: dict[str, torch.Tensor] = {}

    # -- where the text comes from ---------------------------------------------------------
    def _local_files(self) -> dict[str, Any]:
        if self.files:
            out = {"train": existing_file(self.files.get("train"), "data.files.train")}
            for split in ("val", "test"):
                if self.files.get(split):
                    out[split] = existing_file(self.files[split], f"data.files.{split}")
            return out
        if self.path:
            return {"train": existing_file(self.path, "data.path")}
        raise DataError(
            "data.path is not set; set data.path=/path/to/text.txt, "
            "data.files={train: …, val: …} or data.hf.name=<dataset>"
        )

    def _identity(self) -> dict[str, Any]:
        settings = {
            "tokenizer": self.tokenizer_kind,
            "vocab_size": None if self.tokenizer_kind == "char" else self.requested_vocab_size,
            "val_fraction": self.val_fraction,
        }
        if self.hf:
            self._hf_dataset = load_hf_dataset(self.hf["name"], self.hf.get("config"))
            return {"hf": self.hf, "fingerprint": hf_fingerprint(self._hf_dataset), **settings}
        self._sources = self._local_files()
        keys = {s: file_identity(p) for s, p in self._sources.items()}
        return {"files": keys, **settings}

    def _read_splits(self) -> dict[str, str | None]:
        if self.hf:
            ds, column = self._hf_dataset, self.hf.get("text_column", "text")
            names = {
                "train": self.hf.get("split") or "train",
                "val": self.hf.get("val_split", "validation"),
                "test": self.hf.get("test_split", "test"),
            }
            texts: dict[str, str | None] = {}
            for split, name in names.items():
                part = hf_split(ds, name) if split == "train" or name in ds else None
                key = "data.hf.text_column"
                texts[split] = None if part is None else "\n".join(hf_column(part, column, key))
            return texts
        return {
            split: read_text(p, f"data.files.{split}" if self.files else "data.path")
            for split, p in self._sources.items()
        }

    # -- tokenize once, cache -------------------------------------------------------------------
    def _tokenize(self) -> dict[str, Any]:
        texts = self._read_splits()
        if texts.get("val") is None:
            texts["train"], texts["val"] = split_by_fraction(texts["train"], self.val_fraction)
        train_text = texts["train"]
        corpus = [train_text] if self.tokenizer_kind == "char" else train_text.splitlines(True)
        tok = train_tokenizer(self.tokenizer_kind, corpus, self.requested_vocab_size)
        payload: dict[str, Any] = {"tokenizer": tok.to_json()}
        for split in SPLITS:
            text = texts.get(split)
            payload[split] = None if text is None else encode_text(tok, text)
        return payload

    def _install(self, payload: dict[str, Any]) -> None:
        self.splits = {s: payload[s] for s in SPLITS if payload.get(s) is not None}
        self.splits.setdefault("test", self.splits["val"])
        for split, tokens in self.splits.items():
            n = len(tokens)
            if n < self.block_size + 1:
                sources = getattr(self, "_sources", None) or {}
                hf = f"data.hf.name={(self.hf or {}).get('name')}"
                source = sources.get(split, sources.get("train")) or hf
                fix = f"use data.block_size<={n - 1} or more {split} text" if n > 1 else (
                    f"give it more {split} text")  # fmt: skip
                raise DataError(
                    f"data.block_size: {self.block_size} is too long for the {split} split "
                    f"of {source} ({n} tokens); {fix}"
                )

    # -- loaders ------------------------------------------------------------------------------
    def _eval_loader(self, split: str) -> DataLoader:
        self._build()
        tokens = self.splits[split]
        starts = eval_starts(len(tokens), self.block_size, self.eval_blocks)
        return self._loader(TokenBlocks(tokens, self.block_size, starts), shuffle=False)

    def longest(self) -> dict[str, int]:
        return {"tokens": self.block_size + 1}

    def train_dataloader(self) -> DataLoader:
        """Random-offset blocks, reshuffled each epoch, deterministic for ``seed``."""
        self._build()
        dataset = TokenBlocks(self.splits["train"], self.block_size)
        sampler = EpochRandomSampler(dataset, seed=self.seed, num_samples=self.samples_per_epoch)
        return self._loader(dataset, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        """Blocks tiling the validation split, in order."""
        return self._eval_loader("val")

    def test_loader(self) -> DataLoader:
        """Blocks tiling the test split (the validation split when there is no test data)."""
        return self._eval_loader("test")
