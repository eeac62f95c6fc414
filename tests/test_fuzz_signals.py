"""Fuzzing signal timing (slow): SIGINT, SIGTERM, SIGUSR1 or SIGKILL at a random moment of a
real training process — between steps, during a checkpoint write, during validation —
and afterwards the run directory resumes with ``ckpt_path=last`` and the resumed run ends
with the weights of an uninterrupted one.

Validation (and so a ``best`` and ``last.ckpt`` write) comes every 2 steps, so a good
share of the draws land in a checkpoint write; epochs are 6 or 10 steps long, so most
checkpoints are written mid-epoch. The draws cover two kinds of training loader (a
map-style data set and ``data=tokens``' stream) and both ways the schedule's length is
found (a fixed ``optim.decay_steps``, or the trainer's estimate under an epoch bound, which
makes Lightning build the loader before it reads the checkpoint).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_runs import finish, run, start
from fuzzing import DEFAULT

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
