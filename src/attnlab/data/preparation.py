"""A run of ``attnlab-prepare``: documents in, shards out, progress saved as it goes.

The corpus comes as pieces ``(split, text, ends its document, document ordinal)``,
grouped into tasks for the tokenizing processes; their ids go to each split's
:class:`~attnlab.data.shard_writer.SplitWriter`. The state (``.prepare-state.json``: the
documents done, each split's finished shards and saved pending tokens) is written after
a shard fills, every ``SAVE_EVERY`` seconds and when a signal asks the run to stop,
always at a document's end, so the same command continues from it with the same bytes.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.encoding import Task, encoded
from attnlab.data.shard_writer import SplitWriter
from attnlab.data.shards import SPLITS, write_json_atomic

STATE = ".prepare-state.json"
Piece = tuple[str, str, bool, int]  # split, text, ends its document, document ordinal
Meta = tuple[np.ndarray, np.ndarray, np.ndarray]  # each piece's split, end, document ordinal
_SPLIT_CODE = {split: code for code, split in enumerate(SPLITS)}


def tasks(pieces: Iterator[Piece], max_chars: int = 1 << 20, max_pieces: int = 4096
          ) -> Iterator[tuple[Meta, Task]]:  # fmt: skip
    """Pieces grouped into tasks of about ``max_chars`` characters, each cut after a
    document's last piece where one comes within 4 × ``max_chars`` (progress is saved at
    a document's end)."""
    splits: list[int] = []
    ends: list[bool] = []
    ordinals: list[int] = []
    texts: list[str] = []
    size = 0

    def task() -> tuple[Meta, Task]:
        meta = (np.array(splits, np.uint8), np.array(ends, bool), np.array(ordinals, np.int64))
        return meta, (texts, ends)

    for split, text, last, ordinal in pieces:
        splits.append(_SPLIT_CODE[split])
        ends.append(last)
        ordinals.append(ordinal)
        texts.append(text)
        size += len(text)
        if (size >= max_chars or len(texts) >= max_pieces) and (last or size >= 4 * max_chars):
            yield task()
            splits, ends, ordinals, texts, size = [], [], [], [], 0
    if texts:
        yield task()


class Stopped(BaseException):
    """SIGINT or SIGTERM ended the run; ``saved``: the documents whose tokens are kept."""

    def __init__(self, signum: int, saved: int | None) -> None:
        super().__init__(signum, saved)
        self.signum, self.saved = signum, saved


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM while preparing: the first asks the run to stop at the
    end of the document at hand, with everything tokenized saved; a second stops it at
    once, keeping the state saved last (every file is written whole or not at all)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.saved: int | None = None  # documents done at the last save
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            raise Stopped(signum, self.saved)
        self.signum = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle)
                             for s in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


class Preparation:
    """The shards being written into ``out``: each split's writer, the documents done
    (every document before ordinal ``done`` is in a writer) and the saved state."""

    SAVE_EVERY = 30.0  # seconds: what a run killed outright (SIGKILL) tokenizes again

    def __init__(self, out: Path, settings: dict[str, Any], writers: dict[str, SplitWriter],
                 stop: StopSignals, done: int = 0, generation: int = 0) -> None:  # fmt: skip
        self.out, self.settings, self.writers, self.stop = out, settings, writers, stop
        self.done, self.generation = done, generation
        self.unsaved = False  # a shard finished since the state was last written
        self.saved_at = time.perf_counter()
        self.at_document_start = True
        self.started, self.tokens_at_start = time.perf_counter(), self.tokens()
        stop.saved = done

    def save(self) -> None:
        """Write the state (and the tokens not yet in a shard): a run stopped after this
        continues from here."""
        self.generation += 1
        splits = {s: w.save_pending() for s, w in self.writers.items()}
        write_json_atomic(self.out / STATE, {"settings": self.settings, "documents_done": self.done,
                                             "generation": self.generation, "splits": splits})
        kept = {state["pending"] + ext for state in splits.values() for ext in (".bin", ".docs")}
        for old in self.out.glob(".pending-*"):
            if old.name not in kept:
                old.unlink()
        self.unsaved, self.saved_at, self.stop.saved = False, time.perf_counter(), self.done

    def take(self, meta: Meta, flat: np.ndarray, lengths: np.ndarray, save: bool) -> None:
        """A task's ids into the writers of their splits; a shard that fills is followed by
        a save at the next document's end (``save``), as the stream allows."""
        splits, ends, ordinals = meta
        bounds = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=bounds[1:])
        begins = np.empty(len(ends), bool)  # a piece after a document's end begins one
        begins[0], begins[1:] = self.at_document_start, ends[:-1]
        runs = [0, *(np.flatnonzero(splits[1:] != splits[:-1]) + 1).tolist(), len(splits)]
        for a, b in itertools.pairwise(runs):  # pieces of one split
            writer = self.writers[SPLITS[splits[a]]]
            while a < b:  # up to the end of the document that fills the shard, if one does
                room = writer.shard_tokens - writer.pending
                fill = a + int(np.searchsorted(bounds[a + 1 : b + 1] - bounds[a], room))
                later = np.flatnonzero(ends[fill:b]) if fill < b else []
                cut = fill + int(later[0]) + 1 if len(later) else b
                starts = bounds[a:cut][begins[a:cut]] - bounds[a]
                self.unsaved |= writer.add(flat[bounds[a] : bounds[cut]], starts) > 0
                finished = np.flatnonzero(ends[a:cut])
                if len(finished):
                    self.done = int(ordinals[a + finished[-1]]) + 1
                if save and self.unsaved and ends[cut - 1]:
                    self.save()
                a = cut
        self.at_document_start = bool(ends[-1])

    def tokenize(self, pieces: Iterator[Piece], encoder: Any, workers: int, dtype: str,
                 save: bool = True) -> None:  # fmt: skip
        """Every document from ordinal ``done`` on into the writers (a repair, ``save``
        False, stops as soon as its shards are rebuilt)."""
        from attnlab.special_tokens import EOS

        self.started = last_report = time.perf_counter()
        self.tokens_at_start = self.tokens()
        pieces = (p for p in pieces if p[3] >= self.done)  # a resumed run skips what is done
        with contextlib.closing(encoded(tasks(pieces), encoder, workers, EOS, dtype)) as results, (
                contextlib.ExitStack()) as stack:  # fmt: skip
            stack.callback(lambda: [w.abandon() for w in self.writers.values()])
            for meta, (flat, lengths) in results:
                self.take(meta, flat, lengths, save)
                if not self.at_document_start:  # progress is saved between documents only
                    continue
                if self.stop.signum is not None:
                    if save:
                        self.save()
                    raise Stopped(self.stop.signum, self.done if save else None)
                if not save:
                    if all(w.rebuilt for w in self.writers.values()):
                        return
                elif self.unsaved or time.perf_counter() - self.saved_at > self.SAVE_EVERY:
                    self.save()
                if time.perf_counter() - last_report > 30:
                    print(self.report(), flush=True)
                    last_report = time.perf_counter()

    def tokens(self) -> int:
        """Tokens in the writers, saved in shards or not."""
        return sum(w.written + w.pending for w in self.writers.values())

    def report(self) -> str:
        """The tokens of each split so far, and this run's rate."""
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        rate = (self.tokens() - self.tokens_at_start) / elapsed
        parts = [f"{s} {w.written + w.pending:,} tokens" for s, w in self.writers.items()]
        return f"{', '.join(parts)} ({rate / 1e6:.2f} M tokens/s)"
