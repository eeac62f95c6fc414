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
                          unfinished one: a killed run continues where it stopped)
  --tokenizer KIND|PATH   bpe (byte-level BPE trained on a sample of the training
                          documents), char, or a tokenizer.json (e.g. GPT-2's; ids that
                          are not attnlab's are moved up by 6). Default: bpe
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
  --workers N             tokenizing processes, one thread each (default: up to 4;
                          0: this process, with the tokenizer's own threads)
  --seed N                the held-out draw (default 0)

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
import collections
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.documents import UNITS, Source, documents, expand_sources
from attnlab.data.shards import (
    FORMAT,
    INDEX,
    SPLITS,
    VERSION,
    dtype_for,
    sha256_file,
    write_atomic,
    write_json_atomic,
)
from attnlab.errors import ConfigError, DataError, UserError

STATE = ".prepare-state.json"
DEFAULT_SHARD_TOKENS = 1 << 26
MAX_SHARD_TOKENS = 1 << 31  # 4 GiB of uint16 in memory per split while a shard fills
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
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
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
            f"--tokenizer: {args.tokenizer!r} is neither bpe, char nor a tokenizer.json file; "
            "pass one of those"
        )
    return load_tokenizer(path, foreign=True)


def tokenizer_identity(args: argparse.Namespace) -> dict[str, Any]:
    if args.tokenizer in ("char", "bpe"):
        vocab = args.vocab_size if args.tokenizer == "bpe" else None
        return {"kind": args.tokenizer, "vocab_size": vocab,
                "sample_mb": args.tokenizer_sample_mb}  # fmt: skip
    path = Path(os.path.expanduser(args.tokenizer))
    return {"file": str(path.resolve()), "sha256": sha256_file(path) if path.is_file() else None}


# -- encoding, in worker processes ----------------------------------------------------------
_WORKER_TOKENIZER: Any = None


def _start_worker(tokenizer_json: str) -> None:
    global _WORKER_TOKENIZER
    from attnlab.data.tokenizers import tokenizer_from_json

    _WORKER_TOKENIZER = tokenizer_from_json(tokenizer_json, foreign=True)


def encode_pieces(texts: list[str], tokenizer: Any = None, dtype: str = "uint32"
                  ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The ids of all ``texts`` as one array of ``dtype``, and each text's count of ids
    (one array each way: a task's result crosses between processes as two objects)."""
    tokenizer = tokenizer if tokenizer is not None else _WORKER_TOKENIZER
    if hasattr(tokenizer, "encode_array"):  # characters: a vectorised look-up
        parts = [tokenizer.encode_array(t) for t in texts]
        flat = np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
    else:
        parts = tokenizer.encode_batch(texts)
        flat = np.fromiter(itertools.chain.from_iterable(parts), dtype=dtype)
    return flat, np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))


def _tasks(pieces: Iterator[tuple[str, str, bool, int]], max_chars: int = 1 << 20,
           max_pieces: int = 4096) -> Iterator[tuple[list[tuple[str, bool, int]], list[str]]]:
    """Pieces grouped into tasks of about ``max_chars`` characters."""
    meta: list[tuple[str, bool, int]] = []
    texts: list[str] = []
    size = 0
    for split, text, last, ordinal in pieces:
        meta.append((split, last, ordinal))
        texts.append(text)
        size += len(text)
        if size >= max_chars or len(texts) >= max_pieces:
            yield meta, texts
            meta, texts, size = [], [], 0
    if texts:
        yield meta, texts


def encoded(tasks: Iterator[tuple[list, list[str]]], tokenizer: Any, workers: int, dtype: str
            ) -> Iterator[tuple[list, tuple[np.ndarray, np.ndarray]]]:  # fmt: skip
    """Each task with its ids, in order; at most ``2 × workers + 1`` tasks in flight, so
    memory holds a few tasks, not the corpus."""
    if workers == 0:
        for meta, texts in tasks:
            yield meta, encode_pieces(texts, tokenizer, dtype)
        return
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread a worker: processes scale
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    # an executor, not a Pool: a worker that dies (out of memory) fails the run instead of
    # leaving it waiting for a result that never comes
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(tokenizer.to_json(),))  # fmt: skip
    try:
        pending: collections.deque = collections.deque()
        for meta, texts in tasks:
            pending.append((meta, pool.submit(encode_pieces, texts, None, dtype)))
            if len(pending) > 2 * workers:
                meta0, result = pending.popleft()
                yield meta0, result.result()
        while pending:
            meta0, result = pending.popleft()
            yield meta0, result.result()
    except BrokenProcessPool as e:
        raise DataError(
            "--workers: a tokenizing process died (out of memory?); run the same command "
            "again to continue where it stopped, with fewer --workers"
        ) from e
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- shards ---------------------------------------------------------------------------------
class SplitWriter:
    """One split's shards: tokens fill a buffer of one shard; a full buffer is written
    (temporary file + rename) with its document starts and checksum. Memory: one shard's
    tokens and document starts per split, whatever the corpus size."""

    def __init__(self, folder: Path, split: str, dtype: str, shard_tokens: int,
                 separator: int) -> None:  # fmt: skip
        self.folder, self.split, self.dtype, self.shard_tokens = folder, split, dtype, shard_tokens
        self.separator = np.array([separator], dtype=dtype)  # after every document
        self.buffer = np.empty(0, dtype)  # allocated at the first token (pages as filled)
        self.pending = 0  # tokens in the buffer
        self.starts = np.empty(1024, np.int64)  # where documents start in the buffer
        self.n_starts = 0
        self.shards: list[dict[str, Any]] = []
        self.written = 0  # tokens in finished shards
        self.documents = 0
        self.at_document_start = True

    def add(self, ids: np.ndarray, ends_document: bool) -> int:
        """Append a piece (and the separator after a document's last); returns how many
        shards it completed."""
        if not len(self.buffer):
            self.buffer = np.empty(self.shard_tokens, self.dtype)
        if self.at_document_start:
            if self.n_starts == len(self.starts):
                self.starts = np.resize(self.starts, 2 * len(self.starts))
            self.starts[self.n_starts] = self.pending
            self.n_starts += 1
            self.documents += 1
        self.at_document_start = ends_document
        done = self._put(ids)
        if ends_document:
            done += self._put(self.separator)
        return done

    def _put(self, ids: np.ndarray) -> int:
        done = 0
        while len(ids):
            take = min(len(ids), self.shard_tokens - self.pending)
            self.buffer[self.pending : self.pending + take] = ids[:take]
            self.pending += take
            ids = ids[take:]
            if self.pending == self.shard_tokens:
                self._write_shard()
                done += 1
        return done

    def _write_shard(self) -> None:
        n = self.pending
        tokens = self.buffer[:n]
        starts = self.starts[: self.n_starts]
        inside = starts[starts < n] if n else starts[:0]
        name = f"{self.split}_{len(self.shards):06d}"
        bin_path, docs_path = self.folder / f"{name}.bin", self.folder / f"{name}.docs"
        write_atomic(docs_path, inside)
        write_atomic(bin_path, tokens)
        self.shards.append({
            "file": bin_path.name, "docs": docs_path.name, "tokens": int(n),
            "documents": len(inside), "sha256": hashlib.sha256(tokens).hexdigest(),
            "docs_sha256": hashlib.sha256(inside.tobytes()).hexdigest(),
        })  # fmt: skip
        rest = starts[starts >= n] - n if n else starts
        self.starts[: len(rest)] = rest
        self.n_starts = len(rest)
        self.written += n
        self.pending = 0

    def close(self) -> None:
        """Write what is left as the split's last (shorter) shard."""
        if self.pending or not self.shards:
            self._write_shard()

    # what a resumed preparation needs: the finished shards and the tokens not yet in one
    def save_pending(self, generation: int) -> dict[str, Any]:
        name = f".pending-{self.split}-{generation}"
        write_atomic(self.folder / f"{name}.bin", self.buffer[: self.pending])
        write_atomic(self.folder / f"{name}.docs", self.starts[: self.n_starts])
        return {"shards": self.shards, "written": self.written, "documents": self.documents,
                "pending": name}  # fmt: skip

    def restore(self, state: dict[str, Any]) -> None:
        self.shards, self.written = list(state["shards"]), int(state["written"])
        self.documents = int(state["documents"])
        for shard in self.shards:
            path = self.folder / shard["file"]
            size = np.dtype(self.dtype).itemsize * int(shard["tokens"])
            if not path.is_file() or path.stat().st_size != size:
                raise DataError(
                    f"--out: shard {path} of the unfinished preparation is missing or cut "
                    "short; delete the folder and prepare again"
                )
        pending = self.folder / state["pending"]
        tokens = np.fromfile(f"{pending}.bin", dtype=self.dtype)
        self.buffer = np.empty(self.shard_tokens, self.dtype)
        self.buffer[: len(tokens)] = tokens
        self.pending = len(tokens)
        starts = np.fromfile(f"{pending}.docs", dtype=np.int64)
        self.starts = np.resize(starts, max(1024, 2 * len(starts)))
        self.n_starts = len(starts)


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
                found = json.loads(path.read_text(encoding="utf-8"))
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


def _report(writers: dict[str, SplitWriter], started: float, tokens_at_start: int) -> str:
    total = sum(w.written + w.pending for w in writers.values())
    rate = (total - tokens_at_start) / max(time.perf_counter() - started, 1e-9)
    parts = [f"{s} {w.written + w.pending:,} tokens" for s, w in writers.items()]
    return f"{', '.join(parts)} ({rate / 1e6:.2f} M tokens/s)"


def prepare(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Tokenize the corpus into ``args.out``; returns the index."""
    corpus = Corpus(args)
    out = Path(os.path.expanduser(args.out))
    settings = settings_of(args, corpus)
    saved = check_folder(out, settings)
    if saved is not None and saved.get("format") == FORMAT:  # already prepared
        print(f"{out} already holds these shards; nothing to do")
        return saved
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:  # a file where a parent folder goes
        blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), out.parent)
        raise DataError(f"--out: {blocker} is a file, so the folder {out} cannot be made; "
                        "choose an --out whose parents are folders") from e  # fmt: skip
    try:
        return _prepare_into(out, args, argv, corpus, settings, saved)
    except UserError:  # bad input: the folder this run made goes (a fixed input is new input)
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    except BaseException:  # a kill or a crash: the state stays, the same command continues
        if created and not (out / STATE).is_file():
            shutil.rmtree(out, ignore_errors=True)
        raise


def _prepare_into(out: Path, args: argparse.Namespace, argv: list[str], corpus: Corpus,
                  settings: dict[str, Any], saved: dict[str, Any] | None) -> dict[str, Any]:
    from attnlab.data.tokenizers import tokenizer_from_json
    from attnlab.special_tokens import EOS

    tokenizer_path = out / "tokenizer.json"
    if saved is not None:
        if not tokenizer_path.is_file() or "splits" not in saved:
            raise DataError(
                f"--out: the unfinished preparation in {out} lacks its tokenizer.json or its "
                "state; delete the folder and prepare again"
            )
        tokenizer = tokenizer_from_json(tokenizer_path.read_text(encoding="utf-8"), foreign=True)
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
    writers = {s: SplitWriter(out, s, dtype, args.shard_tokens, EOS) for s in SPLITS}
    done, generation = 0, 0
    for stale in out.glob(".*.tmp"):  # a write that a kill cut short
        stale.unlink()
    if saved is not None:
        done, generation = int(saved["documents_done"]), int(saved["generation"])
        for split, state in saved["splits"].items():
            writers[split].restore(state)
        if done:
            print(f"continuing the preparation in {out} after {done:,} documents")
    tokens_at_start = sum(w.written + w.pending for w in writers.values())
    started = last_report = time.perf_counter()
    unsaved = False  # a shard finished since the state was last written

    def save_state() -> None:
        nonlocal generation
        generation += 1
        splits = {s: w.save_pending(generation) for s, w in writers.items()}
        write_json_atomic(out / STATE, {"settings": settings, "documents_done": done,
                                        "generation": generation, "splits": splits})
        for old in out.glob(f".pending-*-{generation - 1}.*"):
            old.unlink()

    if saved is None:  # from here on, a killed run continues (from its first document)
        save_state()

    pieces = (p for p in corpus.pieces() if p[3] >= done)  # a resumed run skips what is done
    for meta, (flat, lengths) in encoded(_tasks(pieces), tokenizer, args.workers, dtype):
        ends = np.cumsum(lengths).tolist()
        for (split, last, ordinal), stop, n in zip(meta, ends, lengths.tolist(), strict=True):
            unsaved |= writers[split].add(flat[stop - n : stop], last) > 0
            if last:
                done = ordinal + 1
                if unsaved:
                    save_state()
                    unsaved = False
        if time.perf_counter() - last_report > 30:
            print(_report(writers, started, tokens_at_start), flush=True)
            last_report = time.perf_counter()
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
    print(f"prepared {out}: {_report(writers, started, tokens_at_start)}")
    return index


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit code (2 for bad input, with one line)."""
    from attnlab.cli.common import user_errors

    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    try:
        with user_errors(argv[argv.index("--out") + 1] if "--out" in argv[:-1] else None):
            prepare(parse(argv), argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
