"""attnlab-data: fetch the real data sets into the data folder the presets read.

usage: attnlab-data NAME [NAME ...] [--root FOLDER] [--mirror URL|FOLDER] [--documents N]
       attnlab-data --list [--root FOLDER]

NAME                      shakespeare (Tiny Shakespeare: data=shakespeare_char),
                          multi30k (de-en: data=multi30k), sst2 (data=sst2),
                          wikitext103, fineweb-edu (text for attnlab-prepare, then data=tokens)
  --root FOLDER           the data folder (default: $ATTNLAB_DATA_ROOT, else ./data in the
                          working directory: where the presets read)
  --mirror URL|FOLDER     fetch from a copy instead of the published sources: a URL or
                          folder in the data folder's layout (e.g. tinyshakespeare/input.txt)
                          for shakespeare and multi30k; a folder holding a copy of the
                          Hugging Face dataset's repository (FOLDER/nyu-mll/glue, …) for the
                          others
  --documents N           fineweb-edu: the first N documents of sample-10BT (default 100000)
  --list                  each data set, its source, its size and whether it is present

Published files (shakespeare, multi30k) are checked against their SHA-256; a Hugging Face
dataset against its published row counts. A file is written whole or not at all, a file
already there and verified is kept (a second run does nothing), and a file there that
differs is never overwritten: the command stops with one error line naming it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from attnlab.data.fetch import count_records, fetch_hub, fetch_published
from attnlab.data.paths import DATA_ROOT_ENV, data_root
from attnlab.data.sources import FINEWEB_DOCUMENTS, SETS, DataSet
from attnlab.errors import ConfigError

NAMES = ", ".join(SETS)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as every attnlab command
        raise ConfigError(f"{message}; see attnlab-data --help")


def parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="attnlab-data", add_help=False)
    p.add_argument("names", nargs="*")
    p.add_argument("--root")
    p.add_argument("--mirror")
    p.add_argument("--documents", type=int)
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list:
        if args.names or args.mirror or args.documents is not None:
            raise ConfigError("--list takes only --root; run `attnlab-data --list` alone")
        return args
    if not args.names:
        raise ConfigError(f"name a data set to fetch: {NAMES} (attnlab-data --list)")
    for name in args.names:
        if name not in SETS:
            raise ConfigError(f"unknown data set {name!r}; choose from {NAMES}")
    if args.documents is not None:
        if "fineweb-edu" not in args.names:
            raise ConfigError("--documents applies to fineweb-edu only; drop it")
        if args.documents < 1:
            raise ConfigError(f"--documents must be 1 or more, got {args.documents}")
    if args.mirror and args.mirror.startswith("file://"):
        args.mirror = urllib.request.url2pathname(urllib.parse.urlparse(args.mirror).path)
    hub = [n for n in args.names if SETS[n].hub is not None]
    if args.mirror and hub and "://" in args.mirror:
        raise ConfigError(f"--mirror for {', '.join(hub)} must be a folder holding a copy of the "
                          "dataset's repository; for a Hugging Face Hub mirror set HF_ENDPOINT")
    args.documents = args.documents or FINEWEB_DOCUMENTS
    return args


def presence(data_set: DataSet, root: Path) -> str:
    """Whether its files are in ``root`` (by name; fetching it checks their content)."""
    if data_set.hub is not None and data_set.hub.splits[0].rows is None:  # any sample size
        found = sorted(p.name for p in root.glob(data_set.paths("*")[0]))
        return f"present: {', '.join(found)}" if found else "missing"
    paths = data_set.paths()
    there = sum((root / p).is_file() for p in paths)
    return "present" if there == len(paths) else "missing" if not there else (
        f"incomplete ({there} of {len(paths)} files)")  # fmt: skip


def list_sets(root: Path) -> None:
    rows = [("name", "source", "size", f"in {root}")] + [
        (s.name, s.source, s.size, presence(s, root)) for s in SETS.values()]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[3]]))


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def next_steps(data_set: DataSet, root: Path, documents: int) -> list[str]:
    """The attnlab-prepare command that turns a corpus into token shards, and the training."""
    paths = [shown(root / p) for p in data_set.paths(documents)]
    out = shown(root / f"{data_set.name}-tokens")
    held_out = ["--val", paths[1], "--test", paths[2]] if len(paths) == 3 else []
    prepare = ["attnlab-prepare", paths[0], *held_out, "--out", out]
    train = ["attnlab-train", "model=decoder_only", "data=tokens", f"data.path={out}"]
    return [f"next, tokenize it: {shlex.join(prepare)}", f"then train on it: {shlex.join(train)}"]


def fetch(data_set: DataSet, root: Path, mirror: str | None, documents: int) -> None:
    """Fetch one data set and say what was done."""
    if data_set.hub is not None:
        written = fetch_hub(data_set, root, mirror, documents)
        rows = [count_records(root / p, data_set.hub.form) for p in data_set.paths(documents)]
        checked = "rows counted: " + ", ".join(f"{n:,}" for n in rows)
    else:
        written = fetch_published(data_set, root, mirror)
        checked = "SHA-256 verified"
    if written:
        print(f"{data_set.name}: wrote {', '.join(written)} into {root} ({checked})")
    else:
        print(f"{data_set.name}: already in {root} ({checked}); nothing to do")
    if data_set.then == "prepare":
        for line in next_steps(data_set, root, documents):
            print(f"  {line}")


def run(args: argparse.Namespace) -> None:
    root = Path(os.path.expanduser(args.root or data_root())).absolute()
    if args.list:
        list_sets(root)
        return
    for name in args.names:
        fetch(SETS[name], root, args.mirror, args.documents)
    if Path(data_root()).absolute() != root:
        print(f"note: the presets read {data_root()}; set {DATA_ROOT_ENV}={root} to train on "
              "these files")


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit code (2 for bad input, with one line)."""
    from attnlab.cli.common import user_errors

    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    folder = argv[argv.index("--root") + 1] if "--root" in argv[:-1] else data_root()
    try:
        with user_errors(folder, fix="free disk space or choose a writable data folder (--root)"):
            run(parse(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        print("interrupted: no partial file was left; run the same command again",
              file=sys.stderr)  # fmt: skip
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
