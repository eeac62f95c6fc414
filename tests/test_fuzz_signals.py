"""Fuzzing signal timing (slow): SIGINT, SIGTERM, SIGUSR1 or SIGKILL at a random moment of a
real training process — between steps, during a checkpoint write, during validation —
and afterwards the run directory resumes with ``ckpt_path=last`` and the resumed run ends
with the weights of an uninterrupted one.

Validation (and so a ``best`` and ``last.ckpt`` write) comes every 2 steps, so a good
share of the draws land in a checkpoint write.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_runs import finish, run, start
from fuzzing import DEFAULT

TOTAL = 24
RUN = [
    "data=reverse", "data.train_size=96", "data.val_size=16", "data.batch_size=16",
    "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.dropout=0.2",
    "optim.warmup_steps=2", f"optim.decay_steps={TOTAL}", "trainer.max_epochs=-1",
    f"trainer.max_steps={TOTAL}", "trainer.val_check_interval=2",
    "trainer.check_val_every_n_epoch=null", "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1", "+logger.csv.flush_logs_every_n_steps=1", "test=false",
    "seed=5",
]  # fmt: skip
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGUSR1": signal.SIGUSR1,
           "SIGKILL": signal.SIGKILL}  # fmt: skip
EXITS = {"SIGINT": (130, 0), "SIGTERM": (143, 0), "SIGUSR1": (143, 0), "SIGKILL": (-9, 0)}


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == TOTAL
    return checkpoint["state_dict"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    result = run("train", *RUN, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    return weights(run_dir)


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
@settings(DEFAULT, max_examples=10)
@given(name=st.sampled_from(sorted(SIGNALS)), delay=st.floats(0.0, 1.5))
def test_a_signal_at_any_moment_leaves_a_run_that_resumes_exactly(
    name: str, delay: float, reference: dict[str, torch.Tensor],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    run_dir = tmp_path_factory.mktemp("signalled") / "run"
    proc = start("train", *RUN, f"hydra.run.dir={run_dir}")
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
    resumed = run("train", *RUN, "ckpt_path=last", f"hydra.run.dir={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = weights(run_dir)
    assert final.keys() == reference.keys()
    for key, value in reference.items():
        assert torch.equal(final[key], value), key
