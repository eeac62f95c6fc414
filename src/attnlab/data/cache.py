"""On-disk cache of trained tokenizers and tokenized splits, and the data-module base using it.

A cache entry is keyed by a hash of the data's identity (path, size, mtime of
each file, or a Hugging Face fingerprint) and every setting that changes
tokenization, so a second run starts fast and a changed setting never reuses
a stale entry. Entries are written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from attnlab.data.base import AttnlabDataModule
from attnlab.data.paths import default_cache_dir
from attnlab.data.sampling import ResumableDataLoader
from attnlab.data.tokenizers import tokenizer_from_json

CACHE_VERSION = 1  # bump when the payload layout changes


def cache_key(identity: dict[str, Any]) -> str:
    """A short stable hash of ``identity`` (any JSON-able description of data + settings)."""
    blob = json.dumps({"v": CACHE_VERSION, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_cached(path: Path) -> dict[str, Any] | None:
    """A cached payload, or None when absent or unreadable (then it is rebuilt)."""
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True)
    except Exception as e:  # a truncated or foreign file: rebuild rather than fail
        warnings.warn(f"ignoring unreadable data cache {path} ({type(e).__name__})", stacklevel=2)
        return None


class CachedDataModule(AttnlabDataModule):
    """Base for real-data modules: build (or load) tokenizer + tokenized splits exactly once.

    Subclasses implement ``_identity`` (what the cache key depends on),
    ``_tokenize`` (train the tokenizer, encode the splits: a payload dict with a
    ``"tokenizer"`` JSON string) and ``_install`` (turn a payload into datasets).
    ``prepare_data`` and ``setup`` both build, so the tokenizer and vocab size
    are known after either; later calls return at once.
    """

    def __init__(
        self,
        batch_size: int,
        num_workers: int = 0,
        seed: int = 0,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        super().__init__()
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.seed = int(seed)
        self.cache_dir = (
            Path(os.path.expanduser(str(cache_dir))) if cache_dir else default_cache_dir()
        )
        self.cache_path: Path | None = None
        self.cache_hit: bool | None = None  # True when the last build came from the cache
        self._built = False

    def prepare_data(self) -> None:
        """Train the tokenizer and tokenize (or find both in the cache)."""
        self._build()

    def setup(self, stage: str | None = None) -> None:
        """Load the tokenized splits; cheap after the first call."""
        self._build()

    def _build(self) -> None:
        if self._built:
            return
        identity = self._identity()
        name = type(self).__name__.lower()
        self.cache_path = self.cache_dir / f"{name}-{cache_key(identity)}.pt"
        payload = load_cached(self.cache_path)
        self.cache_hit = payload is not None
        if payload is None:
            payload = self._tokenize()
            try:
                save_atomic(payload, self.cache_path)
            except OSError as e:  # a read-only cache never stops a run
                warnings.warn(f"could not write data cache {self.cache_path}: {e}", stacklevel=2)
        self.tokenizer = tokenizer_from_json(payload["tokenizer"])
        self.vocab_size = self.tokenizer.vocab_size
        self._install(payload)
        self._built = True

    def _identity(self) -> dict[str, Any]:
        raise NotImplementedError

    def _tokenize(self) -> dict[str, Any]:
        raise NotImplementedError

    def _install(self, payload: dict[str, Any]) -> None:
        raise NotImplementedError

    def _generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed)

    def _loader(self, dataset: Dataset, **kwargs: Any) -> DataLoader:
        """A DataLoader with this module's workers; pass ``batch_size`` or ``batch_sampler``."""
        if "batch_sampler" not in kwargs:
            kwargs.setdefault("batch_size", self.batch_size)
        if self.num_workers > 0:
            # Tokenizing is done; keep HF tokenizers' thread pool from warning in forked workers.
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        # Resumable: Lightning checkpoints the position within the epoch. Its own generator
        # keeps each new iterator from drawing a seed from the global one (exact resume).
        kwargs.setdefault("generator", self._generator())
        return ResumableDataLoader(
            dataset,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            **kwargs,
        )
