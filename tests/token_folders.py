"""A small prepared token folder for the data=tokens tests (attnlab-prepare in-process)."""

from __future__ import annotations

from pathlib import Path

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
