"""Writing one split of a token-shard folder (the format: :mod:`attnlab.data.shards`).

Tokens fill a buffer of one shard; a full buffer is written (temporary file + rename)
with its document starts and checksum. Memory: one shard's tokens and document starts
per split, whatever the corpus size. What is not yet in a shard can be saved beside the
shards (``.pending-*`` files, appended to between shards) so that a stopped preparation
continues from it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.shards import sha256_file, write_atomic
from attnlab.errors import DataError


def _append(path: Path, data: np.ndarray) -> None:
    with open(path, "ab") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


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
        self.buffer = np.empty(0, dtype)  # allocated at the first token (pages as filled)
        self.pending = 0  # tokens in the buffer
        self.starts = np.empty(1024, np.int64)  # where documents start in the buffer
        self.n_starts = 0
        self.shards: list[dict[str, Any]] = []
        self.written = 0  # tokens in finished shards
        self.documents = 0
        self.saved: tuple[str, int, int] | None = None  # pending file, its tokens and starts

    def add(self, ids: np.ndarray, starts: np.ndarray) -> int:
        """Append ``ids`` (separators included), in which documents start at the offsets
        ``starts`` (ascending); returns how many shards it completed."""
        self.documents += len(starts)
        done = 0
        while len(ids):
            if not len(self.buffer):
                self.buffer = np.empty(self.shard_tokens, self.dtype)
            take = min(len(ids), self.shard_tokens - self.pending)
            self.buffer[self.pending : self.pending + take] = ids[:take]
            inside = int(np.searchsorted(starts, take))
            self._keep_starts(starts[:inside] + self.pending)
            self.pending += take
            ids, starts = ids[take:], starts[inside:] - take
            if self.pending == self.shard_tokens:
                self._write_shard()
                done += 1
        return done

    def _keep_starts(self, starts: np.ndarray) -> None:
        need = self.n_starts + len(starts)
        if need > len(self.starts):
            self.starts = np.resize(self.starts, max(need, 2 * len(self.starts)))
        self.starts[self.n_starts : need] = starts
        self.n_starts = need

    @property
    def repairing(self) -> bool:
        return self.expected is not None

    @property
    def rebuilt(self) -> bool:
        """Every shard asked for in a repair is written."""
        return not self.rebuild

    def _write_shard(self) -> None:
        n, number = self.pending, len(self.shards)
        tokens, inside = self.buffer[:n], self.starts[: self.n_starts]
        name = f"{self.split}_{number:06d}"
        bin_path, docs_path = self.folder / f"{name}.bin", self.folder / f"{name}.docs"
        entry = {"file": bin_path.name, "docs": docs_path.name, "tokens": int(n),
                 "documents": len(inside), "sha256": hashlib.sha256(tokens).hexdigest(),
                 "docs_sha256": hashlib.sha256(inside).hexdigest()}  # fmt: skip
        if self.repairing:
            known = self.expected[number] if number < len(self.expected) else None  # type: ignore[index]
            if known is None or any(known.get(k) != v for k, v in entry.items()):
                raise DataError(
                    f"--out: the inputs no longer give the shards in {self.folder} "
                    f"({bin_path.name} differs); prepare them into a new --out"
                )
            entry = known
        if not self.repairing or number in self.rebuild:
            write_atomic(docs_path, inside)
            write_atomic(bin_path, tokens)
            self.rebuild.discard(number)
        self.shards.append(entry)
        self.n_starts = 0
        self.written += n
        self.pending = 0
        self.saved = None  # the next save starts a new pending file

    def close(self) -> None:
        """Write what is left as the split's last (shorter) shard."""
        if self.pending or not self.shards:
            self._write_shard()

    # what a resumed preparation needs: the finished shards and the tokens not yet in one
    def save_pending(self, generation: int) -> dict[str, Any]:
        """Save the tokens not yet in a shard: appended to this shard's pending file, or a
        new one (``generation``) after a shard was written. The saved counts say how much
        of the file is valid, so an append cut short by a kill is harmless."""
        if self.saved is None:
            name = f".pending-{self.split}-{generation}"
            write_atomic(self.folder / f"{name}.bin", self.buffer[: self.pending])
            write_atomic(self.folder / f"{name}.docs", self.starts[: self.n_starts])
        else:
            name, tokens, starts = self.saved
            _append(self.folder / f"{name}.bin", self.buffer[tokens : self.pending])
            _append(self.folder / f"{name}.docs", self.starts[starts : self.n_starts])
        self.saved = (name, self.pending, self.n_starts)
        return {"shards": self.shards, "written": self.written, "documents": self.documents,
                "pending": name, "pending_tokens": self.pending,
                "pending_starts": self.n_starts}  # fmt: skip

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (what :meth:`save_pending` returned)."""
        self.shards, self.written = list(state["shards"]), int(state["written"])
        self.documents = int(state["documents"])
        pending = self.folder / state["pending"]
        count = state.get("pending_tokens", -1), state.get("pending_starts", -1)
        try:
            tokens = np.fromfile(f"{pending}.bin", dtype=self.dtype, count=count[0])
            starts = np.fromfile(f"{pending}.docs", dtype=np.int64, count=count[1])
        except (OSError, ValueError):
            tokens = starts = None
        if tokens is None or starts is None or -1 < count[0] != len(tokens) or (
                -1 < count[1] != len(starts)):  # fmt: skip
            raise DataError(
                f"--out: the saved progress in {self.folder} ({pending.name}) is missing or "
                "cut short; prepare into a new --out (or delete that folder)"
            )
        self.buffer = np.empty(self.shard_tokens, self.dtype)
        self.buffer[: len(tokens)] = tokens
        self.pending = len(tokens)
        self.starts = np.resize(starts, max(1024, 2 * len(starts)))
        self.n_starts = len(starts)
        self.saved = None  # the next save writes a new file: nothing past the counts is kept
