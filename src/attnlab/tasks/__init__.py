"""LightningModules: how each architecture is fed and what loss it learns."""

from __future__ import annotations

from attnlab.components.architectures import check_compatible
from attnlab.registry import Registry
from attnlab.tasks.base import OptimConfig, Task, lr_multiplier
from attnlab.tasks.classification import ClassificationTask, ImageClassificationTask
from attnlab.tasks.language_modeling import LanguageModelTask
from attnlab.tasks.seq2seq import Seq2SeqTask

TASKS: Registry[type[Task]] = Registry("data task", {
    "seq2seq": "attnlab.tasks.seq2seq:Seq2SeqTask",
    "lm": "attnlab.tasks.language_modeling:LanguageModelTask",
    "classification": "attnlab.tasks.classification:ClassificationTask",
    "image_classification": "attnlab.tasks.classification:ImageClassificationTask",
})  # fmt: skip


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
