"""A test-only callback: each DDP rank writes a checksum of its final parameters.

Loaded by tests/test_ddp.py into a training subprocess through
``+callbacks.rank_checksum._target_=rank_checksum.ParameterChecksum``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch


class ParameterChecksum(L.Callback):
    """On train end: ``param_checksum_rank<r>.json`` (sha256 of every parameter) in the run dir."""

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        digest = hashlib.sha256()
        for name, param in sorted(pl_module.named_parameters()):
            digest.update(name.encode())
            digest.update(param.detach().cpu().to(torch.float64).numpy().tobytes())
        path = Path(trainer.default_root_dir) / f"param_checksum_rank{trainer.global_rank}.json"
        record = {"rank": trainer.global_rank, "world_size": trainer.world_size,
                  "step": trainer.global_step, "sha256": digest.hexdigest()}  # fmt: skip
        path.write_text(json.dumps(record))


class RngChecksum(L.Callback):
    """After each training step: ``rng_rank<r>_step<s>.txt`` (sha256 of the torch CPU
    generator's state), so a resumed run's random states can be compared rank by rank."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        digest = hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()
        name = f"rng_rank{trainer.global_rank}_step{trainer.global_step}.txt"
        (Path(trainer.default_root_dir) / name).write_text(digest)


class TestExampleCount(L.Callback):
    """On test end: ``test_examples_rank<r>.txt``, how many test examples this rank scored."""

    def __init__(self) -> None:
        self.seen = 0

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any,
                          *args: Any) -> None:  # fmt: skip
        self.seen += int(batch["labels"].size(0))

    def on_test_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        name = f"test_examples_rank{trainer.global_rank}.txt"
        (Path(trainer.default_root_dir) / name).write_text(str(self.seen))


class BatchRows(L.Callback):
    """Before each training step: ``rows_rank<r>_step<s>.txt``, a short hash of each row of
    the batch's tokens, so the samples a run read can be compared across runs and ranks."""

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:  # fmt: skip
        rows = [hashlib.sha256(row.cpu().numpy().tobytes()).hexdigest()[:16]
                for row in batch["tokens"]]  # fmt: skip
        name = f"rows_rank{trainer.global_rank}_step{trainer.global_step}.txt"
        (Path(trainer.default_root_dir) / name).write_text("\n".join(rows))
