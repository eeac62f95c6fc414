"""Tokenizing for ``attnlab-prepare``: tasks of text pieces in, token arrays out, in order.

A byte-level BPE encodes through tiktoken (:mod:`attnlab.data.tiktoken_bpe`, the same
ids), any other tokenizer through its own library. Worker processes take one task at a
time each, in turn, so results come back in the order the tasks went out. A worker
ignores Ctrl-C (the terminal sends it to every process of the command: the parent alone
decides what to save), shares no lock with the others, and dies with its parent however
the parent ends (Linux: the kernel kills it; elsewhere it notices within a second).
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from attnlab.errors import DataError

Task = tuple[list[str], list[bool]]  # texts, and whether each ends its document


def default_workers() -> int:
    """One tokenizing process per CPU this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def encoder_for(tokenizer: Any) -> tuple[Any, str]:
    """What encodes for ``tokenizer`` (tiktoken for a byte-level BPE that it expresses, the
    tokenizer itself otherwise), and a few words saying which and why."""
    from attnlab.data.tiktoken_bpe import from_hf_json
    from attnlab.data.tokenizers import HFTokenizer, OffsetTokenizer
    from attnlab.special_tokens import NUM_SPECIAL

    if isinstance(tokenizer, OffsetTokenizer):
        bpe, why = from_hf_json(tokenizer.hf.to_str(), NUM_SPECIAL)
    elif isinstance(tokenizer, HFTokenizer):
        bpe, why = from_hf_json(tokenizer.to_json())
    else:
        return tokenizer, f"{tokenizer.kind} tokenizer"
    if bpe is None:
        return tokenizer, f"tokenizers (not through tiktoken: {why})"
    return bpe, "tiktoken"


def encode_task(encoder: Any, texts: list[str], ends: list[bool], separator: int, dtype: str
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The ids of all ``texts`` one after another, ``separator`` after each text that ends
    its document, as one array of ``dtype``; and each text's count of ids (its separator
    included)."""
    if hasattr(encoder, "encode_array"):  # tiktoken, or characters: arrays, no lists
        parts = [encoder.encode_array(t) for t in texts]
    else:
        parts = [np.asarray(ids, dtype=np.int64) for ids in encoder.encode_batch(texts)]
    sep = np.array([separator], dtype=dtype)
    pieces = []
    for ids, end in zip(parts, ends, strict=True):
        pieces.append(ids)
        if end:
            pieces.append(sep)
    flat = np.concatenate(pieces).astype(dtype, copy=False) if pieces else np.zeros(0, dtype)
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return flat, lengths + np.asarray(ends, dtype=np.int64)


def _die_with(parent: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the kernel kills us with the parent
    if os.getppid() != parent:  # it died before we asked
        os._exit(0)


def _serve(conn: Connection, encoder: Any, separator: int, dtype: str, parent: int) -> None:
    """A worker: encode each task that comes, send the result back; end with the parent.
    A thread takes tasks off the pipe as they come, so the parent never waits to send one
    while this process sends a result (both would wait on the other)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited
    _die_with(parent)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread a worker: processes scale
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def receive() -> None:
        task = None
        while True:
            while not conn.poll(1.0):
                if os.getppid() != parent:
                    inbox.put(None)
                    return
            with contextlib.suppress(EOFError, OSError):
                task = conn.recv()
            inbox.put(task)
            if task is None:
                return

    threading.Thread(target=receive, daemon=True).start()
    while (task := inbox.get()) is not None:
        try:
            result: tuple[bool, Any] = (True, encode_task(encoder, *task, separator, dtype))
        except Exception as e:  # noqa: BLE001 (reported by the parent, which stops)
            result = (False, f"{type(e).__name__}: {e}")
        conn.send(result)


class Workers:
    """``n`` tokenizing processes; :meth:`map` encodes tasks in them, results in order."""

    DEPTH = 2  # tasks a worker holds: memory is a few tasks' text and ids per worker

    def __init__(self, n: int, encoder: Any, separator: int, dtype: str) -> None:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.processes: list[Any] = []
        self.conns: list[Connection] = []
        try:
            for _ in range(n):
                mine, theirs = context.Pipe()
                process = context.Process(target=_serve, daemon=True, name="attnlab-tokenize",
                                          args=(theirs, encoder, separator, dtype, os.getpid()))
                process.start()
                theirs.close()
                self.processes.append(process)
                self.conns.append(mine)
        except BaseException:
            self.close()
            raise

    def _died(self, i: int) -> DataError:
        self.processes[i].join(1)
        return DataError(
            f"--workers: a tokenizing process died (exit code {self.processes[i].exitcode}; "
            "out of memory?); run the same command again to continue, with fewer --workers"
        )

    def _send(self, i: int, task: Task) -> None:
        try:
            self.conns[i].send(task)
        except OSError as e:  # its end of the pipe is gone
            raise self._died(i) from e

    def _receive(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        conn, process = self.conns[i], self.processes[i]
        wait([conn, process.sentinel])
        try:
            ok, result = conn.recv() if conn.poll() else (False, None)
        except (EOFError, OSError):
            ok, result = False, None
        if result is None:
            raise self._died(i)
        if not ok:
            raise DataError(f"--tokenizer: encoding failed in a worker process ({result})")
        return result

    def map(self, tasks: Iterator[tuple[Any, Task]]
            ) -> Iterator[tuple[Any, tuple[np.ndarray, np.ndarray]]]:  # fmt: skip
        """Each ``(meta, task)`` as ``(meta, encode_task(...))``, in order. Each worker
        holds ``DEPTH`` tasks, taken in turns, so it has the next one at hand while this
        process is busy (reading the corpus, writing a shard)."""
        busy: collections.deque = collections.deque()  # (worker, meta) in task order
        upcoming = next(tasks, None)

        def submit(i: int) -> None:
            nonlocal upcoming
            self._send(i, upcoming[1])  # type: ignore[index]
            busy.append((i, upcoming[0]))  # type: ignore[index]
            upcoming = next(tasks, None)

        for i in [*range(len(self.conns))] * self.DEPTH:
            if upcoming is not None:
                submit(i)
        while busy:
            i, meta = busy.popleft()
            result = self._receive(i)
            if upcoming is not None:
                submit(i)
            yield meta, result

    def close(self) -> None:
        """End every worker now (a task in flight is dropped)."""
        for process in self.processes:
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join(5)
        for conn in self.conns:
            conn.close()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encoded(tasks: Iterator[tuple[Any, Task]], encoder: Any, workers: int, separator: int,
            dtype: str) -> Iterator[tuple[Any, tuple[np.ndarray, np.ndarray]]]:  # fmt: skip
    """Each task with its ids, in order: in this process (``workers`` 0) or in workers."""
    if workers == 0:
        for meta, (texts, ends) in tasks:
            yield meta, encode_task(encoder, texts, ends, separator, dtype)
        return
    with Workers(workers, encoder, separator, dtype) as pool:
        yield from pool.map(tasks)
