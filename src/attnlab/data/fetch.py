"""Fetching a data set into the data folder: downloaded, checked, written whole or not at all.

A file is written to a hidden temporary name beside its destination, synced and renamed,
so an interrupted or refused fetch leaves nothing. A file already there is checked first
(its SHA-256, or its row count) and kept: the same file is not fetched again, and a
different one is never overwritten (the fetch stops before it downloads anything).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from attnlab.data.paths import DATA_ROOT_ENV
from attnlab.data.shards import sha256_file
from attnlab.data.sources import DataSet, HubSource, HubSplit, PublishedFile
from attnlab.errors import DataError

CHUNK = 1 << 20
TIMEOUT_S = 60


def mirror_url(mirror: str) -> str:
    """``mirror`` as a URL: a folder (or a path) becomes a ``file://`` URL."""
    if urllib.parse.urlparse(mirror).scheme in ("http", "https", "file"):
        return mirror.rstrip("/")
    return Path(os.path.expanduser(mirror)).resolve().as_uri()


def _differs(path: Path, name: str, what: str) -> DataError:
    return DataError(
        f"{path} exists and is not {what}; it was kept: move or delete it, then run "
        f"`attnlab-data {name}` again (or point {DATA_ROOT_ENV} / --root at another folder)"
    )


def make_folder(folder: Path) -> None:
    """``folder`` and its parents, made if missing; DataError when a file stands in the way
    or the folder cannot be written (before anything is downloaded into it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()),
                        folder)  # fmt: skip
        raise DataError(
            f"cannot make the folder {folder}: {blocking} is not a folder; move it, or choose "
            f"another data folder (--root or {DATA_ROOT_ENV})"
        ) from e
    except PermissionError as e:
        raise _unwritable(folder) from e
    except OSError as e:  # a read-only or virtual file system, a full disk
        raise DataError(f"cannot make the folder {folder} ({e.strerror or e}); choose another "
                        f"data folder (--root or {DATA_ROOT_ENV})") from e  # fmt: skip
    if not os.access(folder, os.W_OK):
        raise _unwritable(folder)


def _unwritable(folder: Path) -> DataError:
    existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
    return DataError(f"cannot write into {existing} (permission denied); choose a writable "
                     f"data folder (--root or {DATA_ROOT_ENV})")  # fmt: skip


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[IO[bytes]]:
    """A temporary file beside ``path``, synced and renamed to it when the block ends
    without an exception, removed otherwise (an interrupt too)."""
    make_folder(path.parent)
    for stale in path.parent.glob(f".{path.name}.*.part"):  # left by a killed fetch
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # the rename itself, on file systems that allow it
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
    finally:
        tmp.unlink(missing_ok=True)


# -- published files ------------------------------------------------------------------------
def _network_error(url: str, error: BaseException, path: Path) -> DataError:
    reason = getattr(error, "reason", None) or error
    return DataError(
        f"cannot download {url} ({type(error).__name__}: {reason}); check your connection "
        f"and run the command again, or download the file by hand to {path}"
    )


def _download(url: str, handle: IO[bytes], path: Path) -> str:
    """``url`` into ``handle``; its SHA-256. A failed connection or read: DataError."""
    digest = hashlib.sha256()
    try:
        response = urllib.request.urlopen(url, timeout=TIMEOUT_S)  # noqa: S310 (a known URL)
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise _network_error(url, e, path) from e
    with response:
        while True:
            try:
                block = response.read(CHUNK)
            except (OSError, http.client.HTTPException) as e:
                raise _network_error(url, e, path) from e
            if not block:
                return digest.hexdigest()
            digest.update(block)
            handle.write(block)


def fetch_published(data_set: DataSet, root: Path, mirror: str | None = None) -> list[str]:
    """Every published file of ``data_set`` into ``root``; the paths it fetched (none when
    all were there and verified). From ``mirror`` (a URL or folder in the data folder's
    layout) instead of the published URLs when given."""
    missing: list[PublishedFile] = []
    for published in data_set.files:
        path = root / published.path
        if not path.exists():
            missing.append(published)
        elif not path.is_file() or sha256_file(path) != published.sha256:
            raise _differs(path, data_set.name, f"the published file (SHA-256 "
                           f"{published.sha256[:16]}…, {published.size:,} bytes)")  # fmt: skip
    for folder in {(root / f.path).parent for f in missing}:
        make_folder(folder)
    for published in missing:
        path = root / published.path
        url = f"{mirror_url(mirror)}/{published.path}" if mirror else published.url
        with atomic_file(path) as handle:
            digest = _download(url, handle, path)
            if digest != published.sha256:
                raise DataError(
                    f"{url} gave a file whose SHA-256 is {digest[:16]}…, not the published "
                    f"{published.sha256[:16]}…; nothing was written: run the command again "
                    "(a download cut short), or check the source"
                )
    return [f.path for f in missing]


# -- Hugging Face datasets ------------------------------------------------------------------
def count_records(path: Path, form: str) -> int:
    """Lines of a written split (its rows), less the header of a TSV."""
    lines = 0
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            lines += block.count(b"\n")
    return lines - 1 if form == "tsv" else lines


def _lines(form: str, batch: dict[str, list[Any]]) -> str:
    if form == "tsv":  # GLUE's SST-2 sentences end in a space; the presets read label first
        return "".join(f"{label}\t{sentence.strip()}\n"
                       for label, sentence in zip(batch["label"], batch["sentence"], strict=True))
    if form == "text":  # a row is a line of the original file (blank lines are empty rows)
        return "".join(t if t.endswith("\n") else t + "\n" for t in batch["text"])
    return "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n"
                   for i, t in zip(batch["id"], batch["text"], strict=True))  # fmt: skip


def _hub_error(
    source: HubSource, where: str, error: BaseException, mirror: str | None
) -> DataError:
    reason = (str(error).splitlines() or [""])[0][:200]
    fix = (f"check that {where} is a copy of the dataset's repository" if mirror else
           "check your connection, or set HF_ENDPOINT to a Hub mirror, or pass --mirror "
           f"FOLDER holding a copy of {source.repo}")  # fmt: skip
    return DataError(f"cannot load {where} ({source.config}) with datasets "
                     f"({type(error).__name__}: {reason}); {fix}")  # fmt: skip


def _load_split(source: HubSource, split: HubSplit, mirror: str | None, documents: int) -> Any:
    """The split, from the Hub or ``mirror/<repo>``; a sample's first ``documents`` rows."""
    import datasets

    where = str(Path(mirror, source.repo)) if mirror else source.repo
    try:
        rows = datasets.load_dataset(where, source.config, split=split.split,
                                     streaming=source.streaming)  # fmt: skip
    except Exception as e:  # offline, unknown repo or config: one line, the fix
        raise _hub_error(source, where, e, mirror) from e
    if split.rows is None:
        return rows.take(documents)
    if rows.num_rows != split.rows:
        raise DataError(
            f"{where} ({source.config}) has {rows.num_rows:,} {split.split} rows, not the "
            f"published {split.rows:,}; nothing was written: the dataset changed (check "
            "--mirror, or report it)"
        )
    return rows


def _batches(rows: Any, source: HubSource, mirror: str | None) -> Iterator[dict[str, list]]:
    """The rows in batches; a failed read (a dropped connection) is DataError."""
    where = str(Path(mirror, source.repo)) if mirror else source.repo
    iterator = iter(rows.iter(batch_size=1000))
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (OSError, ValueError) as e:
            raise _hub_error(source, where, e, mirror) from e
        yield batch


def fetch_hub(data_set: DataSet, root: Path, mirror: str | None = None,
              documents: int | None = None) -> list[str]:  # fmt: skip
    """Each split of ``data_set``'s Hugging Face dataset, written into ``root``; the paths it
    wrote (none when all were there with their row counts). ``mirror``: a folder holding a
    copy of the dataset's repository at ``mirror/<repo>``."""
    source = data_set.hub
    assert source is not None
    documents = documents or 0
    missing: list[HubSplit] = []
    for split in source.splits:
        path = root / split.path.format(documents=documents)
        rows = documents if split.rows is None else split.rows
        if not path.exists():
            missing.append(split)
        elif not path.is_file() or count_records(path, source.form) != rows:
            raise _differs(path, data_set.name, f"{source.repo}'s {split.split} split "
                           f"({rows:,} rows)")  # fmt: skip
    for folder in {(root / s.path).parent for s in missing}:
        make_folder(folder)
    for split in missing:
        path = root / split.path.format(documents=documents)
        rows = _load_split(source, split, mirror, documents)
        expected = documents if split.rows is None else split.rows
        with atomic_file(path) as handle:
            written = 0
            if source.form == "tsv":
                handle.write(b"label\tsentence\n")
            for batch in _batches(rows, source, mirror):
                handle.write(_lines(source.form, batch).encode("utf-8"))
                written += len(next(iter(batch.values())))
            handle.flush()
            if written != expected or count_records(Path(handle.name), source.form) != expected:
                raise DataError(
                    f"{source.repo} ({source.config}) gave {written:,} {split.split} rows, "
                    f"expected {expected:,}; nothing was written: the dataset holds fewer "
                    "(ask for fewer --documents) or a row spans lines"
                )
    return [s.path.format(documents=documents) for s in missing]
