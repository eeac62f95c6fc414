"""Shared pieces of the fuzz tests: Hypothesis settings, and running a decision with its
output captured and its time bounded.

The default suite runs each fuzz target on a few dozen examples drawn from a fixed seed
(``derandomize``), so CI sees the same cases every time; ``-m slow`` runs thousands,
freshly drawn. A failing example Hypothesis finds is shrunk; copy it into the target's
regression list (``@example``) so the default suite keeps it.
"""

from __future__ import annotations

import contextlib
import io
import signal
from collections.abc import Callable, Iterator
from typing import TypeVar

from hypothesis import HealthCheck, settings

T = TypeVar("T")

_COMMON = {
    "deadline": None,  # runs take ~0.1–2 s, and their time varies with the machine's load
    "database": None,  # no .hypothesis folder in the checkout
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
DEFAULT = settings(max_examples=30, derandomize=True, **_COMMON)
MANY = settings(max_examples=1500, **_COMMON)


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
