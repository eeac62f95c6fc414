"""A small prepared token folder for the data=tokens tests (attnlab-prepare in-process)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def prepared_folder(root: Path, lines: int = 800, shard_tokens: int = 4096) -> Path:
    """About 50 characters a line of random words, one document a line, character
    tokens in shards of ``shard_tokens`` (so blocks cross shard boundaries)."""
    from attnlab import prepare as prep

    rng = np.random.default_rng(0)
    text = "\n".join(" ".join(rng.choice(WORDS, size=8)) for _ in range(lines)) + "\n"
    (root / "text.txt").write_text(text)
    out = root / "shards"
    argv = [str(root / "text.txt"), "--out", str(out), "--tokenizer", "char", "--unit", "line",
            "--val-fraction", "0.1", "--shard-tokens", str(shard_tokens), "--workers", "0"]
    prep.prepare(prep.parse(argv), argv)
    return out


# a model and run small enough that two steps on a prepared folder take a fraction of a second
TRAIN_ON = ["model=decoder_only", "data=tokens", "data.block_size=32", "data.batch_size=4",
            "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "trainer.max_steps=2",
            "trainer.enable_progress_bar=false", "test=false", "callbacks=none"]  # fmt: skip


def edit_index(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``folder``'s index.json with ``change`` applied to it."""
    index = json.loads((folder / "index.json").read_text())
    change(index)
    (folder / "index.json").write_text(json.dumps(index))


def copy_folder(folder: Path, to: Path) -> Path:
    """A copy of a prepared folder to damage (the original stays as prepare wrote it)."""
    shutil.rmtree(to, ignore_errors=True)
    return Path(shutil.copytree(folder, to))
