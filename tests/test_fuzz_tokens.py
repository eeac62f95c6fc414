"""Fuzzing ``data=tokens`` folders: ``index.json``'s fields (types, ranges, missing keys,
extra splits, dtypes, vocabulary sizes, shard lists, SHA-256 values, the tokenizer entry)
and the bytes of shards, ``.docs`` files, ``tokenizer.json`` and ``index.json`` itself, in
a copy of a folder that ``attnlab-prepare`` wrote.

The answer is ``attnlab-train``'s, run in this process for two steps: it trains (exit
0), or exits 2 with one ``error:`` line naming the folder — never a traceback, never a
hang — and no file of the folder but attnlab's verification record is changed. Some
draws edit a shard's ids and record its new SHA-256 in ``index.json``, as an edit made on
purpose would, so that what is behind the checksum is fuzzed too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from attnlab.data.shard_verification import RECORD
from fuzzing import DEFAULT, MANY, damage, damaged, one_error_line, time_limit, train_exit
from token_folders import TRAIN_ON, copy_folder, prepared_folder

Path_ = tuple[Any, ...]  # a place in index.json: keys and list positions


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 6,000 character tokens: six training shards of 1,024, one validation shard."""
    return prepared_folder(tmp_path_factory.mktemp("tokens"), lines=120, shard_tokens=1024)


def places(node: Any, at: Path_ = ()) -> list[Path_]:
    """Every place in ``node`` (settings and command whole: data=tokens never reads them)."""
    found = [at] if at else []
    if isinstance(node, dict) and at not in (("settings",),):
        for key, value in node.items():
            found += places(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += places(value, (*at, i))
    return found


FILES = ["train_000000.bin", "train_000004.bin", "val_000000.bin", "train_000000.docs",
         "val_000000.docs", "tokenizer.json", "index.json"]  # fmt: skip
NAMES = ["uint16", "uint32", "uint8", "int64", "float32", "<u2", ">u4", "", ".", "..",
         "train_000000.bin", "val_000000.bin", "train_000000.docs", "tokenizer.json",
         "index.json", "../text.txt", "/etc/hostname", "a/b", "a\nb", "\ud800", "0" * 64,
         "F" * 64, "x" * 300, "char", "bpe", "offset", "train", "val", "test",
         "extra"]  # fmt: skip
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 70_000), st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2, 6, 7, 23, 24, 25, 65_535, 65_536, 65_537, 2**32, 2**32 + 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(NAMES), st.lists(st.integers(-1, 5), max_size=3),
    st.dictionaries(st.sampled_from(["file", "tokens", "sha256", "shards"]),
                    st.integers(0, 4096), max_size=3),
)  # fmt: skip


# index.json replaced by JSON that a byte flip does not make: (what it is: its text)
ODD_JSON = {
    "nested too deep": "[" * 100_000 + "]" * 100_000,
    "an integer of 5000 digits": '{"format": "attnlab-tokens", "version": 1' + "0" * 5000 + "}",
    "NaN and Infinity": '{"format": "attnlab-tokens", "version": 1, "dtype": "uint16", '
                        '"vocab_size": NaN, "tokenizer": Infinity}',
    "a byte order mark": '\ufeff{"format": "attnlab-tokens", "version": 1}',
    "a list": '["attnlab-tokens", 1]', "null": "null", "empty": "",
}


@st.composite
def edits(draw: st.DrawFn, folder: Path) -> list[tuple]:
    """One to three edits of ``folder``: of index.json's fields, of a file's bytes, or of a
    shard's ids with its SHA-256 put right."""
    where = st.sampled_from(places(json.loads((folder / "index.json").read_text())))
    edit = st.one_of(
        st.tuples(st.just("set"), where, VALUES),
        st.tuples(st.just("copy"), where, where),
        st.tuples(st.just("delete"), where),
        st.tuples(st.just("add"), st.sampled_from([("splits",), ("tokenizer",), ()]),
                  st.sampled_from(["extra", "test", "val", "file", "dtype"]), VALUES),
        st.tuples(st.just("bytes"), st.sampled_from(FILES), damage(4096)),
        st.tuples(st.just("index"), st.sampled_from(sorted(ODD_JSON))),
        st.tuples(st.just("ids"), st.sampled_from(["train_000001.bin", "val_000000.bin"]),
                  st.integers(0, 70_000), st.integers(1, 500)),
    )  # fmt: skip
    return draw(st.lists(edit, min_size=1, max_size=3))


_MISSING = object()


def _child(node: Any, key: Any) -> Any:
    if isinstance(node, dict) and key in node:
        return node[key]
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        return node[key]
    return _MISSING


def _value(index: Any, at: Path_) -> Any:
    """What is at place ``at`` of ``index`` (_MISSING where an earlier edit removed it)."""
    for key in at:
        index = _child(index, key)
    return index


def apply(folder: Path, edit: tuple) -> None:
    """One edit of ``folder``; an edit of a place that an earlier one removed does nothing."""
    path = folder / "index.json"
    kind = edit[0]
    if kind == "bytes":
        target = folder / edit[1]
        target.write_bytes(damaged(target.read_bytes(), edit[2]))
        return
    if kind == "index":
        path.write_text(ODD_JSON[edit[1]], encoding="utf-8")
        return
    try:
        index = json.loads(path.read_text())
    except (ValueError, RecursionError):
        return  # an earlier edit left index.json no JSON object to edit
    if kind == "ids":
        ids_edit(folder, index, *edit[1:])
    elif kind == "add":
        if isinstance(parent := _value(index, edit[1]), dict):
            parent[edit[2]] = edit[3]
    elif _value(index, edit[1]) is not _MISSING:
        container, key = _value(index, edit[1][:-1]), edit[1][-1]
        if kind == "delete":
            container.pop(key)
        elif kind == "set":
            container[key] = edit[2]
        elif (value := _value(index, edit[2])) is not _MISSING:
            container[key] = copy.deepcopy(value)
    path.write_text(json.dumps(index))


def ids_edit(folder: Path, index: Any, name: str, value: int, every: int) -> None:
    """Every ``every``-th id of shard ``name`` set to ``value``, its new SHA-256 recorded."""
    shard = folder / name
    tokens = np.fromfile(shard, dtype=np.uint16)
    tokens[::every] = value % 2**16
    tokens.tofile(shard)
    sha = hashlib.sha256(shard.read_bytes()).hexdigest()
    splits = _value(index, ("splits",))
    for split in splits.values() if isinstance(splits, dict) else []:
        shards = _value(split, ("shards",))
        for entry in shards if isinstance(shards, list) else []:
            if isinstance(entry, dict) and entry.get("file") == name:
                entry["sha256"] = sha


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name != RECORD}


def judge(prepared: Path, tmp: Path, changes: list[tuple]) -> str:
    """Apply ``changes`` to a copy of the folder and train on it: exit 0, or exit 2 with one
    error line naming the folder; the folder's files as they were. Returns the outcome, for
    the statistics (``--hypothesis-show-statistics``)."""
    folder = copy_folder(prepared, tmp / "shards")
    for change in changes:
        apply(folder, change)
    before = contents(folder)
    run_dir = Path(tempfile.mkdtemp(prefix="fuzz_tokens_"))
    try:
        with time_limit(60):
            code, printed = train_exit([*TRAIN_ON, f"data.path={folder}",
                                        f"hydra.run.dir={run_dir / 'run'}"])  # fmt: skip
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    assert contents(folder) == before
    if code == 0:
        return "trained"
    assert code == 2, printed[-3000:]
    line = one_error_line(printed)
    assert str(folder) in line, line
    return "refused: " + re.sub(r"\d+", "N", line.replace(str(folder), "F").split(";")[0])[:90]


# shrunk examples the fuzzer found, kept as regression cases
FOUND: list[list[tuple]] = [
    [("index", "nested too deep")],  # RecursionError from json.loads: a traceback
]


def test_the_intact_folder_trains(prepared: Path, tmp_path: Path) -> None:
    """The baseline: no edit, exit 0."""
    assert judge(prepared, tmp_path, []) == "trained"


@settings(DEFAULT, max_examples=12)
@given(data=st.data())
def test_an_edited_folder_trains_or_is_refused_in_one_line(
    prepared: Path, tmp_path: Path, data: st.DataObject
) -> None:
    event(judge(prepared, tmp_path, data.draw(edits(prepared))))


@pytest.mark.parametrize("changes", FOUND)
def test_folders_the_fuzzer_found(prepared: Path, tmp_path: Path, changes: list[tuple]) -> None:
    judge(prepared, tmp_path, changes)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_many_edited_folders(prepared: Path, tmp_path: Path, data: st.DataObject) -> None:
    event(judge(prepared, tmp_path, data.draw(edits(prepared))))
