"""attnlab's token-shard folder: what ``attnlab-prepare`` writes and ``data=tokens`` reads.

A folder holds, per split (``train``, ``val``, ``test``), fixed-size shards of
token ids, raw little-endian ``uint16`` (when the vocabulary fits) or ``uint32``
with no header (``np.memmap`` opens them as they are, as nanoGPT's ``train.bin``),
each with a ``.docs`` file beside it (``int64`` offsets in the shard where a
document starts), the tokenizer (``tokenizer.json``) and ``index.json``::

    {"format": "attnlab-tokens", "version": 1, "dtype": "uint16", "vocab_size": 50263,
     "tokenizer": {"file": "tokenizer.json", "kind": "offset", "separator": 2},
     "shard_tokens": 67108864,
     "splits": {"train": {"tokens": …, "documents": …, "shards": [
         {"file": "train_000000.bin", "tokens": …, "documents": …,
          "sha256": "…", "docs_sha256": "…"}, …]}, "val": {…}, "test": {…}},
     "settings": {…}, "command": "attnlab-prepare …"}

Every shard but a split's last holds exactly ``shard_tokens`` tokens; a document
runs on across a shard boundary. Files are written to a temporary name and
renamed, so a shard is whole or absent, and ``index.json`` is written last.
Opening a folder reads ``index.json`` (every field that reading uses checked, by
:func:`check_index`) and maps each shard: O(shards), not O(tokens). The shards' content
is verified once, apart (:mod:`attnlab.data.shard_verification`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlab.errors import DataError
from attnlab.special_tokens import EOS, NUM_SPECIAL

if TYPE_CHECKING:
    import torch

FORMAT = "attnlab-tokens"
VERSION = 1
INDEX = "index.json"
SPLITS = ("train", "val", "test")
AGAIN = "prepare it again with attnlab-prepare into a new --out"  # the fix for a damaged folder


def dtype_for(vocab_size: int) -> str:
    """``uint16`` while every id fits in it, else ``uint32``."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def sha256_file(path: Path, chunk: int = 1 << 24) -> str:
    """The hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes | np.ndarray) -> None:
    """``data`` into ``path`` by way of a temporary file and a rename: whole or absent. An
    array is written from its own memory (contiguous, as a shard's buffer is), no copy."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON into ``path``, atomically."""
    write_atomic(path, (json.dumps(obj, indent=1) + "\n").encode())


def read_json(path: Path) -> Any:
    """``json.loads`` of ``path``'s text, with the garbage collector held off while it parses.

    A file nested thousands deep (``[[[[…``) takes the parser to the recursion limit before
    its RecursionError; a collection that ran there would call unrelated objects'
    finalizers with no stack left, and Python would print "Exception ignored in
    sys.unraisablehook" to stderr beside the one-line error.
    """
    text = path.read_text(encoding="utf-8")
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if was_enabled:
            gc.enable()


def read_index(folder: str | os.PathLike, key: str = "data.path") -> dict[str, Any]:
    """``index.json`` of a prepared folder; DataError naming ``key`` and the fix otherwise."""
    folder = Path(os.path.expanduser(str(folder)))
    path = folder / INDEX
    if not folder.is_dir():
        raise DataError(
            f"{key}: folder not found: {folder}; prepare one with "
            f"`attnlab-prepare <text files> --out {folder}`"
        )
    if not path.is_file():
        state = " (its preparation did not finish: run the same attnlab-prepare again)" if (
            folder / ".prepare-state.json").is_file() else ""  # fmt: skip
        raise DataError(
            f"{key}: {folder} holds no {INDEX}{state}; point {key} at a folder that "
            "attnlab-prepare wrote"
        )
    try:
        index = read_json(path)
    except OSError as e:
        raise DataError(f"{key}: cannot read {path} ({e.strerror or e}); make it readable") from e
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # Recursion: nested too deep
        raise DataError(f"{key}: {path} is not valid JSON ({e}); {AGAIN}") from e
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"{key}: {path} is not an attnlab token index; {AGAIN}")
    if index.get("version") != VERSION:
        raise DataError(
            f"{key}: {path} has format version {index.get('version')}, this attnlab reads "
            f"{VERSION}; prepare the folder again with this attnlab"
        )
    check_index(index, path, key)
    return index


def check_index(index: dict[str, Any], path: Path, key: str = "data.path") -> None:
    """Every field of ``index.json`` that reading the folder uses, checked for its type and
    range (``dtype``, ``vocab_size``, ``tokenizer.file``/``separator``, the splits and their
    shards' ``file``, ``tokens``, ``sha256``); DataError naming the first bad one."""

    def refuse(field: str, value: Any, want: str) -> DataError:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return DataError(f"{key}: {path} has {field} = {shown}, not {want}; {AGAIN}")

    def field(obj: dict[str, Any], name: str, where: str, want: str, ok: Any) -> Any:
        value = obj.get(name, _ABSENT)
        if value is _ABSENT:
            raise DataError(f"{key}: {path} lacks {where}{name}; {AGAIN}")
        if not ok(value):
            raise refuse(where + name, value, want)
        return value

    dtype = field(index, "dtype", "", "uint16 or uint32", lambda v: v in ("uint16", "uint32"))
    top = np.iinfo(dtype).max + 1
    field(index, "vocab_size", "", f"a whole number from {NUM_SPECIAL} to {top}",
          lambda v: _whole(v) and NUM_SPECIAL <= v <= top)  # fmt: skip
    tokenizer = field(index, "tokenizer", "", "an object", lambda v: isinstance(v, dict))
    field(tokenizer, "file", "tokenizer.", "a file name in the folder", _plain_name)
    field(tokenizer, "separator", "tokenizer.", f"{EOS} (<eos>)", lambda v: _whole(v) and v == EOS)
    splits = field(index, "splits", "", "an object", lambda v: isinstance(v, dict))
    for split in splits:
        if split not in SPLITS:
            raise refuse(f"splits.{split}", splits[split], f"a split of {', '.join(SPLITS)}")
    for split in ("train", "val"):
        field(splits, split, "splits.", "an object", lambda v: True)
    for split, info in splits.items():
        where = f"splits.{split}."
        if not isinstance(info, dict):
            raise refuse(where[:-1], info, "an object")
        shards = field(info, "shards", where, "a list of shards",
                       lambda v: isinstance(v, list) and len(v) > 0)  # fmt: skip
        for i, shard in enumerate(shards):
            at = f"{where}shards[{i}]"
            if not isinstance(shard, dict):
                raise refuse(at, shard, "an object")
            field(shard, "file", at + ".", "a file name in the folder", _plain_name)
            field(shard, "tokens", at + ".", "a whole number >= 0", lambda v: _whole(v) and v >= 0)
            field(shard, "sha256", at + ".", "64 hex digits", _sha256)


_ABSENT = object()


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain_name(value: Any) -> bool:
    """A file directly in the folder: no directory part, not ``.`` or ``..``, printable (an
    error naming it stays one line), a name the file system can hold."""
    return (isinstance(value, str) and value not in ("", ".", "..") and value.isprintable()
            and Path(value).name == value and "/" not in value and "\\" not in value
            and len(value.encode("utf-8", "replace")) <= 255)  # fmt: skip


def _sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef"
                                                               for c in value)  # fmt: skip


class ShardedTokens:
    """One split's shards as one read-only token stream.

    ``stream[a:b]`` is a torch ``int64`` tensor of tokens ``a … b-1`` across shard
    boundaries; :meth:`blocks` gathers many equal-length windows at once.
    """

    def __init__(self, folder: Path, index: dict[str, Any], split: str, key: str) -> None:
        self._args = (folder, index, split, key)
        info = index["splits"].get(split) or {"shards": []}
        dtype = np.dtype(index["dtype"])
        self.shards: list[np.ndarray] = []  # each shard's tokens, a read-only np.memmap
        for entry in info["shards"]:
            path = folder / entry["file"]
            expected = int(entry["tokens"]) * dtype.itemsize
            size = path.stat().st_size if path.is_file() else None
            if size != expected:
                what = "missing" if size is None else f"{size} bytes, the index says {expected}"
                raise DataError(
                    f"{key}: shard {path} is {what} (attnlab-prepare writes whole shards "
                    f"only); {AGAIN}"
                )
            try:
                tokens = np.memmap(path, dtype=dtype, mode="r") if expected else np.zeros(0, dtype)
            except OSError as e:
                raise DataError(f"{key}: cannot read shard {path} ({e.strerror or e}); make it "
                                "readable") from e  # fmt: skip
            self.shards.append(tokens)
        sizes = [len(s) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self.n_tokens = int(self.offsets[-1])

    def __len__(self) -> int:
        return self.n_tokens

    # a DataLoader worker started by "spawn" (macOS, Windows) gets a pickled copy: it maps
    # the shards again rather than receiving every token in the pickle
    def __getstate__(self) -> tuple:
        return self._args

    def __setstate__(self, args: tuple) -> None:
        self.__init__(*args)  # type: ignore[misc]

    def _read(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return np.zeros(0, self.shards[0].dtype if self.shards else np.int64)
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        parts, at = [], start
        while at < stop:
            shard = self.shards[first]
            local = at - int(self.offsets[first])
            take = min(stop - at, len(shard) - local)
            parts.append(shard[local : local + take])
            at, first = at + take, first + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __getitem__(self, item: slice) -> torch.Tensor:
        import torch  # here, so that attnlab-prepare (which only writes) never imports it

        start, stop, _ = item.indices(self.n_tokens)
        return torch.from_numpy(self._read(start, max(start, stop)).astype(np.int64))

    def blocks(self, starts: np.ndarray, length: int) -> torch.Tensor:
        """``(len(starts), length)`` int64 tokens, row ``i`` from ``starts[i]``."""
        import torch

        out = np.empty((len(starts), length), dtype=np.int64)
        for row, start in enumerate(starts.tolist()):
            out[row] = self._read(start, start + length)
        return torch.from_numpy(out)


def open_split(folder: str | os.PathLike, split: str, key: str = "data.path") -> ShardedTokens:
    """A split of a prepared folder as a :class:`ShardedTokens` (``index.json`` and the
    shards' sizes checked; their content is verified by ``data=tokens``, see
    :mod:`attnlab.data.shard_verification`)."""
    folder = Path(os.path.expanduser(str(folder)))
    return ShardedTokens(folder, read_index(folder, key), split, key)
