"""Reading user data files, with one-line ``DataError`` messages that name the file and the fix.

Files are only ever read: nothing here writes, moves or deletes user data.
Plain and ``.gz`` files are accepted everywhere.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from attnlab.data.paths import DATA_ROOT_ENV, data_root
from attnlab.data.sources import set_holding
from attnlab.errors import DataError


def _root_hint(path: Path) -> str:
    """For a path in the data folder: where else the data folder can be."""
    root = os.path.abspath(data_root())
    if os.path.commonpath([root, os.path.abspath(path)]) != root:
        return ""
    return f" (or set {DATA_ROOT_ENV} to the folder that holds it)"


def existing_file(path: str | os.PathLike | None, key: str) -> Path:
    """``path`` as a Path, or DataError naming ``key`` when it is unset or missing."""
    if path is None or str(path) == "":
        raise DataError(f"{key} is not set; point {key} at a data file")
    p = Path(os.path.expanduser(str(path)))
    if not p.is_file():
        name = set_holding(p, data_root())
        if name is not None:  # a preset's file: the command that fetches it
            raise DataError(
                f"{key}: file not found: {p}; fetch it with: attnlab-data {name} (or set "
                f"{DATA_ROOT_ENV} to the folder that holds it, or {key}=/path/to/your/file)"
            )
        raise DataError(f"{key}: file not found: {p}; set {key}=/path/to/your/file"
                        f"{_root_hint(p)}")  # fmt: skip
    return p


def existing_dir(path: str | os.PathLike | None, key: str) -> Path:
    """``path`` as a Path, or DataError naming ``key`` when it is unset or not a folder."""
    if path is None or str(path) == "":
        raise DataError(f"{key} is not set; point {key} at a folder")
    p = Path(os.path.expanduser(str(path)))
    if not p.is_dir():
        what = "is a file, not a folder" if p.is_file() else "folder not found"
        raise DataError(f"{key}: {what}: {p}; set {key}=/path/to/your/folder{_root_hint(p)}")
    return p


def file_identity(path: Path) -> list:
    """What says a file is unchanged for caching: resolved path, size and mtime."""
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def not_utf8(key: str, path: Path | str, offset: int) -> DataError:
    """The error for a file that is not UTF-8: where the bad byte is, and the fix."""
    return DataError(
        f"{key}: {path} is not UTF-8 text (bad byte at offset {offset}); "
        f"convert it, e.g. `iconv -f latin1 -t utf-8`"
    )


def read_text(path: Path, key: str) -> str:
    """The whole file as UTF-8 text; DataError if it is not UTF-8 or holds no text."""
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    except zlib.error as e:  # a .gz whose compressed stream is damaged past its header
        raise DataError(
            f"{key}: {path} is a corrupt gzip file ({e}); download or compress it again"
        ) from e
    except (OSError, EOFError) as e:  # unreadable, or a .gz cut short or not gzip at all
        raise DataError(
            f"{key}: cannot read {path} ({type(e).__name__}: {e}); check the file"
        ) from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_utf8(key, path, e.start) from e
    if not text.strip():
        raise DataError(f"{key}: {path} is empty; point {key} at a file with text")
    return text


def read_lines(path: Path, key: str) -> list[str]:
    """Lines without line ends; only ``\\n`` or ``\\r\\n`` end a line (as in parallel corpora)."""
    lines = read_text(path, key).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


@dataclass
class Table:
    """A delimited text file: header names and rows with their 1-based line numbers."""

    path: Path
    header: list[str]
    rows: list[list[str]]
    line_numbers: list[int]

    def column(self, names: str | list[str], key: str) -> int:
        """Index of the first of ``names`` present in the header, else DataError listing columns."""
        wanted = [names] if isinstance(names, str) else list(names)
        for name in wanted:
            if name in self.header:
                return self.header.index(name)
        raise DataError(
            f"{key}: no column {' or '.join(map(repr, wanted))} in {self.path}; "
            f"columns present: {self.header}; set {key} to one of them"
        )


def delimiter_for(path: Path, delimiter: str | None) -> str:
    """The explicit ``delimiter``, else tab for ``.tsv`` and comma otherwise."""
    if delimiter:
        return "\t" if delimiter in ("\\t", "tab") else delimiter
    suffixes = [s for s in path.suffixes if s != ".gz"]
    return "\t" if suffixes and suffixes[-1] in (".tsv", ".tab") else ","


def read_table(path: Path, key: str, delimiter: str | None = None) -> Table:
    """Parse a TSV/CSV file with a header row.

    TSV is read without quote handling (GLUE-style files contain bare quotes);
    CSV follows the usual quoting rules.
    """
    delim = delimiter_for(path, delimiter)
    quoting = csv.QUOTE_NONE if delim == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(
        io.StringIO(read_text(path, key), newline=""), delimiter=delim, quoting=quoting
    )
    header: list[str] | None = None
    rows: list[list[str]] = []
    numbers: list[int] = []
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [cell.strip() for cell in row]
            continue
        rows.append(row)
        numbers.append(reader.line_num)
    if header is None or not rows:
        raise DataError(f"{key}: {path} has no data rows below its header; add labelled rows")
    return Table(path, header, rows, numbers)
