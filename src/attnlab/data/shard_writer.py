"""Writing one split of a token-shard folder (the format: :mod:`attnlab.data.shards`).

Tokens are appended, as they come, to the file of the shard being filled (a hidden
``.pending-<split>-<shard>`` file, with its ``.docs``: where documents start), and hashed
on the way; a full shard's files are made durable and renamed to their own names, so a
shard is whole or absent. Memory holds no shard: a task's tokens at a time. A save makes
the pending files durable and records how much of them counts, so that a stopped
preparation continues from there (appends after that count are cut off).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.shards import sha256_file
from attnlab.errors import DataError


def cut_short(folder: Path, shards: list[dict[str, Any]], dtype: str) -> list[str]:
    """The files of ``shards`` (their ``.bin`` and ``.docs``) that are missing or of
    another size than their entry says."""
    itemsize = np.dtype(dtype).itemsize
    bad = []
    for shard in shards:
        for key, size in (("file", itemsize * int(shard["tokens"])),
                          ("docs", 8 * int(shard["documents"]))):  # fmt: skip
            path = folder / shard[key]
            if not path.is_file() or path.stat().st_size != size:
                bad.append(path.name)
    return bad


def damaged_shards(out: Path, index: dict[str, Any]) -> dict[str, set[int]]:
    """The shards of a finished folder that are missing, cut short or changed (checked
    against their SHA-256 in ``index``), by split."""
    damaged: dict[str, set[int]] = {}
    for split, info in index["splits"].items():
        for number, shard in enumerate(info["shards"]):
            files = ((shard["file"], shard["sha256"]), (shard["docs"], shard["docs_sha256"]))
            if any(not (out / name).is_file() or sha256_file(out / name) != digest
                   for name, digest in files):  # fmt: skip
                damaged.setdefault(split, set()).add(number)
    return damaged


def pending_file(folder: Path, split: str, state: dict[str, Any], ext: str) -> Path:
    """Where a split's saved pending tokens (``.bin``) or starts (``.docs``) are: in their
    pending file, or in the shard it became when a run was killed between the shard's
    rename and the next save (that shard is not finished in the state)."""
    path = folder / f"{state['pending']}{ext}"
    renamed = folder / f"{split}_{len(state['shards']):06d}{ext}"
    return renamed if not path.exists() and renamed.exists() else path


class SplitWriter:
    """One split's shards (``<split>_NNNNNN.bin`` and ``.docs``), written as they fill.

    ``expected``: the entries of a finished folder's shards, for a repair; then only the
    shards numbered in ``rebuild`` are written, and every shard made is checked against
    its entry (the same inputs give the same bytes)."""

    def __init__(self, folder: Path, split: str, dtype: str, shard_tokens: int,
                 expected: list[dict[str, Any]] | None = None,
                 rebuild: set[int] | None = None) -> None:  # fmt: skip
        self.folder, self.split, self.dtype, self.shard_tokens = folder, split, dtype, shard_tokens
        self.expected, self.rebuild = expected, set(rebuild or ())
        self.pending = 0  # tokens in the shard being filled
        self.n_starts = 0  # documents starting in it
        self.digests = hashlib.sha256(), hashlib.sha256()  # of its tokens, of its starts
        self.files: tuple[Any, Any] | None = None  # its open pending files
        self.shards: list[dict[str, Any]] = []
        self.written = 0  # tokens in finished shards
        self.documents = 0

    @property
    def name(self) -> str:
        """The pending files' name (``.bin`` and ``.docs`` follow)."""
        return f".pending-{self.split}-{len(self.shards):06d}"

    def _writes(self) -> bool:
        return self.expected is None or len(self.shards) in self.rebuild

    def add(self, ids: np.ndarray, starts: np.ndarray) -> int:
        """Append ``ids`` (separators included), in which documents start at the offsets
        ``starts`` (ascending); returns how many shards it completed."""
        self.documents += len(starts)
        done = 0
        while len(ids):
            take = min(len(ids), self.shard_tokens - self.pending)
            inside = int(np.searchsorted(starts, take))
            self._append(ids[:take], starts[:inside] + self.pending)
            ids, starts = ids[take:], starts[inside:] - take
            if self.pending == self.shard_tokens:
                self._write_shard()
                done += 1
        return done

    def _append(self, tokens: np.ndarray, starts: np.ndarray) -> None:
        tokens = np.ascontiguousarray(tokens, dtype=self.dtype)
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        for digest, data in zip(self.digests, (tokens, starts), strict=True):
            digest.update(data)
        if self._writes():
            if self.files is None:  # a new shard's files, or a restored one's, cut to size
                mode = "r+b" if self.pending else "wb"
                self.files = tuple(open(self.folder / f"{self.name}{ext}", mode)
                                   for ext in (".bin", ".docs"))  # type: ignore[assignment]
                for handle in self.files:  # type: ignore[union-attr]
                    handle.seek(0, os.SEEK_END)
            self.files[0].write(tokens)  # type: ignore[index]
            self.files[1].write(starts)  # type: ignore[index]
        self.pending += len(tokens)
        self.n_starts += len(starts)

    def _sync(self) -> None:
        for handle in self.files or ():
            handle.flush()
            os.fsync(handle.fileno())

    @property
    def rebuilt(self) -> bool:
        """Every shard asked for in a repair is written."""
        return not self.rebuild

    def _write_shard(self) -> None:
        number, name = len(self.shards), f"{self.split}_{len(self.shards):06d}"
        entry = {"file": f"{name}.bin", "docs": f"{name}.docs", "tokens": self.pending,
                 "documents": self.n_starts, "sha256": self.digests[0].hexdigest(),
                 "docs_sha256": self.digests[1].hexdigest()}  # fmt: skip
        if self.expected is not None:
            known = self.expected[number] if number < len(self.expected) else {}
            if any(known.get(k) != v for k, v in entry.items()):
                raise DataError(
                    f"--out: the inputs no longer give the shards in {self.folder} "
                    f"({entry['file']} differs); prepare them into a new --out"
                )
            entry = known
        if self._writes():
            if self.files is None:  # an empty shard: its files are empty
                self._append(np.zeros(0, self.dtype), np.zeros(0, np.int64))
            self._sync()
            for handle in self.files:  # type: ignore[union-attr]
                handle.close()
            self.files = None
            os.replace(self.folder / f"{self.name}.docs", self.folder / entry["docs"])
            os.replace(self.folder / f"{self.name}.bin", self.folder / entry["file"])
            self.rebuild.discard(number)
        self.shards.append(entry)
        self.written += self.pending
        self.pending = self.n_starts = 0
        self.digests = hashlib.sha256(), hashlib.sha256()

    def close(self) -> None:
        """Write what is left as the split's last (shorter) shard."""
        if self.pending or not self.shards:
            self._write_shard()

    def abandon(self) -> None:
        """Close the pending files without finishing the shard (a stopped run)."""
        for handle in self.files or ():
            handle.close()
        self.files = None

    def save_pending(self) -> dict[str, Any]:
        """Make the shard being filled durable as far as it goes; the state that says how
        much of its pending files counts (with the finished shards)."""
        self._sync()
        return {"shards": self.shards, "written": self.written, "documents": self.documents,
                "pending": self.name, "pending_tokens": self.pending,
                "pending_starts": self.n_starts}  # fmt: skip

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (what :meth:`save_pending` returned; a state without
        counts, from an earlier attnlab, counts its whole pending files)."""
        self.shards, self.written = list(state["shards"]), int(state["written"])
        self.documents = int(state["documents"])
        sizes = {ext: np.dtype(self.dtype).itemsize if ext == ".bin" else 8
                 for ext in (".bin", ".docs")}  # fmt: skip
        paths = {ext: pending_file(self.folder, self.split, state, ext) for ext in sizes}
        have = {ext: p.stat().st_size // sizes[ext] if p.is_file() else 0
                for ext, p in paths.items()}  # fmt: skip
        counts = {".bin": int(state.get("pending_tokens", have[".bin"])),
                  ".docs": int(state.get("pending_starts", have[".docs"]))}  # fmt: skip
        if any(have[ext] < counts[ext] for ext in sizes):
            raise DataError(
                f"--out: the saved progress in {self.folder} ({state['pending']}) is missing or "
                "cut short; prepare into a new --out (or delete that folder)"
            )
        for (ext, path), digest in zip(paths.items(), self.digests, strict=True):
            if not counts[ext] and not counts[".bin"]:
                continue
            mine = self.folder / f"{self.name}{ext}"
            os.replace(path, mine)  # an earlier attnlab named it by the save, not the shard
            os.truncate(mine, counts[ext] * sizes[ext])  # a killed run's later appends go
            with open(mine, "rb") as handle:
                while block := handle.read(1 << 24):
                    digest.update(block)
        self.pending, self.n_starts = counts[".bin"], counts[".docs"]
