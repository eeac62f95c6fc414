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


def json_lines_corpus(path: Path, megabytes: float, seed: int = 0) -> Path:
    """Records of 50–1500 random made-up words (accents included) up to ``megabytes``."""
    import json

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzéü"))
    words = np.array(["".join(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(3000)])
    lines, size = [], 0
    while size < megabytes * 1e6:
        text = " ".join(words[rng.integers(0, len(words), size=int(rng.integers(50, 1500)))])
        lines.append(json.dumps({"text": text}, ensure_ascii=False))
        size += len(lines[-1].encode()) + 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def signal_setting(root: Path, megabytes: float = 12) -> list[str]:
    """attnlab-prepare's arguments (all but --out) for a corpus that takes a few seconds in
    2 workers: JSON-lines, a byte-level BPE of 1000 tokens given by path, small shards."""
    from attnlab.data.tokenizers import BPETokenizer

    corpus = json_lines_corpus(root / "corpus.jsonl", megabytes)
    sample = corpus.read_text(encoding="utf-8")[:500_000].splitlines()
    BPETokenizer.train(sample, 1000).save(root / "bpe.json")
    return [str(corpus), "--tokenizer", str(root / "bpe.json"), "--val-fraction", "0.01",
            "--shard-tokens", "300000"]  # fmt: skip


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


def shard_sums(folder: Path) -> list[str]:
    """The SHA-256 of every shard of a prepared folder, split by split (its bytes, in short)."""
    from attnlab.data.shards import read_index

    index = read_index(folder)
    return [s["sha256"] for split in index["splits"].values() for s in split["shards"]]
