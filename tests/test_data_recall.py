"""data=associative_recall: MQAR sequences (Arora et al. 2024, §3.1) scored on the answers only."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.data.recall import IGNORE, AssociativeRecallDataModule, recall_example
from attnlab.errors import ConfigError
from composed_runs import train_fast


def test_every_answer_is_the_value_paired_with_its_query() -> None:
    rng = np.random.default_rng(0)
    tokens, labels = recall_example(rng, n_pairs=6, n_queries=3, n_keys=10, n_values=5, gap=2)
    assert len(tokens) == 2 * 6 + 2 + 2 * 3 and len(labels) == len(tokens) - 1
    pairs = dict(zip(tokens[0:12:2], tokens[1:12:2], strict=True))
    assert len(pairs) == 6  # distinct keys
    scored = [t for t, label in enumerate(labels) if label != IGNORE]
    assert scored == [14, 16, 18]  # each query's position, after the pairs and the gap
    for t in scored:
        assert tokens[t] in pairs and labels[t] == pairs[tokens[t]] == tokens[t + 1]
    assert all(k < 10 for k in pairs) and all(10 <= v < 15 for v in pairs.values())


def test_batches_are_seeded_and_in_the_lm_format() -> None:
    def first(seed: int) -> dict:
        dm = AssociativeRecallDataModule(n_pairs=8, n_queries=4, n_keys=16, n_values=16,
                                         train_size=40, val_size=8, test_size=8, batch_size=4,
                                         seed=seed)  # fmt: skip
        dm.setup("fit")
        return next(iter(dm.val_dataloader()))

    batch = first(0)
    assert batch["tokens"].shape == (4, 24) and batch["labels"].shape == (4, 23)
    assert int((batch["labels"] != IGNORE).sum()) == 4 * 4
    assert torch.equal(first(0)["tokens"], batch["tokens"])
    assert not torch.equal(first(1)["tokens"], batch["tokens"])


@pytest.mark.parametrize("kwargs,needle", [
    ({"n_pairs": 80, "n_keys": 64}, "data.n_keys"),
    ({"n_queries": 40, "n_pairs": 32}, "data.n_queries"),
    ({"gap": -1}, "data.gap"),
])  # fmt: skip
def test_bad_settings_are_one_line(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        AssociativeRecallDataModule(**kwargs)


RECALL = ["data=associative_recall", "data.n_pairs=4", "data.n_queries=2", "data.n_keys=8",
          "data.n_values=8"]  # fmt: skip


def test_recall_trains_a_causal_lm_and_refuses_a_masked_one(tmp_path: Path) -> None:
    result = train_fast(["model=decoder_only", *RECALL], tmp_path / "gpt")
    assert result["status"] == "completed" and math.isfinite(result["metrics"]["test/loss"])
    with pytest.raises(ConfigError, match="masked LM"):
        train_fast(["model=encoder_only", *RECALL], tmp_path / "bert")
