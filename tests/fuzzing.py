"""Shared pieces of the fuzz tests: Hypothesis settings, damage to a file's bytes, running
a decision with its output captured and its time bounded, and ``attnlab-train``'s exit
code and output in this process (with the one ``error:`` line a refusal prints).

The default suite runs each fuzz target on a few dozen examples drawn from a fixed seed
(``derandomize``), so CI sees the same cases every time; ``-m slow`` runs thousands,
freshly drawn. A failing example Hypothesis finds is shrunk; copy it into the target's
regression list (``@example``) so the default suite keeps it.
"""

from __future__ import annotations

import contextlib
import io
import signal
import traceback
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

T = TypeVar("T")

_COMMON = {
    "deadline": None,  # runs take ~0.1–2 s, and their time varies with the machine's load
    "database": None,  # no .hypothesis folder in the checkout
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
DEFAULT = settings(max_examples=30, derandomize=True, **_COMMON)
MANY = settings(max_examples=1500, **_COMMON)


@st.composite
def damage(draw: st.DrawFn, size: int) -> list[tuple[str, int, int]]:
    """One to three edits of a file of ``size`` bytes: (kind, position, value)."""
    edit = st.one_of(
        st.tuples(st.just("flip"), st.integers(0, max(size - 1, 0)), st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.integers(0, size), st.just(0)),
        st.tuples(st.just("append"), st.integers(1, 64), st.integers(0, 2**31)),
    )
    return draw(st.lists(edit, min_size=1, max_size=3))


def damaged(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    """``data`` with ``edits`` (drawn by :func:`damage`) applied."""
    out = bytearray(data)
    for kind, position, value in edits:
        if kind == "flip" and out:
            out[position % len(out)] ^= value
        elif kind == "truncate":
            del out[position % (len(out) + 1) :]
        elif kind == "append":
            out += np.random.default_rng(value).integers(0, 256, position, dtype=np.uint8).tobytes()
    return bytes(out)


class TimedOut(Exception):
    """A decision took longer than its bound: a hang, for a fuzz target."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimedOut in the main thread if the block runs longer than ``seconds``."""

    def expire(signum: int, frame: object) -> None:
        raise TimedOut(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def captured(decide: Callable[[], T]) -> tuple[T | BaseException, str]:
    """(``decide()``'s value, or what it raised; what it printed to stdout and stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            return decide(), out.getvalue()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 (every outcome is judged)
            return exc, out.getvalue()


def one_error_line(printed: str) -> str:
    """The one ``error:`` line of a refusal's output (no traceback, no second error)."""
    assert "Traceback" not in printed, printed[-3000:]
    errors = [line for line in printed.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, printed[-3000:]
    return errors[0]


def train_exit(args: list[str]) -> tuple[int, str]:
    """(``attnlab-train args``' exit code, what it printed), run in this process; an
    exception escaping the entry point fails the test."""
    from attnlab import train as attnlab_train
    from attnlab.cli.rundir import release_all

    def run() -> int:
        try:
            return attnlab_train.main(args)
        finally:
            release_all()

    outcome, printed = captured(run)
    if isinstance(outcome, SystemExit):
        return int(outcome.code or 0), printed
    assert not isinstance(outcome, BaseException), "".join(traceback.format_exception(outcome))
    return int(outcome), printed
