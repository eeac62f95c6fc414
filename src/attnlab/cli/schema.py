"""One schema for the composed config: every user-facing key's type and range, checked up front.

The schema is the code's own signatures, not a second copy of them:

* ``model``: the keys its architecture and chosen components declare
  (:class:`~attnlab.model_config.ModelConfig`, :mod:`attnlab.components`);
* ``optim``: the keys the chosen optimiser and schedule read (:mod:`attnlab.optim.registry`),
  typed and ranged by :class:`attnlab.options.OptimConfig`;
* ``task``, ``decode`` and the top-level keys: the dataclasses of
  :mod:`attnlab.options` (annotations for types, ``__post_init__`` for ranges);
* ``data``: the ``__init__`` of the data module ``data._target_`` names (one of
  :data:`attnlab.cli.targets.DATA_MODULES`, so importing it is safe);
* ``trainer``: the ``__init__`` of ``lightning.pytorch.Trainer``.

A key no signature knows is refused with the nearest valid spelling
(``+sed=1`` → "did you mean seed?"); a value of the wrong type or range is
refused with the rule it breaks. Each check raises a one-line ConfigError.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from attnlab.errors import ConfigError
from attnlab.value_checks import check_keys, nearest

# top-level nodes that are config groups, checked on their own (or free-form: logger, callbacks)
GROUPS = ("model", "data", "trainer", "logger", "callbacks", "paths", "optim", "task", "decode")
PATH_KEYS = ("log_dir", "data_dir")
# trainer arguments attnlab passes itself
TRAINER_SET_BY_ATTNLAB = ("callbacks", "logger", "default_root_dir")




def check_dataclass(cls: type, values: dict[str, Any], prefix: str) -> Any:
    """Types from the dataclass's annotations, then ranges from its ``__post_init__``."""
    hints = typing.get_type_hints(cls)
    check_keys(values, {f.name: hints[f.name] for f in dataclasses.fields(cls)}, prefix)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{prefix.rstrip('.')}: {exc}") from None


def signature_hints(func: Any) -> dict[str, Any]:
    """Keyword parameters of ``func`` with their (evaluated) annotations."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # an annotation that cannot be evaluated here: check names only
        hints = {}
    params = inspect.signature(func).parameters
    return {
        name: hints.get(name, Any)
        for name, p in params.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def check_data_class(target: Any) -> type | None:
    """The data module class ``data._target_`` names, imported only when allowlisted."""
    import importlib

    from attnlab.cli.targets import DATA_MODULES, extra_targets

    if target not in DATA_MODULES | extra_targets():
        return None
    module, _, name = str(target).rpartition(".")
    return getattr(importlib.import_module(module), name)


def check_data(values: dict[str, Any]) -> None:
    """``data.*`` against the chosen data module's constructor."""
    cls = check_data_class(values.get("_target_"))
    if cls is None:
        return  # check_targets refuses it with the reason
    rest = {k: v for k, v in values.items() if k != "_target_"}
    check_keys(rest, signature_hints(cls.__init__), "data.")
    if rest.get("batch_size", 1) < 1:
        raise ConfigError(f"data.batch_size={rest['batch_size']} must be an integer >= 1")
    seed = rest.get("seed", 0)
    if isinstance(seed, int) and not 0 <= seed < 2**32:  # numpy's and torch's seed range
        raise ConfigError(f"data.seed={seed} must be an integer in [0, 2^32)")


TRAINER_RANGES = {
    "max_steps": (lambda v: v >= -1, ">= 1, or -1 for no limit"),
    "max_epochs": (lambda v: v is None or v >= -1, ">= 1, or -1 for no limit"),
    "min_epochs": (lambda v: v is None or v >= 0, ">= 0"),
    "accumulate_grad_batches": (lambda v: v >= 1, "an integer >= 1"),
    "log_every_n_steps": (lambda v: v is None or v >= 1, "an integer >= 1"),
    "check_val_every_n_epoch": (lambda v: v is None or v >= 1, "an integer >= 1 (or null)"),
    "gradient_clip_val": (lambda v: v is None or v >= 0, "a number >= 0 (or null)"),
    "num_nodes": (lambda v: v >= 1, "an integer >= 1"),
}


def check_trainer(values: dict[str, Any]) -> None:
    """``trainer.*`` against ``lightning.pytorch.Trainer``'s own signature."""
    import lightning.pytorch as pl

    hints = signature_hints(pl.Trainer.__init__)
    for key in TRAINER_SET_BY_ATTNLAB:
        hints.pop(key, None)
    rest = {k: v for k, v in values.items() if k != "_target_"}
    check_keys(rest, hints, "trainer.")
    for key, (ok, rule) in TRAINER_RANGES.items():
        if key in rest and not ok(rest[key]):
            raise ConfigError(f"trainer.{key}={rest[key]} must be {rule}")


def check_top_level(cfg: dict[str, Any]) -> None:
    from attnlab.options import RunConfig

    top = {k: v for k, v in cfg.items() if k not in GROUPS}
    hints = typing.get_type_hints(RunConfig)
    known = {**{f.name: hints[f.name] for f in dataclasses.fields(RunConfig)},
             **dict.fromkeys(GROUPS, dict)}  # fmt: skip
    check_keys(top, known, "")
    RunConfig(**top)
    for key, value in (cfg.get("paths") or {}).items():
        if key not in PATH_KEYS:
            raise ConfigError(
                f"paths.{key} is not a config key; {nearest(key, PATH_KEYS, 'paths.')}"
            )
        if not isinstance(value, str) or not value:
            raise ConfigError(f"paths.{key}={value} must be a directory path")


def check_cheap(cfg: dict[str, Any], strict: bool = True) -> Any:
    """What needs neither Lightning nor the data modules: top level, model, optim, task, decode
    (none of it imports torch, so most mistakes are refused before torch is loaded).

    The model: its components' keys, each value against its key's type and rule
    (:meth:`~attnlab.model_config.ModelConfig.from_dict`); a key no component of the model
    reads is refused, or, with ``strict=False`` (a run saved before such keys were refused),
    dropped."""
    from attnlab.model_config import ModelConfig
    from attnlab.optim.registry import optim_config
    from attnlab.options import DecodeConfig, TaskConfig

    check_top_level(cfg)
    model = cfg.get("model") or {}
    if not isinstance(model, dict):
        raise ConfigError(f"model={model} must be a mapping of model.* keys")
    checked = ModelConfig.from_dict(model, strict=strict)
    optim_config(cfg.get("optim"), strict)
    check_dataclass(TaskConfig, cfg.get("task") or {}, "task.")
    check_dataclass(DecodeConfig, cfg.get("decode") or {}, "decode.")
    return checked


def check_run_config(cfg: Any, source: str, strict: bool = True) -> Any:
    """A composed (or saved) config: allowlisted ``_target_`` values first, then every key.

    ``source`` names where the config came from, for the error line; ``strict=False`` for a
    run's saved config (model keys its model does not read are dropped, not refused).
    """
    from attnlab.cli.targets import check_targets

    check_targets(cfg, source)
    return check_all(plain_config(cfg), strict)


def plain_config(cfg: Any) -> dict[str, Any]:
    """The config as plain containers, resolved, without the nodes only Hydra's runtime
    resolves (``logger``, ``callbacks``: ``${hydra:…}``); an unresolvable key is named."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    out = {}
    for key in cfg:
        if key in ("logger", "callbacks", "hydra"):
            continue
        try:
            node = cfg[key]
            out[str(key)] = OmegaConf.to_container(node, resolve=True) if isinstance(
                node, DictConfig | ListConfig) else node  # fmt: skip
        except OmegaConfBaseException as exc:
            reason = " ".join(str(exc).split())
            raise ConfigError(f"{key} cannot be resolved: {reason}") from None
    return out


def check_all(cfg: dict[str, Any], strict: bool = True) -> Any:
    """Every section, the ones that need no Lightning first (so most typos fail fast);
    ``cfg`` is the resolved config as plain containers. Returns the checked ModelConfig
    (its ``vocab_size`` and image sizes are the data's to fill in)."""
    model = check_cheap(cfg, strict)
    if isinstance(cfg.get("data"), dict):
        check_data(cfg["data"])
    if isinstance(cfg.get("trainer"), dict):
        check_trainer(cfg["trainer"])
    return model
