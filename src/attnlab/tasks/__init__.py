"""LightningModules: how each architecture is fed and what loss it learns."""

from __future__ import annotations

from attnlab.errors import ConfigError
from attnlab.registry import Registry
from attnlab.tasks.base import OptimConfig, Task, lr_multiplier
from attnlab.tasks.classification import ClassificationTask, ImageClassificationTask
from attnlab.tasks.language_modeling import LanguageModelTask
from attnlab.tasks.seq2seq import Seq2SeqTask

TASKS: Registry[type[Task]] = Registry("data task")


def check_compatible(architecture: str, task: str, prefix_lm: bool = False) -> None:
    """Raise ConfigError for an architecture/task pair its feeding declaration does not serve."""
    from attnlab.models import ARCHITECTURES

    feeding = ARCHITECTURES.get(architecture).feeding
    if not feeding.serves(task):
        raise ConfigError(
            f"model={architecture} does not fit a {task} data set: {feeding.refusal(task)}"
        )
    if prefix_lm and task == "lm":
        raise ConfigError(
            "model.prefix_lm=true attends bidirectionally over an input, and language-modelling "
            "data has none; use it with seq2seq or classification data, or remove it"
        )


def task_class(task: str) -> type[Task]:
    return TASKS.get(task)


__all__ = [
    "ClassificationTask",
    "ImageClassificationTask",
    "LanguageModelTask",
    "OptimConfig",
    "Seq2SeqTask",
    "TASKS",
    "Task",
    "check_compatible",
    "lr_multiplier",
    "task_class",
]
