"""``trainer.deterministic=true``: two runs of the same config and seed on a CPU end with
bit-identical weights — dropout on, shuffled batches, data loaded by seeded worker
processes (``seed_everything(workers=True)`` gives each worker its own derived seed)."""

from __future__ import annotations

from pathlib import Path

import torch

from attnlab.cli.run import train
from cli_runs import compose_run

RUN = [
    "data=reverse", "data.train_size=96", "data.val_size=16", "data.batch_size=16",
    "data.num_workers=2", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
    "model.dropout=0.2", "trainer.max_steps=8", "trainer.max_epochs=-1",
    "trainer.log_every_n_steps=4", "trainer.enable_progress_bar=false",
    "trainer.deterministic=true", "test=false", "seed=5",
]  # fmt: skip


def _weights(run_dir: Path, *extra: str) -> dict[str, torch.Tensor]:
    result = train(compose_run([*RUN, *extra], run_dir), run_dir)
    assert result["status"] == "completed", result
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu",
                            weights_only=False)  # fmt: skip
    return checkpoint["state_dict"]


def test_two_deterministic_runs_end_with_bit_identical_weights(tmp_path: Path) -> None:
    first, second = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert first.keys() == second.keys() and len(first) > 4
    for name, value in first.items():
        assert torch.equal(value, second[name]), name
    # and the runs did train: another seed ends elsewhere
    other = _weights(tmp_path / "c", "seed=6")
    assert any(not torch.equal(value, other[name]) for name, value in first.items())
