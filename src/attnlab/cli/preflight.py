"""What a training run is refused for before its run directory exists: the pieces that fit
together (architecture and data), and the machine it is asked to run on (the accelerator,
a kernel that cannot train there).

These checks read the composed config and this machine only; nothing is built. A job of a
sweep makes them again (:func:`attnlab.cli.pipeline.check_config`), and the same rules hold
where the run is built, for callers that skip this step.
"""

from __future__ import annotations

from typing import Any

from attnlab.errors import ConfigError

# what Lightning takes besides the names of its registry ("gpu": CUDA or Apple's MPS)
ACCELERATOR_ALIASES = ("auto", "gpu")


def check_before_run(cfg: dict[str, Any]) -> None:
    """``cfg``: the resolved config as plain containers. Raises ConfigError (one line)."""
    check_architecture_serves_data(cfg.get("model") or {}, cfg.get("data") or {})
    trainer = cfg.get("trainer") or {}
    accelerator = str(trainer.get("accelerator", "cpu"))
    check_accelerator(accelerator, cfg.get("experiment_name"))
    if cfg.get("train", True):
        check_trains_here(cfg.get("model") or {}, accelerator)


def check_architecture_serves_data(model: dict[str, Any], data: dict[str, Any]) -> None:
    """The architecture's feeding declares the kind of task the data module serves."""
    from attnlab.cli.schema import check_data_class
    from attnlab.tasks import check_compatible

    data_cls = check_data_class(data.get("_target_"))
    name = model.get("name")
    if data_cls is None or not isinstance(name, str):
        return  # the allowlist and the model keys refuse these with their own reasons
    config = {k: v for k, v in data.items() if k != "_target_"}
    check_compatible(name, data_cls.task_for(config), bool(model.get("prefix_lm", False)))


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


def check_trains_here(model: dict[str, Any], accelerator: str) -> None:
    """``model.attn_impl=flex`` trains on CUDA only: torch has no FlexAttention backward on a
    CPU."""
    import torch

    from attnlab.nn.flex import CPU_BACKWARD

    on_gpu = accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    if model.get("attn_impl") == "flex" and not on_gpu:
        raise ConfigError(CPU_BACKWARD)
