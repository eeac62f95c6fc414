"""Translation data: sentence pairs from parallel files or a Hugging Face dataset.

One joint BPE vocabulary is learned on the training split's source and target
sides together (Vaswani et al., 2017, §5.1, shared source-target vocabulary).
Training pairs longer than ``max_len`` tokens on either side are dropped;
validation and test pairs are never dropped, only truncated, so BLEU is
always measured on the full set against the untouched reference sentences.
Training batches group sentences of similar length (``BucketBatchSampler``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from attnlab.data.batching import BucketBatchSampler, PackedSequences, pad_batch
from attnlab.data.cache import CachedDataModule
from attnlab.data.files import existing_file, file_identity, read_lines
from attnlab.data.hub import hf_column, hf_fingerprint, hf_split, load_hf_dataset
from attnlab.data.sampling import EpochRandomSampler
from attnlab.data.tokenizers import train_tokenizer
from attnlab.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")
Pairs = tuple[list[str], list[str]]


class PairDataset(Dataset):
    """Aligned source/target id sequences."""

    def __init__(self, src: PackedSequences, tgt: PackedSequences) -> None:
        self.src, self.tgt = src, tgt

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.src[i], self.tgt[i]

    @property
    def lengths(self) -> torch.Tensor:
        """Source plus target length of every pair, the key for length bucketing."""
        return self.src.lengths + self.tgt.lengths


def collate_pairs(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``{"src": (B, S), "tgt": (B, T)}`` right-padded with PAD, no BOS/EOS."""
    src, tgt = zip(*pairs, strict=True)
    return {"src": pad_batch(src), "tgt": pad_batch(tgt)}


def read_parallel(src_path: Any, tgt_path: Any, key: str) -> Pairs:
    """Lines of two aligned files; DataError naming both when their line counts differ."""
    src_file = existing_file(src_path, f"{key}.src")
    tgt_file = existing_file(tgt_path, f"{key}.tgt")
    src, tgt = read_lines(src_file, f"{key}.src"), read_lines(tgt_file, f"{key}.tgt")
    if len(src) != len(tgt):
        raise DataError(
            f"{key}: parallel files differ in length: {src_file} has {len(src)} lines but "
            f"{tgt_file} has {len(tgt)}; line i of one must translate line i of the other"
        )
    return src, tgt


class TranslationDataModule(CachedDataModule):
    """Parallel sentences → ``{"src", "tgt"}`` batches for sequence-to-sequence models."""

    task = "seq2seq"

    def __init__(
        self,
        files: Mapping[str, Mapping[str, str | None] | None] | None = None,
        hf: Mapping[str, Any] | None = None,
        tokenizer: str = "bpe",
        vocab_size: int = 8000,
        max_len: int = 100,
        bucket_batches: int = 50,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, seed, cache_dir)
        # a split whose src and tgt are both null (translation.yaml's defaults) is not given
        given = {k: dict(v) for k, v in (files or {}).items() if v and any(dict(v).values())}
        self.files = given or None
        self.hf = dict(hf) if hf and hf.get("name") else None
        self.tokenizer_kind = tokenizer
        self.requested_vocab_size = vocab_size
        self.max_len = int(max_len)
        self.bucket_batches = int(bucket_batches)
        self.datasets: dict[str, PairDataset] = {}
        self._references: dict[str, list[str]] = {}
        self.dropped_pairs = 0  # training pairs over max_len

    # -- sources ---------------------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        if self.max_len < 1:
            raise ConfigError(
                f"data.max_len must be a positive number of tokens, got {self.max_len}"
            )
        settings = {
            "tokenizer": self.tokenizer_kind,
            "vocab_size": None if self.tokenizer_kind == "char" else self.requested_vocab_size,
            "max_len": self.max_len,
        }
        if self.hf:
            for lang in ("src_lang", "tgt_lang"):
                if not self.hf.get(lang):
                    raise ConfigError(f"data.hf.{lang} is not set; name the language, e.g. de / en")
            self._hf_dataset = load_hf_dataset(self.hf["name"], self.hf.get("config"))
            return {"hf": self.hf, "fingerprint": hf_fingerprint(self._hf_dataset), **settings}
        if not self.files:
            raise DataError(
                "data.files is not set; set data.files.{train,val,test}.{src,tgt} to parallel "
                "text files, or data.hf.name=<dataset> with data.hf.src_lang/tgt_lang"
            )
        identity: dict[str, Any] = {}
        for split in SPLITS:
            sides = self.files.get(split)
            if sides is None and split != "test":
                raise DataError(f"data.files.{split} is not set; give {{src: …, tgt: …}} files")
            for side in ("src", "tgt") if sides else ():
                path = existing_file(sides.get(side), f"data.files.{split}.{side}")
                identity[f"{split}.{side}"] = file_identity(path)
        return {"files": identity, **settings}

    def _read_pairs(self) -> dict[str, Pairs]:
        if not self.hf:
            return {
                split: read_parallel(sides["src"], sides["tgt"], f"data.files.{split}")
                for split, sides in self.files.items()
                if split in SPLITS
            }
        ds, src_lang, tgt_lang = self._hf_dataset, self.hf["src_lang"], self.hf["tgt_lang"]
        column = self.hf.get("column") or "translation"
        names = {
            "train": self.hf.get("split") or "train",
            "val": self.hf.get("val_split") or "validation",
            "test": self.hf.get("test_split") or "test",
        }
        out: dict[str, Pairs] = {}
        for split, name in names.items():
            if split == "test" and name not in ds:
                continue
            rows = hf_column(hf_split(ds, name, f"data.hf.{split}_split"), column, "data.hf.column")
            try:
                out[split] = ([r[src_lang] for r in rows], [r[tgt_lang] for r in rows])
            except KeyError as e:
                raise DataError(
                    f"data.hf.src_lang/tgt_lang: language {e} not in column {column!r}; "
                    f"languages present: {sorted(rows[0]) if rows else []}"
                ) from e
        return out

    # -- tokenize once, cache ----------------------------------------------------------------------
    def _tokenize(self) -> dict[str, Any]:
        pairs = self._read_pairs()
        src_train, tgt_train = pairs["train"]
        tok = train_tokenizer(self.tokenizer_kind, src_train + tgt_train, self.requested_vocab_size)
        payload: dict[str, Any] = {"tokenizer": tok.to_json()}
        for split, (src_text, tgt_text) in pairs.items():
            src, tgt = tok.encode_batch(src_text), tok.encode_batch(tgt_text)
            if split == "train":
                keep = [
                    i
                    for i, (s, t) in enumerate(zip(src, tgt, strict=True))
                    if 0 < len(s) <= self.max_len and 0 < len(t) <= self.max_len
                ]
                if not keep:
                    raise DataError(
                        f"data.max_len: every training pair is empty or longer than {self.max_len} "
                        "tokens; raise data.max_len"
                    )
                src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
                payload["dropped"] = len(src_text) - len(keep)
            else:
                src, tgt = [s[: self.max_len] for s in src], [t[: self.max_len] for t in tgt]
            payload[split] = {
                "src": PackedSequences.from_lists(src).to_state(),
                "tgt": PackedSequences.from_lists(tgt).to_state(),
                "references": [] if split == "train" else list(tgt_text),
            }
        return payload

    def _install(self, payload: dict[str, Any]) -> None:
        for split in SPLITS:
            if payload.get(split) is None:  # no test data: test on val
                self.datasets[split] = self.datasets["val"]
                self._references[split] = self._references["val"]
                continue
            part = payload[split]
            src, tgt = (
                PackedSequences.from_state(part["src"]),
                PackedSequences.from_state(part["tgt"]),
            )
            self.datasets[split] = PairDataset(src, tgt)
            self._references[split] = part["references"]
        self.dropped_pairs = payload["dropped"]

    # -- loaders -------------------------------------------------------------------------------
    def references(self, stage: str) -> list[str]:
        """Raw target sentences of ``val`` or ``test``, in the order their loader yields them."""
        self._build()
        split = {"validate": "val", "fit": "val"}.get(stage, stage)
        if split not in ("val", "test"):
            raise ConfigError(f"references: stage must be 'val' or 'test', got {stage!r}")
        return self._references[split]

    def longest(self) -> dict[str, int]:
        self._build()
        return {side: max(int(getattr(d, side).lengths.max()) for d in self.datasets.values())
                for side in ("src", "tgt")}  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        """Length-bucketed batches in a seed-deterministic shuffled order."""
        self._build()
        dataset = self.datasets["train"]
        batches = BucketBatchSampler(
            EpochRandomSampler(dataset, seed=self.seed),
            batch_size=self.batch_size,
            drop_last=False,
            lengths=dataset.lengths,
            seed=self.seed,
            bucket_batches=self.bucket_batches,
        )
        return self._loader(dataset, batch_sampler=batches, collate_fn=collate_pairs)

    def _eval_loader(self, split: str) -> DataLoader:
        self._build()
        return self._loader(self.datasets[split], shuffle=False, collate_fn=collate_pairs)

    def val_dataloader(self) -> DataLoader:
        """Validation pairs in file order (matching ``references("val")``)."""
        return self._eval_loader("val")

    def test_loader(self) -> DataLoader:
        """Test pairs in file order (validation pairs when there is no test data)."""
        return self._eval_loader("test")
