"""Which overrides define a run (its identity) and which only say where or how it runs."""

from __future__ import annotations

# Overrides that say where or how a run executes or is labelled, not what it computes: a
# run's name (W&B) and ckpt_path=last ignore them, so a resumed run may change
# trainer.max_epochs, the logger, the launcher (hydra/launcher=…), its tags or test=false.
NOT_RUN_IDENTITY = ("hydra", "ckpt_path", "trainer", "logger", "callbacks", "paths", "tags",
                    "test", "overwrite", "optimized_metric", "experiment_name", "resume",
                    "retry_failed")  # fmt: skip


def identity_overrides(overrides: list[str]) -> list[str]:
    """The overrides that define a run's settings, in their given order."""
    out = []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key.split(".")[0].split("/")[0] not in NOT_RUN_IDENTITY:
            out.append(override)
    return out
