"""Documents from a corpus, streamed: what ``attnlab-prepare`` tokenizes.

A source is a text file (plain or ``.gz``), a JSON-lines file (``.jsonl``,
``.jsonl.gz``: a record's ``text`` field is a document), a parquet file (its
``text`` column), a folder written by ``datasets``' ``save_to_disk``, or
``hf:<name>`` (a Hugging Face dataset by name, from the local cache; with
``streaming`` it is read lazily). Globs expand in sorted order.

In text files a document is a whole file, a paragraph (lines up to a blank
line) or a line, as asked. Each document is handed out in *pieces* of at most
``LINES_PER_PIECE`` lines, each piece with whether it ends its document, so a
gigabyte-long file is never held whole; tokenizing piece by piece cuts the
text where ``data=text`` cuts it (at line ends, every 512 lines).

Files are only read. A file that is not UTF-8 names itself and the byte offset.
"""

from __future__ import annotations

import codecs
import glob
import gzip
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.data.files import file_identity, not_utf8
from attnlab.data.hub import is_saved_dataset
from attnlab.errors import DataError

UNITS = ("file", "paragraph", "line")
_LOCAL = "pass local files (text, JSON-lines or parquet) instead"
LINES_PER_PIECE = 512  # as data=text's encode_text
Piece = tuple[str, bool]  # (text, ends its document)


@dataclass(frozen=True)
class Source:
    """One input: a path (file or ``save_to_disk`` folder) or ``hf:<name>``."""

    spec: str
    kind: str  # text | jsonl | parquet | saved | hub

    def identity(self) -> list[Any]:
        """What says the source is unchanged (path, size and mtime of a file)."""
        return [self.spec] if self.kind == "hub" else file_identity(Path(self.spec))


def _kind(path: Path) -> str:
    if path.is_dir():
        if is_saved_dataset(path):
            return "saved"
        raise DataError(
            f"input: {path} is a folder but not a saved Hugging Face dataset; pass its files "
            f"(a glob such as '{path}/*.txt') or a folder written by save_to_disk"
        )
    names = [s for s in path.suffixes if s != ".gz"]
    last = names[-1] if names else ""
    return {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}.get(last, "text")


def expand_sources(specs: list[str], key: str = "input") -> list[Source]:
    """Each spec as sources: ``hf:<name>``, a path, or a glob (sorted); DataError if none."""
    sources: list[Source] = []
    for spec in specs:
        if spec.startswith("hf:"):
            sources.append(Source(spec[3:], "hub"))
            continue
        expanded = os.path.expanduser(spec)
        paths = sorted(glob.glob(expanded, recursive=True)) if glob.has_magic(expanded) else [
            expanded]  # fmt: skip
        paths = [p for p in paths if os.path.exists(p)]
        if not paths:
            raise DataError(f"{key}: no file matches {spec}; check the path or the glob")
        sources.extend(Source(str(Path(p).resolve()), _kind(Path(p))) for p in paths)
    return sources


def _open(path: str) -> Any:
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _lines(path: str, key: str) -> Iterator[str]:
    """The lines of a text file (line ends kept), decoded one by one; a non-UTF-8 byte is
    reported with its offset in the (uncompressed) file."""
    offset = 0
    try:
        with _open(path) as handle:
            for raw in handle:
                bom = len(codecs.BOM_UTF8) if offset == 0 and raw.startswith(codecs.BOM_UTF8) else 0
                try:
                    line = raw[bom:].decode("utf-8")
                except UnicodeDecodeError as e:
                    raise not_utf8(key, path, offset + bom + e.start) from e
                offset += len(raw)
                yield line
    except zlib.error as e:
        raise DataError(f"{key}: {path} is a corrupt gzip file ({e}); compress it again") from e
    except (EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"{key}: cannot read {path} ({type(e).__name__}: {e}); check it") from e


def _pieces(lines: list[str], last: bool) -> Iterator[Piece]:
    for i in range(0, len(lines), LINES_PER_PIECE):
        yield "".join(lines[i : i + LINES_PER_PIECE]), last and i + LINES_PER_PIECE >= len(lines)


def text_documents(path: str, unit: str, key: str) -> Iterator[Piece]:
    """A text file's documents as pieces; empty documents are skipped."""
    if unit == "file":
        pending: list[str] = []
        started = False
        for line in _lines(path, key):
            pending.append(line)
            if len(pending) == 2 * LINES_PER_PIECE:  # keep one piece back to mark the end
                yield "".join(pending[:LINES_PER_PIECE]), False
                del pending[:LINES_PER_PIECE]
                started = True
        if started or any(line.strip() for line in pending):
            yield from _pieces(pending, True)
        return
    if unit == "line":
        for line in _lines(path, key):
            text = line.rstrip("\r\n")
            if text.strip():
                yield text, True
        return
    paragraph: list[str] = []
    for line in _lines(path, key):
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            paragraph[-1] = paragraph[-1].rstrip("\r\n")
            yield from _pieces(paragraph, True)
            paragraph = []
    if paragraph:
        paragraph[-1] = paragraph[-1].rstrip("\r\n")
        yield from _pieces(paragraph, True)


def _record_text(record: Any, field: str, where: str, key: str) -> str | None:
    if not isinstance(record, dict) or field not in record:
        present = list(record) if isinstance(record, dict) else type(record).__name__
        raise DataError(
            f"{key}: {where} has no field {field!r} (present: {present}); "
            "set --text-field to the field holding the text"
        )
    text = record[field]
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # JSON's "\ud800": a lone surrogate, no character
        raise DataError(
            f"{key}: {where} holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is no "
            "UTF-8 character; fix or remove that record"
        ) from e
    return text


def _split_text(text: str) -> Iterator[Piece]:
    lines = text.splitlines(keepends=True)
    if len(lines) <= LINES_PER_PIECE:  # one piece: the text as it is, not joined again
        yield text, True
        return
    yield from _pieces(lines, True)


def jsonl_documents(path: str, field: str, key: str) -> Iterator[Piece]:
    """One document per JSON line's ``field``."""
    for number, line in enumerate(_lines(path, key), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{key}: {path} line {number} is not JSON ({e.msg}); fix or remove that line"
            ) from e
        text = _record_text(record, field, f"{path} line {number}", key)
        if text is not None:
            yield from _split_text(text)


def parquet_documents(path: str, field: str, key: str) -> Iterator[Piece]:
    """One document per row of the parquet file's ``field`` column, read in batches."""
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow's ArrowInvalid and friends
        raise DataError(f"{key}: {path} is not a parquet file ({e}); check the file") from e
    if field not in table.schema_arrow.names:
        raise DataError(
            f"{key}: {path} has no column {field!r} (columns: {table.schema_arrow.names}); "
            "set --text-field to the column holding the text"
        )
    batches = table.iter_batches(batch_size=1024, columns=[field])
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as e:  # a damaged row group: pyarrow's ArrowInvalid, OSError, …
            raise DataError(f"{key}: cannot read {path} ({e}); check the file") from e
        for text in batch.column(0).to_pylist():
            if isinstance(text, str) and text.strip():
                yield from _split_text(text)


def dataset_documents(source: Source, field: str, split: str, streaming: bool, key: str
                      ) -> Iterator[Piece]:  # fmt: skip
    """The rows of a Hugging Face dataset's split: saved to disk, or cached by name."""
    from attnlab.data.hub import hf_split, load_hf_dataset

    if source.kind == "hub" and streaming:
        import datasets

        try:
            ds = datasets.load_dataset(source.spec, split=split, streaming=True)
        except Exception as e:  # offline, unknown name: the user's to fix
            reason = (str(e).splitlines() or [""])[0][:200]
            raise DataError(
                f"{key}: cannot stream the Hugging Face dataset {source.spec!r} "
                f"({type(e).__name__}: {reason}); download it while online or {_LOCAL}"
            ) from e
    else:
        ds = hf_split(load_hf_dataset(source.spec, key=key, instead=_LOCAL), split, "--hf-split")
        if field not in ds.column_names:
            raise DataError(
                f"{key}: no column {field!r} in {source.spec} (columns: {ds.column_names}); "
                "set --text-field to the column holding the text"
            )
    for number, record in enumerate(ds):
        text = _record_text(record, field, f"{source.spec} row {number}", key)
        if text is not None:
            yield from _split_text(text)


def documents(sources: list[Source], unit: str = "line", field: str = "text",
              hf_split_name: str = "train", streaming: bool = False, key: str = "input"
              ) -> Iterator[Piece]:  # fmt: skip
    """Every source's documents in order, as pieces."""
    if unit not in UNITS:
        raise DataError(f"--unit: unknown {unit!r}; choose one of {', '.join(UNITS)}")
    for source in sources:
        if source.kind == "text":
            yield from text_documents(source.spec, unit, key)
        elif source.kind == "jsonl":
            yield from jsonl_documents(source.spec, field, key)
        elif source.kind == "parquet":
            yield from parquet_documents(source.spec, field, key)
        else:
            yield from dataset_documents(source, field, hf_split_name, streaming, key)
