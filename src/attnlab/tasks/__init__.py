"""LightningModules: how each architecture is fed and what loss it learns."""

from __future__ import annotations

from attnlab.errors import ConfigError
from attnlab.registry import Registry
from attnlab.tasks.base import OptimConfig, Task, lr_multiplier
from attnlab.tasks.classification import ClassificationTask
from attnlab.tasks.language_modeling import LanguageModelTask
from attnlab.tasks.seq2seq import Seq2SeqTask

TASKS: Registry[type[Task]] = Registry("data task")
TASKS.register("seq2seq")(Seq2SeqTask)
TASKS.register("lm")(LanguageModelTask)
TASKS.register("classification")(ClassificationTask)

# Which architecture serves which task (DESIGN.md); a pair missing here is refused.
INCOMPATIBLE = {
    ("encoder_only", "seq2seq"): "an encoder-only model cannot generate a target sequence; "
    "use model=decoder_only or model=encoder_decoder",
    ("encoder_decoder", "lm"): "language modelling has no source sequence for an encoder; "
    "use model=decoder_only (causal LM) or model=encoder_only (masked LM)",
}


def check_compatible(architecture: str, task: str, prefix_lm: bool = False) -> None:
    """Raise ConfigError for an architecture/task pair that has no meaning."""
    reason = INCOMPATIBLE.get((architecture, task))
    if reason:
        raise ConfigError(f"model={architecture} does not fit a {task} data set: {reason}")
    if prefix_lm and task == "lm":
        raise ConfigError(
            "model.prefix_lm=true attends bidirectionally over an input, and language-modelling "
            "data has none; use it with seq2seq or classification data, or remove it"
        )


def task_class(task: str) -> type[Task]:
    return TASKS.get(task)


__all__ = [
    "ClassificationTask",
    "LanguageModelTask",
    "OptimConfig",
    "Seq2SeqTask",
    "TASKS",
    "Task",
    "check_compatible",
    "lr_multiplier",
    "task_class",
]
