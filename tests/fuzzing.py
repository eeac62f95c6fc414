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
import math
import signal
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from attnlab.components import FAMILIES

T = TypeVar("T")

_COMMON = {
    "deadline": None,  # runs take ~0.1–2 s, and their time varies with the machine's load
    "database": None,  # no .hypothesis folder in the checkout
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
DEFAULT = settings(max_examples=30, derandomize=True, **_COMMON)
MANY = settings(max_examples=1500, **_COMMON)
# the command fuzzers (each example runs a whole command, ~0.2–3 s): a few fixed examples
# in the default suite, a few hundred fresh ones with -m slow
FEW = settings(max_examples=4, derandomize=True, **_COMMON)
SOME = settings(max_examples=300, **_COMMON)


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


def one_line_or_success(main: Callable[[list[str]], int], argv: list[str],
                        seconds: float = 120) -> tuple[int, str]:  # fmt: skip
    """Run a command's ``main(argv)``: it must return 0, or 2 having printed exactly one
    ``error:`` line; never a traceback, never a hang. Returns (code, what it printed)."""
    import traceback

    with time_limit(seconds):
        outcome, printed = captured(lambda: main(argv))
    if isinstance(outcome, SystemExit):
        outcome = int(outcome.code or 0)  # type: ignore[assignment]
    assert not isinstance(outcome, BaseException), "".join(traceback.format_exception(outcome))
    assert "Traceback" not in printed, printed[-3000:]
    assert outcome in (0, 2), (outcome, printed[-3000:])
    errors = [line for line in printed.splitlines() if line.startswith("error:")]
    assert len(errors) == (1 if outcome == 2 else 0), printed[-3000:]
    return int(outcome), printed


@st.composite
def with_faults(draw: st.DrawFn, parts: dict[str, tuple[list, list]], most: int = 2) -> dict:
    """One value per part of a command line: a valid one (``parts[name][0]``), except for up
    to ``most`` parts, which get a wrong one (``parts[name][1]``), so that every mistake is
    also met alone and a share of the examples runs the whole command."""
    faulty = draw(st.sets(st.sampled_from(sorted(parts)), max_size=most), label="faulty")
    return {name: draw(st.sampled_from(wrong if name in faulty else good), label=name)
            for name, (good, wrong) in parts.items()}  # fmt: skip


def train_tiny(run_dir: Any, overrides: list[str]) -> Any:
    """A finished ``attnlab-train`` run of a tiny model in ``run_dir`` (seconds)."""
    from attnlab import train as attnlab_train
    from attnlab.cli.rundir import release_all

    args = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "trainer.max_steps=4",
            "trainer.enable_progress_bar=false", "data.batch_size=4", *overrides,
            f"hydra.run.dir={run_dir}"]  # fmt: skip
    try:
        code, printed = captured(lambda: attnlab_train.main(args))
    finally:
        release_all()
    assert code == 0, printed[-3000:]
    return run_dir


# -- drawn values of config keys, as Hydra overrides ------------------------------------
REGISTRY_VALUES = {"model.name" if key == "name" else f"model.{key}": family.names()
                   for key, family in FAMILIES.items()}  # fmt: skip
OTHER_VALUES = {
    "optim.schedule": ["cosine", "inverse_sqrt", "constant", "wsd"],
    "optim.name": ["adamw", "muon", "lion", "adafactor"],
    "optim.decay_shape": ["linear", "sqrt", "cosine"],
    "optim.adjust_lr": ["match_rms_adamw", "original"],
    "decode.strategy": ["greedy", "sample", "beam"], "decode.cache": ["static", "dynamic", "auto"],
    "model.block": ["sequential", "parallel"], "model.init": ["paper", "xavier", "gpt2"],
    "model.tie_embeddings": ["true", "output", "false"], "model.attn_impl": ["sdpa", "math"],
    "model.cell": ["lstm", "gru", "rnn"], "trainer.precision": ["32-true", "bf16-mixed", "64"],
    "model.rnn_attention": ["bahdanau", "luong_dot", "luong_general", "none"],
}  # fmt: skip


def literal(value: Any) -> str:
    """``value`` as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(literal(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def values_for(
    key: str, integers: st.SearchStrategy[int] | None = None
) -> st.SearchStrategy[str]:
    """A valid name of the key, or a value of any type; ``integers``: the integers to draw
    (by default from -10^12 to 10^12, and small ones)."""
    names = REGISTRY_VALUES.get(key) or OTHER_VALUES.get(key) or []
    if integers is None:
        integers = st.one_of(st.integers(-(10**12), 10**12), st.integers(-3, 300))
    wrong = st.one_of(
        integers, st.floats(allow_nan=True),
        st.booleans(), st.none(), st.text(max_size=8), st.sampled_from(["", "é", "ЖЖ", " "]),
        st.lists(st.integers(-2, 40), max_size=3),
    ).map(literal)
    return st.one_of(st.sampled_from(names), wrong) if names else wrong
