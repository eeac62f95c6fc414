"""Fuzzing signal timing (slow): SIGINT, SIGTERM, SIGUSR1 or SIGKILL at a random moment of a
real training process — between steps, during a checkpoint write, during validation —
and afterwards the run directory resumes with ``ckpt_path=last`` and the resumed run ends
with the weights of an uninterrupted one. The same for ``attnlab-prepare``: one or two
signals at a random moment (training the tokenizer, tokenizing, writing a shard, saving
its progress), then the same command finishes with the bytes of an uninterrupted run.

Validation (and so a ``best`` and ``last.ckpt`` write) comes every 2 steps, so a good
share of the draws land in a checkpoint write; epochs are 6 or 10 steps long, so most
checkpoints are written mid-epoch. The draws cover two kinds of training loader (a
map-style data set and ``data=tokens``' stream) and both ways the schedule's length is
found (a fixed ``optim.decay_steps``, or the trainer's estimate under an epoch bound, which
makes Lightning build the loader before it reads the checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_runs import finish, group_ends, run, start
from fuzzing import DEFAULT
from token_folders import shard_sums

TOTAL = 24
COMMON = [
    "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.dropout=0.2",
    "optim.warmup_steps=2", f"trainer.max_steps={TOTAL}", "trainer.val_check_interval=2",
    "trainer.check_val_every_n_epoch=null", "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1", "+logger.csv.flush_logs_every_n_steps=1", "test=false",
    "seed=5",
]  # fmt: skip
# 6 or 10 steps an epoch, so most checkpoints are written in the middle of one
DATA = {
    "reverse": ["data=reverse", "data.train_size=96", "data.val_size=16", "data.batch_size=16"],
    "tokens": ["model=decoder_only", "data=tokens", "data.block_size=16", "data.batch_size=8",
               "data.samples_per_epoch=80"],
}  # fmt: skip
# where the schedule's length comes from: a fixed optim.decay_steps with no epoch bound
# (Lightning builds the loader after reading the checkpoint), or the trainer's own estimate
# under an epoch bound (Lightning builds the loader before: its saved position must still
# be put back)
LENGTHS = {
    "decay_steps": ["trainer.max_epochs=-1", f"optim.decay_steps={TOTAL}"],
    "trainer": ["trainer.max_epochs=100"],
}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGUSR1": signal.SIGUSR1,
           "SIGKILL": signal.SIGKILL}  # fmt: skip
EXITS = {"SIGINT": (130, 0), "SIGTERM": (143, 0), "SIGUSR1": (143, 0), "SIGKILL": (-9, 0)}


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == TOTAL
    return checkpoint["state_dict"]


@pytest.fixture(scope="module")
def token_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from token_folders import prepared_folder

    return prepared_folder(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def runs(token_folder: Path) -> Callable[[str, str], list[str]]:
    def args(data: str, length: str) -> list[str]:
        path = [f"data.path={token_folder}"] if data == "tokens" else []
        return [*DATA[data], *path, *LENGTHS[length], *COMMON]

    return args


@pytest.fixture(scope="module")
def references(
    tmp_path_factory: pytest.TempPathFactory, runs: Callable[[str, str], list[str]]
) -> Callable[[str, str], dict[str, torch.Tensor]]:
    """The uninterrupted run's final weights for each setting, trained once when first asked."""
    done: dict[tuple[str, str], dict[str, torch.Tensor]] = {}

    def reference(data: str, length: str) -> dict[str, torch.Tensor]:
        if (data, length) not in done:
            run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
            result = run("train", *runs(data, length), f"hydra.run.dir={run_dir}")
            assert result.returncode == 0, result.stderr[-3000:]
            done[data, length] = weights(run_dir)
        return done[data, length]

    return reference


def started_training(run_dir: Path, proc: object, timeout: float = 120) -> None:
    metrics, deadline = run_dir / "metrics.csv", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # type: ignore[attr-defined]
            return  # finished before the signal: the draw becomes "after the run"
        if metrics.is_file() and len(metrics.read_text().splitlines()) > 1:
            return
        time.sleep(0.02)
    raise AssertionError("training did not start")


@pytest.mark.slow
@settings(DEFAULT, max_examples=16)
@given(name=st.sampled_from(sorted(SIGNALS)), delay=st.floats(0.0, 1.5),
       data=st.sampled_from(sorted(DATA)), length=st.sampled_from(sorted(LENGTHS)))
def test_a_signal_at_any_moment_leaves_a_run_that_resumes_exactly(
    name: str, delay: float, data: str, length: str,
    runs: Callable[[str, str], list[str]],
    references: Callable[[str, str], dict[str, torch.Tensor]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    reference = references(data, length)
    args = runs(data, length)
    run_dir = tmp_path_factory.mktemp("signalled") / "run"
    proc = start("train", *args, f"hydra.run.dir={run_dir}")
    try:
        started_training(run_dir, proc)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(SIGNALS[name])
        first = finish(proc, timeout=120)
    finally:
        proc.kill()
    assert "Traceback" not in first.stderr, first.stderr[-3000:]
    summary = run_dir / "summary.json"
    done = summary.is_file() and '"status": "completed"' in summary.read_text()
    # a signal after the run completed (at the interpreter's exit) may end the process itself
    assert done or first.returncode in EXITS[name], first.stderr[-3000:]
    resumed = run("train", *args, "ckpt_path=last", f"hydra.run.dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = weights(run_dir)
    assert final.keys() == reference.keys()
    for key, value in reference.items():
        assert torch.equal(final[key], value), key


# -- attnlab-prepare ---------------------------------------------------------------------------
# Ctrl-C reaches the whole process group (as from a terminal); SIGTERM (a scheduler's stop)
# and SIGKILL the parent alone
PREPARE_EXITS = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -9}
TOKENIZERS = {"file": [], "bpe": ["--tokenizer", "bpe", "--vocab-size", "1000",
                                  "--tokenizer-sample-mb", "0.5"]}  # fmt: skip


@pytest.fixture(scope="module")
def preparations(tmp_path_factory: pytest.TempPathFactory
                 ) -> Callable[[str], tuple[list[str], list[str]]]:  # fmt: skip
    """Each tokenizer's arguments and the shards' checksums of an uninterrupted run."""
    from token_folders import signal_setting

    root = tmp_path_factory.mktemp("prepare_corpus")
    common = signal_setting(root)
    done: dict[str, tuple[list[str], list[str]]] = {}

    def preparation(tokenizer: str) -> tuple[list[str], list[str]]:
        if tokenizer not in done:
            args = [*common, *TOKENIZERS[tokenizer]]  # a later --tokenizer wins
            out = tmp_path_factory.mktemp("uninterrupted") / "out"
            result = run("prepare", *args, "--out", str(out))
            assert result.returncode == 0, result.stderr[-3000:]
            done[tokenizer] = args, shard_sums(out)
        return done[tokenizer]

    return preparation


@pytest.mark.slow
@settings(DEFAULT, max_examples=16)
@given(name=st.sampled_from(sorted(PREPARE_EXITS)), delay=st.floats(0.0, 4.0),
       second=st.none() | st.floats(0.0, 0.6), workers=st.sampled_from([0, 2]),
       tokenizer=st.sampled_from(sorted(TOKENIZERS)))
def test_a_signal_at_any_moment_leaves_a_preparation_that_finishes_exactly(
    name: str, delay: float, second: float | None, workers: int, tokenizer: str,
    preparations: Callable[[str], tuple[list[str], list[str]]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    args, reference = preparations(tokenizer)
    out = tmp_path_factory.mktemp("signalled") / "out"
    command = [*args, "--workers", str(workers), "--out", str(out)]
    proc = start("cli.prepare_entry", *command, new_session=True)  # as attnlab-prepare
    send = (lambda: os.killpg(proc.pid, signal.SIGINT)) if name == "SIGINT" else (
        lambda: proc.send_signal(SIGNALS[name]))  # fmt: skip
    try:
        time.sleep(delay)
        for wait in [0.0] if second is None else [0.0, second]:
            time.sleep(wait)
            with contextlib.suppress(ProcessLookupError):
                if proc.poll() is None:
                    send()
        first = finish(proc, timeout=30)  # a hang fails here
        assert group_ends(proc.pid), "a tokenizing process outlived the run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    # a signal while the interpreter itself starts (before Python's handlers exist, or in
    # its own initialization, which Python reports itself) ends it before attnlab runs
    early = (first.returncode == -SIGNALS[name] and not first.stdout) or (
        first.stderr.startswith("Fatal Python error: init_"))  # fmt: skip
    assert early or "Traceback" not in first.stderr, first.stderr[-3000:]
    # a signal after the folder was finished (at the interpreter's exit) may end the process
    done = (out / "index.json").is_file() and first.returncode == -SIGNALS[name]
    assert early or done or first.returncode in (0, PREPARE_EXITS[name]), first.stderr[-3000:]
    if not (early or done) and first.returncode not in (0, -9):
        lines = first.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("attnlab-prepare: stopped by"), lines
        assert lines[0].endswith(("run the same command again to continue",
                                  "before it began; nothing was written")), lines  # fmt: skip
    again = run("prepare", *command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert shard_sums(out) == reference


def test_a_signal_while_the_interpreter_exits_after_a_run_ends_it_without_a_traceback() -> None:
    """The regression the run fuzzer found: SIGINT landed in torch's exit hook after a
    completed run and printed KeyboardInterrupt's traceback."""
    import subprocess
    import sys

    script = ("import atexit, os, signal, sys; from attnlab.train import main; "
              "sys.argv = ['attnlab-train', '--options']; code = main(); "
              "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT)); "
              "atexit.register(lambda: print('exit hooks ran')); sys.exit(code)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "exit hooks ran" in done.stdout and done.returncode == 130
