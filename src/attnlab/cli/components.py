"""How a configured callback or logger is built: from what its class declares it needs.

A class of attnlab's declares the run's values its constructor takes in ``run_inputs``
(``("outcome",)``: the run's :class:`~attnlab.callbacks.outcome.Outcome`; ``("resume_step",)``:
the step a resumed run continues from). Classes attnlab does not own are described by
:data:`FOREIGN_NEEDS`, found through the class's bases, so a subclass of Lightning's
progress bar or W&B logger is treated as its base. No component is recognised by its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Needs:
    """What a configured component needs of the run."""

    inputs: tuple[str, ...] = ()  # constructor keywords the run supplies
    with_progress_bar: bool = False  # built only when the trainer shows a progress bar
    factory: str | None = None  # "module:function" that builds it from (cfg, node, run_dir)


# classes attnlab does not own, by the qualified name of a base class
FOREIGN_NEEDS: dict[str, Needs] = {
    "lightning.pytorch.callbacks.progress.progress_bar.ProgressBar": Needs(with_progress_bar=True),
    "lightning.pytorch.loggers.wandb.WandbLogger": Needs(
        factory="attnlab.cli.wandb_setup:prepare_wandb"
    ),
    "lightning.pytorch.loggers.mlflow.MLFlowLogger": Needs(
        factory="attnlab.cli.mlflow_setup:prepare_mlflow"
    ),
}


def component_class(node: Any) -> type | None:
    """The class a node's (already allowlisted) ``_target_`` names; None when it is not a
    class that imports (the build then reports the problem in its own words)."""
    from hydra.utils import get_class

    try:
        return get_class(str(node["_target_"]))
    except Exception:  # noqa: BLE001 — any failure is the build's to report
        return None


def needs_of(cls: type | None) -> Needs:
    if cls is None:
        return Needs()
    for base in cls.__mro__:
        found = FOREIGN_NEEDS.get(f"{base.__module__}.{base.__qualname__}")
        if found is not None:
            return found
    return Needs(inputs=tuple(getattr(cls, "run_inputs", ())))


def supplied(needs: Needs, run: Mapping[str, Any]) -> dict[str, Any]:
    """The run's values that a component declared it takes."""
    return {key: run[key] for key in needs.inputs if key in run}
