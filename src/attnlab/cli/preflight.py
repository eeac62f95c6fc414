"""What a training run is refused for before its run directory exists: the pieces that fit
together (architecture and data), and the machine it is asked to run on (the accelerator,
a kernel that cannot train there).

These checks read the composed config and this machine only; nothing is built. A job of a
sweep makes them again (:func:`attnlab.cli.pipeline.check_config`), and the same rules hold
where the run is built, for callers that skip this step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnlab.errors import ConfigError

# what Lightning takes besides the names of its registry ("gpu": CUDA or Apple's MPS)
ACCELERATOR_ALIASES = ("auto", "gpu")


def check_before_run(cfg: dict[str, Any], model: Any, this_machine: bool = False) -> None:
    """``cfg``: the resolved config as plain containers; ``model``: its checked ModelConfig.
    ``this_machine``: also whether it can run here (the accelerator, a kernel's backward);
    a config checked for another machine (a cluster's job, a documented GPU command) skips
    that. Raises ConfigError (one line)."""
    check_architecture_serves_data(cfg.get("model") or {}, model, cfg.get("data") or {},
                                   cfg.get("task") or {})  # fmt: skip
    check_optimiser_strategy(cfg.get("optim") or {}, cfg.get("trainer") or {})
    if not this_machine:
        return
    trainer = cfg.get("trainer") or {}
    accelerator = str(trainer.get("accelerator", "cpu"))
    check_accelerator(accelerator, cfg.get("experiment_name"))
    if cfg.get("train", True):
        check_trains_here(model, accelerator)


def check_optimiser_strategy(optim: dict[str, Any], trainer: dict[str, Any]) -> None:
    """An optimiser that needs each weight whole (Muon orthogonalises a matrix, Adafactor
    factors its second moment over rows and columns) is refused under a strategy that
    hands the optimiser flat shards of the weights (FSDP, DeepSpeed)."""
    from attnlab.optim.registry import OPTIMISERS

    optimiser = OPTIMISERS.get(optim.get("name", OPTIMISERS.default))
    if not optimiser.shards and sharded(trainer):
        raise ConfigError(
            f"optim.name={optimiser.name} needs each weight matrix whole, but the sharded "
            f"strategy {strategy_name(trainer)} hands the optimiser flat shards of them; use "
            "trainer=ddp, or optim.name=adamw or lion under FSDP"
        )


def strategy_name(trainer: Any) -> str:
    """``trainer.strategy`` as a name: its ``_target_`` when it is a mapping."""
    strategy = trainer.get("strategy") if trainer is not None else None
    return str((strategy.get("_target_", "") if isinstance(strategy, Mapping) else strategy) or "")


def sharded(trainer: Any) -> bool:
    """Whether the strategy hands each process flat shards of the weights (FSDP, DeepSpeed)."""
    name = strategy_name(trainer).lower()
    return "fsdp" in name or "deepspeed" in name


Z_LOSS_TASKS = ("lm", "seq2seq")  # task.z_loss: a language model's output softmax
# keys that a model reads for some tasks only, and those tasks
TASK_KEYS = {"pool": ("classification", "image_classification"), "final_softcap": ("lm", "seq2seq")}


def check_architecture_serves_data(
    given: dict[str, Any], model: Any, data: dict[str, Any], task_keys: dict[str, Any] | None = None
) -> None:
    """The architecture's feeding declares the kind of task the data module serves, and a
    key set for the model is one the task reads (``model.pool``: classification), as is
    ``task.z_loss`` (the output softmax of a language model: lm and seq2seq)."""
    from attnlab.cli.schema import check_data_class
    from attnlab.components.architectures import check_compatible
    from attnlab.model_config import is_set

    data_cls = check_data_class(data.get("_target_"))
    if data_cls is None:
        return  # the allowlist refuses it with its own reason
    task = data_cls.task_for({k: v for k, v in data.items() if k != "_target_"})
    check_compatible(model.name, task, model.get("prefix_lm") is True)
    for key, tasks in TASK_KEYS.items():
        if is_set(given.get(key, "???")) and key in model and task not in tasks:
            raise ConfigError(f"model.{key}={given[key]} applies to {' or '.join(tasks)} "
                              f"data, and this data is {task}; remove it")  # fmt: skip
    positions = (task_keys or {}).get("loss_by_position")
    if positions and task != "lm":
        raise ConfigError(f"task.loss_by_position={list(positions)} buckets a language model's "
                          f"loss by context length (lm data), and this data is {task}; set "
                          "task.loss_by_position=null")  # fmt: skip
    z = (task_keys or {}).get("z_loss") or 0
    if z and task not in Z_LOSS_TASKS:
        raise ConfigError(f"task.z_loss={z} is PaLM's loss on a language model's output "
                          f"softmax (lm or seq2seq data), and this data is {task}; set "
                          "task.z_loss=0")  # fmt: skip


def check_accelerator(accelerator: str, preset: Any = None) -> None:
    """``trainer.accelerator`` names an accelerator Lightning has and this machine offers."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    names = sorted({*AcceleratorRegistry.available_accelerators(), *ACCELERATOR_ALIASES})
    if accelerator not in names:
        raise ConfigError(
            f"trainer.accelerator={accelerator} is not an accelerator Lightning knows; use one "
            f"of: {', '.join(names)} (or trainer=cpu, trainer=gpu)"
        )
    if accelerator == "auto" or _available(accelerator):
        return
    what = f"experiment={preset} is a preset for GPUs and " if preset and accelerator in (
        "gpu", "cuda") else ""  # fmt: skip
    raise ConfigError(
        f"{what}trainer.accelerator={accelerator} asks for a device this machine does not "
        f"have; run on a machine with one, or add trainer=cpu"
    )


def _available(accelerator: str) -> bool:
    from lightning.pytorch.accelerators import AcceleratorRegistry

    if accelerator == "gpu":  # Lightning's "gpu": CUDA, else Apple's MPS
        return _available("cuda") or _available("mps")
    try:
        return bool(type(AcceleratorRegistry.get(accelerator)).is_available())
    except Exception:  # an accelerator whose probe needs a package that is missing
        return False


def check_trains_here(model: Any, accelerator: str) -> None:
    """``model.attn_impl=flex`` trains on CUDA only: torch has no FlexAttention backward on a
    CPU."""
    import torch

    from attnlab.nn.flex import CPU_BACKWARD

    on_gpu = accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    if model.get("attn_impl") == "flex" and not on_gpu:
        raise ConfigError(CPU_BACKWARD)
