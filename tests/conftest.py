"""Shared test setup: offline, quiet, deterministic, small."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning.pytorch  # noqa: F401  (its log handler binds to the session's stderr, not a test's)
import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

torch.set_num_threads(1)  # tiny models: more intra-op threads only add synchronisation

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ATTNLAB_DATA_ROOT", REPO_ROOT.parent / "shared" / "data"))
if SHARED_DATA.is_dir():  # the presets read it (they default to ./data, what attnlab-data fetches)
    os.environ.setdefault("ATTNLAB_DATA_ROOT", str(SHARED_DATA))


@contextmanager
def study_script(relative: str, name: str) -> Iterator[ModuleType]:
    """A study's analysis script (``relative`` to the repository) imported as module ``name``,
    registered in sys.modules for the block (its dataclasses need it there)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


def reference_diverges(main: Any, out: Path, overrides: list[str], tested: str) -> None:
    """A gate's reference script (experiments/reference_*.py) on ``overrides`` with no
    clipping, no warm-up and an absurd rate: it ends diverged (exit 1), untested."""
    from attnlab.compare.runs import read_run

    with pytest.raises(SystemExit) as exit_:  # no clipping, no warm-up, an absurd rate
        main([str(out), *overrides, "optim.lr=1e30", "optim.warmup_steps=0",
              "trainer.gradient_clip_val=0"])  # fmt: skip
    assert exit_.value.code == 1
    run = read_run(out)
    assert run.status == "diverged" and tested not in run.metrics


def reference_refuses(main: Any, out: Path, overrides: list[str], message: str,
                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A gate's reference script refuses ``overrides`` in one line (exit 2), writing nothing."""
    with pytest.raises(SystemExit) as exit_:
        main([str(out), *overrides])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not out.exists()


@pytest.fixture
def shared_data() -> Path:
    """The real data sets: $ATTNLAB_DATA_ROOT, else ../shared/data beside the checkout (a
    copy of what attnlab-data fetches); the test is skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def fast_run(tmp_path: Path):  # noqa: ANN201
    """Train one fast_dev_run of a tiny model through the real configs; returns train()'s result."""
    from composed_runs import train_fast

    def run(*overrides: str) -> dict:
        return train_fast(list(overrides), tmp_path / "run")

    return run
