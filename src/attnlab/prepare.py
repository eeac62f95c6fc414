"""attnlab-prepare: tokenize a corpus once into a folder of token shards for data=tokens.

usage: attnlab-prepare INPUT [INPUT ...] --out FOLDER [options]

INPUT: text files (plain or .gz), globs ('corpus/*.txt.gz'), JSON-lines or parquet
files (the --text-field of a record is a document), a folder written by a Hugging
Face dataset's save_to_disk, or hf:<name> (a dataset in the local Hugging Face cache;
--streaming reads it lazily). In text files a document is a file, a blank-line-separated
paragraph or a line (--unit). Validation and test documents are held out by document:
each training document goes to val with probability --val-fraction (a hash of --seed and
its position, so the same inputs always split alike), unless --val/--test name files.

  --out FOLDER            where the shards go (a new folder, or this command's own
                          unfinished one: a stopped run continues where it stopped; a
                          finished one: missing or damaged shards are rebuilt)
  --tokenizer KIND|PATH   bpe (byte-level BPE trained on a sample of the training
                          documents), char, a tokenizer.json (e.g. GPT-2's; ids that are
                          not attnlab's are moved up by 6), or an OpenAI .tiktoken file
                          (r50k_base: GPT-2's, p50k_base, cl100k_base, o200k_base; ids
                          moved up by 6). Default: bpe. A byte-level BPE encodes through
                          tiktoken (the same ids), any other through tokenizers
  --vocab-size N          bpe vocabulary, special tokens included: 263 to 4194304
                          (default 8192)
  --tokenizer-sample-mb N text the tokenizer is trained on (default 64)
  --unit file|paragraph|line   a text file's documents (default paragraph)
  --text-field NAME       the field of JSON-lines/parquet/dataset records (default text)
  --hf-split NAME         the split of a Hugging Face dataset (default train)
  --streaming             read hf:<name> with streaming=True
  --val SRC [SRC ...]     validation documents from these inputs instead of a fraction
  --test SRC [SRC ...]    test documents from these inputs instead of a fraction
  --val-fraction F        default 0.005;  --test-fraction F  default 0 (test reuses val)
  --shard-tokens N        tokens per shard, 1024 to 2147483648 (default 67108864:
                          128 MiB of uint16)
  --dtype auto|uint16|uint32   auto: uint16 while the vocabulary fits
  --workers N             tokenizing processes, one thread each (default: one per CPU;
                          0: this process)
  --seed N                the held-out draw (default 0)

Ctrl-C (or SIGTERM) saves everything tokenized so far and stops at the end of the
document at hand; a second one stops at once, keeping what was saved last. Either way
the same command continues where it stopped.

An option that does not apply is refused: --vocab-size without --tokenizer bpe,
--tokenizer-sample-mb with a tokenizer file, --val-fraction with --val (--test-fraction
with --test), --unit when no input is a text file, --text-field when none holds records,
--hf-split and --streaming when none is a Hugging Face dataset.

Each document is followed by <eos> (id 2). The folder holds <split>_NNNNNN.bin shards
(raw token ids), a .docs file per shard (where documents start), tokenizer.json and
index.json (counts, checksums, settings, this command). Train on it with
`attnlab-train data=tokens data.path=FOLDER`.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.documents import UNITS, Source, documents, expand_sources
from attnlab.data.encoding import default_workers, encoder_for
from attnlab.data.preparation import STATE, Preparation, Stopped, StopSignals
from attnlab.data.shard_writer import SplitWriter, cut_short, damaged_shards, pending_file
from attnlab.data.shards import (
    FORMAT,
    INDEX,
    SPLITS,
    VERSION,
    dtype_for,
    read_json,
    sha256_file,
    write_json_atomic,
)
from attnlab.errors import ConfigError, DataError, UserError

DISK_FIX = "free disk space, then run the same attnlab-prepare command again to continue"
DEFAULT_SHARD_TOKENS = 1 << 26
MAX_SHARD_TOKENS = 1 << 31  # 4 GiB of uint16 on disk per shard
MAX_BPE_VOCAB = 1 << 22  # BPE training sets aside ~130 bytes a token: 0.5 GB at this size
DEFAULTS = {"vocab_size": 8192, "tokenizer_sample_mb": 64.0, "unit": "paragraph",
            "text_field": "text", "hf_split": "train", "streaming": False,
            "val_fraction": 0.005, "test_fraction": 0.0}  # fmt: skip


# -- arguments ------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as every attnlab command
        raise ConfigError(f"{message}; see attnlab-prepare --help")


def parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="attnlab-prepare", add_help=False)
    p.add_argument("inputs", nargs="*")
    p.add_argument("--out")
    p.add_argument("--tokenizer", default="bpe")
    p.add_argument("--vocab-size", type=int)  # these default to DEFAULTS, once checked
    p.add_argument("--tokenizer-sample-mb", type=float)
    p.add_argument("--unit", choices=UNITS)
    p.add_argument("--text-field")
    p.add_argument("--hf-split")
    p.add_argument("--streaming", action="store_true")
    p.add_argument("--val", nargs="+", default=None)
    p.add_argument("--test", nargs="+", default=None)
    p.add_argument("--val-fraction", type=float)
    p.add_argument("--test-fraction", type=float)
    p.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS)
    p.add_argument("--dtype", choices=("auto", "uint16", "uint32"), default="auto")
    p.add_argument("--workers", type=int, default=default_workers())
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.given = {name for name in DEFAULTS if getattr(args, name) not in (None, False)}
    for name, value in DEFAULTS.items():
        setattr(args, name, value if getattr(args, name) is None else getattr(args, name))
    refuse_what_does_not_apply(args)
    if not args.inputs:
        raise ConfigError("no INPUT given; pass text, JSON-lines or parquet files, or hf:<name>")
    if not args.out:
        raise ConfigError("--out is not set; name the folder the shards go to")
    if not 1024 <= args.shard_tokens <= MAX_SHARD_TOKENS:
        raise ConfigError(f"--shard-tokens must lie between 1024 and {MAX_SHARD_TOKENS} (a "
                          f"shard fills in memory), got {args.shard_tokens}")  # fmt: skip
    if not (0.0 <= args.val_fraction < 1.0 and 0.0 <= args.test_fraction < 1.0) or sum(
            held_out_fractions(args)) >= 1:  # fmt: skip
        raise ConfigError("--val-fraction and --test-fraction must lie in [0, 1) and sum below 1")
    if args.val is None and args.val_fraction == 0.0:
        raise ConfigError("no validation documents: set --val-fraction > 0 or pass --val FILES")
    if args.workers < 0:
        raise ConfigError(f"--workers must be 0 or more, got {args.workers}")
    if not 1e-6 <= args.tokenizer_sample_mb < math.inf:  # also refuses nan
        raise ConfigError("--tokenizer-sample-mb must be a number of megabytes from 0.000001 "
                          f"(one byte), got {args.tokenizer_sample_mb}")  # fmt: skip
    return args


def refuse_what_does_not_apply(args: argparse.Namespace) -> None:
    """An option given that the tokenizer or the other options leave unused: ConfigError."""
    trained = args.tokenizer in ("bpe", "char")
    for name, unused, why in (
        ("vocab_size", args.tokenizer != "bpe", "sizes a tokenizer trained with --tokenizer bpe"),
        ("tokenizer_sample_mb", not trained, "is the text --tokenizer bpe or char is trained on"),
        ("val_fraction", args.val is not None, "draws validation documents; --val names them"),
        ("test_fraction", args.test is not None, "draws test documents; --test names them"),
    ):  # fmt: skip
        if name in args.given and unused:
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option} {why}, so it does not apply here; drop {option}")


def refuse_inputs_unused_by(args: argparse.Namespace, kinds: set[str]) -> None:
    """An option given for a kind of input (Source.kind) that no input is: ConfigError."""
    for name, wanted, what in (
        ("unit", {"text"}, "text files"),
        ("text_field", {"jsonl", "parquet", "saved", "hub"}, "JSON-lines, parquet or Hugging "
                                                             "Face records"),
        ("hf_split", {"saved", "hub"}, "Hugging Face datasets (hf:<name>, save_to_disk folders)"),
        ("streaming", {"hub"}, "hf:<name> inputs"),
    ):  # fmt: skip
        if name in getattr(args, "given", ()) and not kinds & wanted:
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option} applies to {what}, and no input is one; drop {option}")


# -- which split a document belongs to ------------------------------------------------------
def held_out_fractions(args: argparse.Namespace) -> tuple[float, float]:
    """The val and test fractions drawn from the training inputs (0 for a split given as
    files with --val / --test)."""
    return (args.val_fraction if args.val is None else 0.0,
            args.test_fraction if args.test is None else 0.0)  # fmt: skip


def held_out_draw(seed: int, ordinal: int) -> float:
    """A uniform number in [0, 1) for document ``ordinal``: the same for the same seed."""
    digest = hashlib.blake2b(b"%d:%d" % (seed, ordinal), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


class Corpus:
    """The training inputs (and any explicit val/test inputs) as one stream of pieces,
    each tagged with its split and its document's ordinal."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.val_fraction, self.test_fraction = held_out_fractions(args)
        self.sources = {"train": expand_sources(args.inputs)}
        for split in ("val", "test"):
            given = getattr(args, split)
            if given is not None:
                self.sources[split] = expand_sources(given, f"--{split}")
        refuse_inputs_unused_by(args, {s.kind for ss in self.sources.values() for s in ss})

    def _documents(self, sources: list[Source], key: str) -> Iterator[tuple[str, bool]]:
        a = self.args
        return documents(sources, a.unit, a.text_field, a.hf_split, a.streaming, key)

    def _split_of(self, ordinal: int) -> str:
        u = held_out_draw(self.args.seed, ordinal)
        val, test = self.val_fraction, self.test_fraction
        return "val" if u < val else "test" if u < val + test else "train"

    def pieces(self) -> Iterator[tuple[str, str, bool, int]]:
        """``(split, text, ends its document, document ordinal)`` in input order."""
        ordinal = 0
        for text, last in self._documents(self.sources["train"], "input"):
            yield self._split_of(ordinal), text, last, ordinal
            ordinal += last
        for split in ("val", "test"):
            for text, last in self._documents(self.sources.get(split, []), f"--{split}"):
                yield split, text, last, ordinal
                ordinal += last

    def sample(self, megabytes: float) -> Iterator[str]:
        """Training pieces from the start of the corpus, up to ``megabytes`` of text."""
        budget = int(megabytes * 1e6)
        for split, text, _, _ in self.pieces():
            if budget <= 0:
                return
            if split == "train":
                budget -= len(text.encode())
                yield text

    def identity(self) -> dict[str, Any]:
        return {split: [s.identity() for s in sources] for split, sources in self.sources.items()}


# -- the tokenizer --------------------------------------------------------------------------
def make_tokenizer(args: argparse.Namespace, corpus: Corpus) -> Any:
    from attnlab.data.tokenizers import BPETokenizer, CharTokenizer, load_tokenizer

    if args.tokenizer == "char":
        return CharTokenizer.train(corpus.sample(args.tokenizer_sample_mb))
    if args.tokenizer == "bpe":
        if not 262 < args.vocab_size <= MAX_BPE_VOCAB:  # the trainer allocates for all of it
            raise ConfigError(f"--vocab-size must exceed 262 (256 bytes + 6 specials) and be at "
                              f"most {MAX_BPE_VOCAB}, got {args.vocab_size}")  # fmt: skip
        return BPETokenizer.train(corpus.sample(args.tokenizer_sample_mb), args.vocab_size)
    path = Path(os.path.expanduser(args.tokenizer))
    if not path.is_file():
        raise ConfigError(
            f"--tokenizer: {args.tokenizer!r} is neither bpe, char, a tokenizer.json nor a "
            ".tiktoken file; pass one of those"
        )
    if path.suffix == ".tiktoken":
        from attnlab.data.tiktoken_bpe import read_tiktoken_file, to_hf
        from attnlab.data.tokenizers import OffsetTokenizer

        return OffsetTokenizer(to_hf(read_tiktoken_file(path, 0)))
    return load_tokenizer(path, foreign=True)


def tokenizer_identity(args: argparse.Namespace) -> dict[str, Any]:
    if args.tokenizer in ("char", "bpe"):
        vocab = args.vocab_size if args.tokenizer == "bpe" else None
        return {"kind": args.tokenizer, "vocab_size": vocab,
                "sample_mb": args.tokenizer_sample_mb}  # fmt: skip
    path = Path(os.path.expanduser(args.tokenizer))
    return {"file": str(path.resolve()), "sha256": sha256_file(path) if path.is_file() else None}


# -- the folder -----------------------------------------------------------------------------
def settings_of(args: argparse.Namespace, corpus: Corpus) -> dict[str, Any]:
    """Everything the shards depend on (not --workers: any count writes the same bytes)."""
    return {
        "inputs": corpus.identity(), "tokenizer": tokenizer_identity(args), "unit": args.unit,
        "text_field": args.text_field, "hf_split": args.hf_split, "streaming": args.streaming,
        "val_fraction": None if args.val is not None else args.val_fraction,
        "test_fraction": None if args.test is not None else args.test_fraction,
        "shard_tokens": args.shard_tokens, "dtype": args.dtype, "seed": args.seed,
        "separator": "eos",
    }  # fmt: skip


def check_folder(out: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state of this command's unfinished run in ``out``, None for a new folder;
    DataError when ``out`` holds anything else (nothing there is touched)."""
    if out.exists() and not out.is_dir():
        raise DataError(f"--out: {out} is a file; name a folder")
    if not out.exists():
        return None
    for name, what in ((INDEX, "prepared shards"), (STATE, "an unfinished preparation")):
        path = out / name
        if path.is_file():
            try:
                found = read_json(path)
            except (OSError, ValueError, RecursionError):  # RecursionError: nested too deep
                found = {}
            if not isinstance(found, dict) or found.get("settings") != settings:
                raise DataError(
                    f"--out: {out} already holds {what} made from other inputs or settings; "
                    "choose another --out (or delete that folder to replace it)"
                )
            return found
    if any(out.iterdir()):
        raise DataError(f"--out: {out} is not empty and holds no attnlab shards; choose "
                        "another --out (a new or empty folder)")  # fmt: skip
    return None


def prepare(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Tokenize the corpus into ``args.out``; returns the index."""
    corpus = Corpus(args)
    out = Path(os.path.expanduser(args.out))
    settings = settings_of(args, corpus)
    saved = check_folder(out, settings)
    if saved is not None and saved.get("format") == FORMAT:  # already prepared
        return repair(out, args, corpus, saved)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:  # a file where a parent folder goes
        blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), out.parent)
        raise DataError(f"--out: {blocker} is a file, so the folder {out} cannot be made; "
                        "choose an --out whose parents are folders") from e  # fmt: skip
    try:
        with StopSignals() as stop:
            return _prepare_into(out, args, argv, corpus, settings, saved, stop)
    except UserError:  # bad input: the folder this run made goes (a fixed input is new input)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    except BaseException:  # a kill or a crash: the state stays, the same command continues
        if created and not (out / STATE).is_file():
            shutil.rmtree(out, ignore_errors=True)
        raise


def _load_tokenizer(out: Path) -> Any:
    from attnlab.data.tokenizers import load_tokenizer

    if not (out / "tokenizer.json").is_file():
        raise DataError(f"--out: {out} lacks its tokenizer.json; prepare into a new --out "
                        "(or delete that folder)")  # fmt: skip
    return load_tokenizer(out / "tokenizer.json", foreign=True)


def repair(out: Path, args: argparse.Namespace, corpus: Corpus, index: dict[str, Any]
           ) -> dict[str, Any]:  # fmt: skip
    """A finished folder again: nothing to do, or its missing and damaged shards rebuilt
    (the corpus tokenized again up to the last of them)."""
    damaged = damaged_shards(out, index)
    if not damaged:
        print(f"{out} already holds these shards; nothing to do")
        return index
    names = [index["splits"][s]["shards"][n]["file"]
             for s in SPLITS for n in sorted(damaged.get(s, ()))]  # fmt: skip
    print(f"{out}: {', '.join(names)} missing or damaged; tokenizing the corpus again to rebuild "
          f"{'it' if len(names) == 1 else 'them'}", flush=True)
    tokenizer = _load_tokenizer(out)
    encoder, _ = encoder_for(tokenizer)
    writers = {s: SplitWriter(out, s, index["dtype"], index["shard_tokens"],
                              index["splits"].get(s, {"shards": []})["shards"], damaged.get(s))
               for s in SPLITS}  # fmt: skip
    with StopSignals() as stop:
        run = Preparation(out, index["settings"], writers, stop)
        run.tokenize(corpus.pieces(), encoder, args.workers, index["dtype"], save=False)
        for writer in writers.values():
            if not writer.rebuilt:
                writer.close()
    if not all(w.rebuilt for w in writers.values()):
        raise DataError(f"--out: the inputs no longer give the shards in {out}; prepare them "
                        "into a new --out")  # fmt: skip
    print(f"rebuilt {', '.join(names)} in {out}")
    return index


def _unfinished_damage(out: Path, saved: dict[str, Any], dtype: str) -> str | None:
    """What of an unfinished preparation's files is missing or cut short, if anything."""
    for split, state in saved["splits"].items():
        bad = cut_short(out, state["shards"], dtype)
        tokens = pending_file(out, split, state, ".bin")
        need = int(state.get("pending_tokens", 0)) * np.dtype(dtype).itemsize
        if need and (not tokens.is_file() or tokens.stat().st_size < need):
            bad.append(tokens.name)
        if bad:
            return ", ".join(bad)
    return None


def _prepare_into(out: Path, args: argparse.Namespace, argv: list[str], corpus: Corpus,
                  settings: dict[str, Any], saved: dict[str, Any] | None,
                  stop: StopSignals) -> dict[str, Any]:  # fmt: skip
    from attnlab.special_tokens import EOS

    tokenizer_path = out / "tokenizer.json"
    if saved is not None:
        if "splits" not in saved:
            raise DataError(f"--out: the unfinished preparation in {out} lacks its state; "
                            "prepare into a new --out (or delete that folder)")  # fmt: skip
        tokenizer = _load_tokenizer(out)
    else:
        tokenizer = make_tokenizer(args, corpus)
    dtype = dtype_for(tokenizer.vocab_size) if args.dtype == "auto" else args.dtype
    if tokenizer.vocab_size > np.iinfo(dtype).max + 1:
        raise ConfigError(
            f"--dtype {dtype} holds ids below {np.iinfo(dtype).max + 1}, but the vocabulary has "
            f"{tokenizer.vocab_size}; use --dtype uint32 (or auto)"
        )
    if saved is None:
        tokenizer.save(tokenizer_path)
    encoder, how = encoder_for(tokenizer)
    print(f"encoding with {how}, {args.workers or 'no'} worker processes", flush=True)
    writers = {s: SplitWriter(out, s, dtype, args.shard_tokens) for s in SPLITS}
    for stale in out.glob(".*.tmp"):  # a write that a kill cut short
        stale.unlink()
    run = Preparation(out, settings, writers, stop)
    if saved is not None:
        damage = _unfinished_damage(out, saved, dtype)
        if damage is not None:
            print(f"{out}: {damage} of the unfinished preparation is missing or cut short; "
                  "starting it over from the first document")
        else:
            run = Preparation(out, settings, writers, stop, int(saved["documents_done"]),
                              int(saved["generation"]))  # fmt: skip
            for split, state in saved["splits"].items():
                writers[split].restore(state)
            print(f"continuing the preparation in {out} after {run.done:,} documents"
                  if run.done else f"{out}: no document was saved yet; starting from the first")
    if saved is None or not run.done:
        run.save()  # from here on, a stopped run continues (from its first document)
    run.tokenize(corpus.pieces(), encoder, args.workers, dtype)
    for split, writer in writers.items():
        if split == "test" and writer.documents == 0:
            continue
        if writer.documents == 0:
            where = "the inputs" if split == "train" else f"the {split} split"
            fix = ("give it text" if split == "train" else f"raise --{split}-fraction, choose a "
                   f"finer --unit (line or paragraph) or pass --{split} FILES")  # fmt: skip
            raise DataError(f"input: {where} holds no document; {fix}")
        writer.close()
    index = {
        "format": FORMAT, "version": VERSION, "dtype": dtype, "vocab_size": tokenizer.vocab_size,
        "tokenizer": {"file": tokenizer_path.name, "kind": tokenizer.kind, "separator": EOS},
        "shard_tokens": args.shard_tokens,
        "splits": {s: {"tokens": w.written, "documents": w.documents, "shards": w.shards}
                   for s, w in writers.items() if w.documents},
        "settings": settings,
        "command": shlex.join(["attnlab-prepare", *argv]),
    }  # fmt: skip
    write_json_atomic(out / INDEX, index)
    (out / STATE).unlink(missing_ok=True)
    for leftover in [*out.glob(".pending-*"), *out.glob(".*.tmp")]:
        leftover.unlink()
    print(f"prepared {out}: {run.report()}")
    return index


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit code (2 for bad input, with one line)."""
    from attnlab.cli.common import user_errors

    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    try:
        with user_errors(argv[argv.index("--out") + 1] if "--out" in argv[:-1] else None,
                         DISK_FIX):  # fmt: skip
            prepare(parse(argv), argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    except (Stopped, KeyboardInterrupt) as exc:
        for ending in (signal.SIGINT, signal.SIGTERM):  # stopped already: one more is moot
            signal.signal(ending, signal.SIG_IGN)
        signum, saved = (exc.signum, exc.saved) if isinstance(exc, Stopped) else (
            signal.SIGINT, None)  # fmt: skip
        kept = f"the tokens of {saved:,} documents are saved; " if saved else ""
        print(f"attnlab-prepare: stopped by {signal.Signals(signum).name}; {kept}run the same "
              "command again to continue", file=sys.stderr)
        return 128 + signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
