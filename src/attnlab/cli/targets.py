"""The classes a config may build: attnlab's allowlist of ``_target_`` values.

Hydra's ``instantiate`` imports and calls whatever a ``_target_`` names, so a
run directory downloaded from a colleague, a W&B artifact or a paper's release
could run its author's code the moment ``attnlab-eval`` rebuilt it
(``_target_: builtins.open``, ``_target_: torch.load``, …). Every ``_target_``
anywhere in a config, the user's own command line included, is therefore
checked against this list as a *string*, before anything is imported or
called. Checkpoints are read with ``torch.load(weights_only=True)`` for the
same reason (:mod:`attnlab.cli.checkpoints`).

To build a class of your own from a config (a callback, a logger, a data
module), name its dotted path in the environment variable
``ATTNLAB_EXTRA_TARGETS`` (comma-separated) or add it to :data:`EXTRA_TARGETS`:
both live on your machine, never in a run directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from attnlab.errors import ConfigError

# what `data._target_` may name: every data module attnlab ships
DATA_MODULES = frozenset({
    "attnlab.data.synthetic.SyntheticDataModule",
    "attnlab.data.text.TextDataModule",
    "attnlab.data.tokens.TokensDataModule",
    "attnlab.data.translation.TranslationDataModule",
    "attnlab.data.classification.ClassificationDataModule",
    "attnlab.data.images.DigitsDataModule",
    "attnlab.data.images.ImageFolderDataModule",
    "attnlab.data.recall.AssociativeRecallDataModule",
})  # fmt: skip

# everything else conf/ builds: the Trainer, its strategy, callbacks and loggers
RUN_OBJECTS = frozenset({
    "lightning.pytorch.Trainer",
    "lightning.pytorch.strategies.DDPStrategy",
    "lightning.pytorch.strategies.FSDPStrategy",
    "attnlab.nn.layers.fsdp_wrap_policy",
    "lightning.pytorch.callbacks.ModelCheckpoint",
    "lightning.pytorch.callbacks.LearningRateMonitor",
    "attnlab.callbacks.lr_monitor.LearningRateMonitor",
    "lightning.pytorch.callbacks.RichProgressBar",
    "lightning.pytorch.callbacks.TQDMProgressBar",
    "lightning.pytorch.callbacks.EarlyStopping",
    "lightning.pytorch.callbacks.StochasticWeightAveraging",
    "lightning.pytorch.loggers.CSVLogger",
    "lightning.pytorch.loggers.TensorBoardLogger",
    "lightning.pytorch.loggers.WandbLogger",
    "lightning.pytorch.loggers.MLFlowLogger",
    "lightning.pytorch.profilers.SimpleProfiler",
    "lightning.pytorch.profilers.AdvancedProfiler",
    "lightning.pytorch.profilers.PyTorchProfiler",
    "attnlab.callbacks.resume.ContinuedCSVLogger",
    "attnlab.callbacks.throughput.TokenThroughput",
    "attnlab.callbacks.divergence.DivergenceGuard",
    "attnlab.callbacks.diagnostics.TrainingDiagnostics",
    "attnlab.callbacks.resume.RngState",
    "attnlab.callbacks.resume.LoaderPosition",
    "attnlab.callbacks.stop.GracefulStop",
    "attnlab.callbacks.progress.StepProgressBar",
    "attnlab.callbacks.progress.ValidateAtMaxSteps",
})  # fmt: skip

# your own classes: one dotted path each, here or in the environment variable
# ATTNLAB_EXTRA_TARGETS (comma-separated). Both are set on your machine, never read from a run.
EXTRA_TARGETS: set[str] = set()
ENV_VAR = "ATTNLAB_EXTRA_TARGETS"


def extra_targets() -> frozenset[str]:
    from_env = (t.strip() for t in os.environ.get(ENV_VAR, "").split(","))
    return frozenset(EXTRA_TARGETS) | frozenset(t for t in from_env if t)


def allowed_targets() -> frozenset[str]:
    return DATA_MODULES | RUN_OBJECTS | extra_targets()


def _targets(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, raw value) of every ``_target_`` under ``node``, interpolations unresolved."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, DictConfig | ListConfig):  # as plain values, interpolations unresolved
        node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict):
        items = ((str(k), v) for k, v in node.items())
    elif isinstance(node, list | tuple):
        items = ((str(i), v) for i, v in enumerate(node))
    else:
        return
    for key, child in items:
        if not path and key == "hydra":
            continue  # Hydra's own launcher and sweeper, from conf/ (never in a saved config.yaml)
        where = f"{path}.{key}" if path else key
        if key == "_target_":
            yield where, child
        else:
            yield from _targets(child, where)


def check_targets(cfg: Any, source: str) -> None:
    """Refuse, in one line, any ``_target_`` in ``cfg`` that attnlab does not build.

    ``source`` names where the config came from (a file, "the command line").
    Only the strings are read: nothing is imported, resolved or called. A
    ``_target_`` must be a literal dotted path (no ``${…}`` interpolation) from
    :func:`allowed_targets`; ``data._target_`` must be one of :data:`DATA_MODULES`.
    """
    allowed = allowed_targets()
    for key, value in _targets(cfg, ""):
        text = value if isinstance(value, str) else repr(value)
        if key == "data._target_" and text not in DATA_MODULES | extra_targets():
            raise ConfigError(
                f"{source}: {key}={text} is refused (not an attnlab data module; nothing was "
                f"imported or run); use one of: {', '.join(sorted(DATA_MODULES))}"
            )
        if text not in allowed:
            raise ConfigError(
                f"{source}: {key}={text} is refused (not a class attnlab builds; nothing was "
                "imported or run); restore the file from a trusted copy, or allow your own class "
                f"with {ENV_VAR}=<dotted.path> (or attnlab.cli.targets.EXTRA_TARGETS)"
            )
