"""A token folder's shards checked against ``index.json`` once, and remembered.

Each shard is read once, in chunks, for its SHA-256 (compared with the one
``attnlab-prepare`` recorded) and its largest token id (which must lie below
``vocab_size``): one pass at the disk's speed, a few shards at a time. What was found is
remembered in ``.attnlab-verified.json`` in the folder, per shard with the file's size,
modification and change times (ns) and inode: a later run re-reads only a shard whose
file changed, or whose recorded SHA-256 in ``index.json`` changed. (The change time is
set by every write and cannot be set back by a user, as the modification time can.) A
shard changed in the last few seconds is verified but not remembered: a write within
the file system's timestamp resolution could leave its times as they were.

The record is attnlab's own file: it is replaced only when it holds attnlab's record,
never when a file of that name is something else; in a folder that cannot be written the
shards are verified on every run (a note says so).
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.shards import AGAIN, read_json, write_json_atomic
from attnlab.errors import DataError

RECORD = ".attnlab-verified.json"
RECORD_FORMAT = "attnlab-verified"
SETTLED_NS = 2_000_000_000  # a shard changed this long before its check is remembered
now_ns = time.time_ns
CHUNK = 1 << 23  # ids a step


def file_state(path: Path) -> list[int]:
    """What a change to the file changes: size, mtime and ctime (ns), inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def scan(path: Path, dtype: str) -> tuple[str, int]:
    """(SHA-256, largest id or -1 when empty) of a shard, read once in chunks."""
    digest, top = hashlib.sha256(), -1
    try:
        tokens = np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else []
    except OSError as e:
        raise DataError(f"cannot read shard {path} ({e.strerror or e}); make it readable") from e
    for start in range(0, len(tokens), CHUNK):
        part = tokens[start : start + CHUNK]
        digest.update(part)
        top = max(top, int(part.max()))
    return digest.hexdigest(), top


def read_record(folder: Path) -> tuple[dict[str, Any], bool]:
    """(the remembered shards, whether the record may be written): a missing record is
    empty and writable; a file of that name that is not attnlab's record is left alone."""
    path = folder / RECORD
    if not path.exists():
        return {}, True
    try:
        record = read_json(path)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}, False
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        return {}, False
    shards = record.get("shards")
    return (shards if isinstance(shards, dict) else {}), True


def verify_shards(folder: Path, index: dict[str, Any], splits: list[str],
                  key: str = "data.path") -> None:  # fmt: skip
    """Check every shard of ``splits`` (whose sizes were checked) against ``index``: its
    SHA-256, and its ids below ``vocab_size``; DataError naming the first bad shard."""
    record, writable = read_record(folder)
    entries = [entry for split in splits for entry in index["splits"][split]["shards"]]
    indexed: dict[str, set[str]] = {}  # file name: the SHA-256 the index gives it (one, or a lie)
    for entry in entries:
        indexed.setdefault(entry["file"], set()).add(entry["sha256"])
    found: dict[str, tuple[str, int]] = {}  # file name: (SHA-256, largest id)
    todo: dict[str, list[int]] = {}  # the files to read, with their state
    for name, shas in indexed.items():
        state = file_state(folder / name)
        seen = record.get(name)
        if (isinstance(seen, dict) and seen.get("state") == state and
                {seen.get("sha256")} == shas and isinstance(seen.get("max_id"), int)):  # fmt: skip
            found[name] = (seen["sha256"], seen["max_id"])
        else:
            todo[name] = state
    size = sum(state[0] for state in todo.values())
    note(size, f"{key}: verifying {len(todo)} shards ({size / 1e9:.1f} GB) of {folder}: "
               "their SHA-256 and token ids")  # fmt: skip
    started = now_ns()
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # hashlib, numpy: no GIL
        read = pool.map(lambda name: scan(folder / name, index["dtype"]), todo)
        found |= zip(todo, read, strict=True)
    for entry in entries:  # a changed file first: what it holds is then beside the point
        if found[entry["file"]][0] != entry["sha256"]:
            raise DataError(f"{key}: shard {folder / entry['file']} does not match its SHA-256 "
                            f"in index.json (it changed after attnlab-prepare wrote it); {AGAIN}")
    for name, (_, top) in found.items():
        if top >= index["vocab_size"]:
            raise DataError(f"{key}: shard {folder / name} holds token id {top}, but "
                            f"index.json's vocab_size is {index['vocab_size']}; {AGAIN}")
    # remembered: a shard unchanged while it was read, and changed long enough ago
    fresh = {name: {"state": state, "sha256": found[name][0], "max_id": found[name][1]}
             for name, state in todo.items()
             if state == file_state(folder / name) and started - max(state[1:3]) > SETTLED_NS}
    if fresh:
        remember(folder, index, record, fresh, writable, size)


def note(size: int, message: str) -> None:
    """Print ``message`` when ``size`` bytes take a while to read (once, on local rank 0)."""
    if size > 1 << 28 and os.environ.get("LOCAL_RANK", "0") == "0":
        print(message, flush=True)


def remember(folder: Path, index: dict[str, Any], record: dict[str, Any],
             fresh: dict[str, dict[str, Any]], writable: bool, size: int) -> None:  # fmt: skip
    """Write the record: what it remembered of shards still in the index, and ``fresh``."""
    named = {s["file"] for info in index["splits"].values() for s in info["shards"]}
    shards = {name: seen for name, seen in record.items() if name in named} | fresh
    why = f"{folder / RECORD} is not attnlab's record (left as it is)"
    if writable:
        try:
            write_json_atomic(folder / RECORD, {"format": RECORD_FORMAT, "version": 1,
                                                "shards": shards})  # fmt: skip
            return
        except OSError as e:
            why = f"{folder} cannot be written ({e.strerror or type(e).__name__})"
    note(size, f"note: {why}: its shards were verified without remembering it, and will be "
               "again on every run")  # fmt: skip
