"""data=tokens trusts nothing in a token folder it has not checked: a damaged or edited
``index.json``, shard or tokenizer is one ``error:`` line naming the file and exit code 2;
each shard's SHA-256 and largest id are verified once and remembered, and a changed shard
is verified again."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attnlab.data import shard_verification
from attnlab.data.shard_verification import RECORD
from attnlab.data.tokens import TokensDataModule
from attnlab.errors import DataError
from cli_runs import run
from fuzzing import one_error_line, train_exit
from token_folders import TRAIN_ON, copy_folder, edit_index, prepared_folder

HOUR_NS = 3600 * 10**9


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_folder(tmp_path_factory.mktemp("tokens"), lines=200, shard_tokens=2048)


def shard(folder: Path, n: int = 1) -> Path:
    return folder / f"train_{n:06d}.bin"


def rewrite_shard(folder: Path, ids: int, fix_sha: bool) -> None:
    """Every 50th id of the second training shard set to ``ids`` (the file keeps its size);
    ``fix_sha``: index.json records the new SHA-256, as an edit made on purpose would."""
    path = shard(folder)
    tokens = np.fromfile(path, dtype=np.uint16)
    tokens[::50] = ids
    tokens.tofile(path)
    if fix_sha:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        edit_index(folder, lambda i: i["splits"]["train"]["shards"][1].update(sha256=sha))


def shrink_vocabulary(folder: Path) -> None:
    """index.json and tokenizer.json agree on a vocabulary of 8, below the shards' ids."""
    import json

    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["chars"] = tokenizer["chars"][:2]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    edit_index(folder, lambda i: i.update(vocab_size=8))


def listed_twice(index: dict) -> None:
    """The second training shard also in val, its training entry's SHA-256 wrong."""
    entry = index["splits"]["train"]["shards"][1]
    index["splits"]["val"]["shards"].append(dict(entry))
    entry["sha256"] = "0" * 64


def in_index(change: Callable[[dict], None]) -> Callable[[Path], None]:
    return lambda folder: edit_index(folder, change)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "a shard edited": (lambda f: rewrite_shard(f, 7, fix_sha=False),
                       "train_000001.bin does not match its SHA-256"),
    "ids beyond the vocabulary": (lambda f: rewrite_shard(f, 60_000, fix_sha=True),
                                  "train_000001.bin holds token id 60000"),
    "a vocabulary smaller than the ids": (shrink_vocabulary, "holds token id"),
    "a vocabulary unlike the tokenizer's": (in_index(lambda i: i.update(vocab_size=10)),
                                            "tokenizer.json holds a vocabulary of"),
    "an unknown dtype": (in_index(lambda i: i.update(dtype="float7")), "dtype = 'float7'"),
    "no val split": (in_index(lambda i: i["splits"].pop("val")), "lacks splits.val"),
    "an unknown split": (in_index(lambda i: i["splits"].update(extra=i["splits"]["val"])),
                         "splits.extra"),
    "a tokenizer outside the folder": (
        in_index(lambda i: i["tokenizer"].update(file="../text.txt")), "tokenizer.file"),
    "a shard outside the folder": (
        in_index(lambda i: i["splits"]["val"]["shards"][0].update(file="/etc/hostname")),
        "splits.val.shards[0].file"),
    "a shard name too long for a file system": (
        in_index(lambda i: i["splits"]["val"]["shards"][0].update(file="x" * 300)),
        "splits.val.shards[0].file"),
    "a shard name across two lines": (
        in_index(lambda i: i["splits"]["val"]["shards"][0].update(file="val\n000000.bin")),
        "splits.val.shards[0].file"),
    "a count as text": (
        in_index(lambda i: i["splits"]["train"]["shards"][0].update(tokens="2048")),
        "splits.train.shards[0].tokens"),
    "a SHA-256 that is not one": (
        in_index(lambda i: i["splits"]["train"]["shards"][0].update(sha256=None)),
        "splits.train.shards[0].sha256"),
    "index.json nested too deep": (
        lambda f: (f / "index.json").write_text("[" * 100_000), "index.json is not valid JSON"),
    "no tokenizer file": (lambda f: (f / "tokenizer.json").unlink(), "lacks tokenizer.json"),
    "a shard listed twice, once with a wrong SHA-256": (
        in_index(listed_twice), "train_000001.bin does not match its SHA-256"),
}  # fmt: skip


@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_folder_is_one_error_line_naming_it_with_exit_2(
    prepared: Path, tmp_path: Path, case: str
) -> None:
    damage, expect = DAMAGE[case]
    folder = copy_folder(prepared, tmp_path / "shards")
    damage(folder)
    code, printed = train_exit([*TRAIN_ON, f"data.path={folder}",
                                f"hydra.run.dir={tmp_path / 'run'}"])  # fmt: skip
    assert code == 2, printed[-3000:]
    line = one_error_line(printed)
    assert expect in line and str(folder) in line, line


def test_ids_beyond_the_vocabulary_are_refused_by_the_command(prepared: Path,
                                                              tmp_path: Path) -> None:  # fmt: skip
    """As a user meets it: attnlab-train in its own process, one line on stderr."""
    folder = copy_folder(prepared, tmp_path / "shards")
    rewrite_shard(folder, 60_000, fix_sha=True)
    done = run("train", *TRAIN_ON, f"data.path={folder}", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: data.path: shard "), lines
    assert "holds token id 60000" in lines[0]


@pytest.fixture
def an_hour_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checks run an hour after the folder was written (as a folder prepared before today's
    runs): its shards are settled, and what is verified is remembered."""
    later = time.time_ns() + HOUR_NS
    monkeypatch.setattr(shard_verification, "now_ns", lambda: later)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shards read for verification, by file name."""
    read: list[str] = []
    real = shard_verification.scan

    def counted(path: Path, dtype: str) -> tuple[str, int]:
        read.append(path.name)
        return real(path, dtype)

    monkeypatch.setattr(shard_verification, "scan", counted)
    return read


def setup(folder: Path) -> TokensDataModule:
    data = TokensDataModule(path=str(folder), block_size=32)
    data.setup()
    return data


@pytest.mark.usefixtures("an_hour_later")
def test_a_verified_folder_is_not_read_again(prepared: Path, tmp_path: Path,
                                             scans: list[str]) -> None:  # fmt: skip
    folder = copy_folder(prepared, tmp_path / "shards")
    setup(folder)
    assert sorted(scans) == sorted(p.name for p in folder.glob("*.bin"))
    assert (folder / RECORD).is_file()
    scans.clear()
    setup(folder)
    assert scans == []


@pytest.mark.usefixtures("an_hour_later")
@pytest.mark.parametrize("how", ["edited", "edited, its mtime put back", "replaced"])
def test_a_changed_shard_is_verified_again(prepared: Path, tmp_path: Path, scans: list[str],
                                           how: str) -> None:  # fmt: skip
    folder = copy_folder(prepared, tmp_path / "shards")
    setup(folder)
    path = shard(folder)
    before = path.stat()
    if how == "replaced":  # another file renamed over it (as an atomic write does)
        (folder / "other.bin").write_bytes(path.read_bytes()[::-1])
        os.replace(folder / "other.bin", path)
    else:
        rewrite_shard(folder, 7, fix_sha=False)
    if how != "edited":
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    scans.clear()
    with pytest.raises(DataError, match="train_000001.bin does not match its SHA-256"):
        setup(folder)
    assert scans == ["train_000001.bin"]


@pytest.mark.usefixtures("an_hour_later")
def test_an_edited_index_is_checked_against_what_was_remembered(
    prepared: Path, tmp_path: Path
) -> None:
    folder = copy_folder(prepared, tmp_path / "shards")
    setup(folder)
    shrink_vocabulary(folder)
    with pytest.raises(DataError, match="holds token id"):
        setup(folder)
    edit_index(folder, lambda i: i["splits"]["train"]["shards"][1].update(sha256="0" * 64))
    with pytest.raises(DataError, match="train_000001.bin does not match its SHA-256"):
        setup(folder)


def test_a_just_written_shard_is_verified_but_not_remembered(prepared: Path, tmp_path: Path,
                                                             scans: list[str]) -> None:  # fmt: skip
    """Within the file system's timestamp resolution, a write could leave the times as
    they were: a shard younger than a few seconds is read again next time."""
    folder = copy_folder(prepared, tmp_path / "shards")  # a copy: its files are new
    setup(folder)
    setup(folder)
    assert not (folder / RECORD).exists()
    assert len(scans) == 2 * len(list(folder.glob("*.bin")))


@pytest.mark.usefixtures("an_hour_later")
def test_a_folder_that_cannot_be_written_is_verified_without_a_record(
    prepared: Path, tmp_path: Path, scans: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    def refused(path: Path, obj: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(shard_verification, "write_json_atomic", refused)
    folder = copy_folder(prepared, tmp_path / "shards")
    setup(folder)
    setup(folder)
    assert not (folder / RECORD).exists()
    assert len(scans) == 2 * len(list(folder.glob("*.bin")))


@pytest.mark.usefixtures("an_hour_later")
@pytest.mark.parametrize("found", [b"my notes\n", b'{"format": "something else"}'])
def test_a_file_named_as_the_record_that_is_not_attnlabs_is_left_alone(
    prepared: Path, tmp_path: Path, found: bytes
) -> None:
    folder = copy_folder(prepared, tmp_path / "shards")
    (folder / RECORD).write_bytes(found)
    setup(folder)
    assert (folder / RECORD).read_bytes() == found


def test_a_json_file_is_parsed_with_no_garbage_collection_inside_the_parser(
    tmp_path: Path,
) -> None:
    """A collection inside the parser of a file nested near the recursion limit would run
    other objects' finalizers with no stack left: Python then prints "Exception ignored in
    sys.unraisablehook" beside the one error line."""
    import gc
    import json

    from attnlab.data.shards import read_json

    path = tmp_path / "index.json"
    path.write_text(json.dumps([[i] for i in range(100_000)]))  # allocations enough to collect
    collections: list[str] = []

    def seen(phase: str, info: dict) -> None:
        collections.append(phase)

    gc.collect()
    gc.callbacks.append(seen)
    try:
        assert len(read_json(path)) == 100_000
    finally:
        gc.callbacks.remove(seen)
    assert collections == [] and gc.isenabled()
