"""A trained run on disk: its saved config, its checkpoints, its weights.

``attnlab-eval`` and ``attnlab-generate`` start from a run directory
(docs/design.md, "Runs on disk") or from one of its checkpoints. Everything the
user can get wrong here — a path, a corrupt file, a checkpoint that does not
fit the config — raises a :class:`CheckpointError` or :class:`ConfigError`
that names the file and the fix.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.cli.common import register_resolvers
from attnlab.errors import CheckpointError, ConfigError

CONFIG_FILE = Path(".hydra") / "config.yaml"
# nodes of the saved config that only Hydra's runtime can resolve (${hydra:…});
# evaluation and generation build neither loggers nor callbacks
RUNTIME_ONLY = ("logger", "callbacks", "hydra")
_ABSENT = object()
SAVED_RUN = "attnlab_saved_run"  # the ConfigStore name the saved config is composed from


def parse_arguments(
    argv: Iterable[str], options: Mapping[str, Any]
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Split ``key=value`` arguments into this command's ``options`` and config overrides.

    Values are read with Hydra's override grammar, as ``attnlab-train`` reads them
    (``prompt='1 2 3'`` is the string ``1 2 3``). Returns (options with defaults
    filled in, ``(key, value)`` overrides in command-line order; a key keeps its ``+``).
    """
    from attnlab.cli.compose import parse_one

    values, overrides = dict(options), []
    for arg in argv:
        key, sep, _ = arg.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"argument '{arg}' is not key=value; write e.g. run_dir=<run directory>"
            )
        value = parse_one(arg)
        if key in options:
            values[key] = None if value is None else str(value)
        else:
            overrides.append((key, value))
    return values, overrides


def locate_run(run_dir: str | None, ckpt_path: str | None) -> tuple[Path, Path]:
    """(run directory, checkpoint file) from ``run_dir=`` and/or ``ckpt_path=``.

    Without ``run_dir`` the run is the checkpoint's ``../..``; without
    ``ckpt_path`` the checkpoint is :func:`default_checkpoint`.
    """
    if not run_dir and not ckpt_path:
        raise CheckpointError(
            "no run given; pass run_dir=<run directory printed by attnlab-train> "
            "or ckpt_path=<file.ckpt>"
        )
    ckpt = None
    if ckpt_path:
        ckpt = Path(ckpt_path).expanduser().absolute()
        if not ckpt.is_file():
            raise CheckpointError(
                f"ckpt_path={ckpt_path}: no such file; pass a .ckpt from <run_dir>/checkpoints/"
            )
    run = Path(run_dir).expanduser().absolute() if run_dir else ckpt.parent.parent  # type: ignore[union-attr]
    if not run.is_dir():
        raise CheckpointError(
            f"run_dir={run_dir}: no such directory; pass the run directory printed by "
            "attnlab-train (logs/<task_name>/runs/<timestamp>_<id>)"
        )
    if not (run / CONFIG_FILE).is_file():
        hint = " or add run_dir=<the run that wrote it>" if ckpt_path and not run_dir else ""
        raise CheckpointError(
            f"{run / CONFIG_FILE} is missing, so {run} is not an attnlab run directory; "
            f"pass the run directory printed by attnlab-train{hint}"
        )
    return run, ckpt or default_checkpoint(run)


def default_checkpoint(run_dir: Path) -> Path:
    """The run's best checkpoint (not last.ckpt) when there is one, else last.ckpt."""
    folder = run_dir / "checkpoints"
    best = sorted(
        (p for p in folder.glob("*.ckpt") if not p.name.startswith("last")),
        key=lambda p: p.stat().st_mtime,
    )
    if len(best) > 1:  # save_top_k > 1: ask the newest which one ModelCheckpoint ranked first
        recorded = _recorded_best(best[-1])
        return next((p for p in best if p.name == recorded), best[-1])
    if best:
        return best[0]
    if (folder / "last.ckpt").is_file():
        return folder / "last.ckpt"
    raise CheckpointError(
        f"no checkpoint in {folder}; let the run finish at least one epoch, "
        "or pass ckpt_path=<file.ckpt>"
    )


def _recorded_best(path: Path) -> str | None:
    """File name of ``best_model_path`` in a checkpoint's ModelCheckpoint state."""
    import torch

    try:
        states = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["callbacks"]
    except Exception:  # unreadable: the caller falls back to the newest file
        return None
    for name, state in states.items():
        if "ModelCheckpoint" in str(name) and state.get("best_model_path"):
            return Path(state["best_model_path"]).name
    return None


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Load a Lightning checkpoint on the CPU with ``weights_only=True``.

    Only tensors and plain containers are unpickled, so a checkpoint from someone
    else cannot run code (a planted ``__reduce__`` is refused, not called). A corrupt,
    truncated, foreign or unsafe file is a CheckpointError naming it.
    """
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        if zipfile.is_zipfile(path):
            found = " ".join(str(exc).split("WeightsUnpickler error:")[-1].split())[:120]
            raise CheckpointError(
                f"{path} is refused: it holds objects other than tensors and plain data "
                f"({found}), and loading them could run code; attnlab loads checkpoints with "
                "weights_only=True only, so use a checkpoint written by attnlab-train"
            ) from None
        raise CheckpointError(_corrupt(path, "not a complete PyTorch checkpoint archive")) from None
    except Exception as exc:
        if not zipfile.is_zipfile(path):
            reason = "not a complete PyTorch checkpoint archive"
        else:
            reason = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"
        raise CheckpointError(_corrupt(path, reason)) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise CheckpointError(
            f"{path} holds no state_dict, so it was not written by attnlab-train; "
            "pass a .ckpt from <run_dir>/checkpoints/"
        )
    return checkpoint


def _corrupt(path: Path, reason: str) -> str:
    return (
        f"{path} is corrupt or truncated ({reason}); pass another file from its "
        "checkpoints/ folder (e.g. last.ckpt) or train again"
    )


def load_weights(
    module: Any, state: Mapping[str, Any], path: Path, saved_model: Mapping[str, Any] | None,
    model: Mapping[str, Any],
) -> None:  # fmt: skip
    """``module.load_state_dict(state)``, or a CheckpointError naming what differs.

    ``saved_model`` / ``model``: the ``model.*`` settings the checkpoint was
    trained with and those of the config in use, to name the culprit key.
    """
    check_weights_fit(module, state, path, saved_model, model)
    module.load_state_dict(state)


def check_weights_fit(
    module: Any, state: Mapping[str, Any], path: Path, saved_model: Any, model: Mapping[str, Any],
) -> None:  # fmt: skip
    """A CheckpointError naming the differing ``model.*`` key when ``state`` does not fit, or
    when it fits but was trained with another setting of a key that changes the function."""
    if saved_model is not None and not isinstance(saved_model, Mapping):
        raise CheckpointError(f"{path} holds no readable model settings (hyper_parameters.model "
                              "is not a mapping), so it was not written by attnlab-train; pass "
                              "a .ckpt from <run_dir>/checkpoints/")  # fmt: skip
    import torch

    own = module.state_dict()
    odd = sorted(k for k, v in state.items() if k in own and not isinstance(v, torch.Tensor))
    if odd:
        raise CheckpointError(
            f"{path} holds {odd[0]} as a {type(state[odd[0]]).__name__}, not a tensor, so it "
            "was not written by attnlab-train; pass a .ckpt from <run_dir>/checkpoints/"
        )
    shapes = [
        f"{k}: {tuple(v.shape)} in the file, {tuple(own[k].shape)} in the config"
        for k, v in state.items()
        if k in own and hasattr(v, "shape") and tuple(v.shape) != tuple(own[k].shape)
    ]
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if not (shapes or missing or unexpected):
        check_same_model(path, saved_model, model)
        return
    saved = dict(saved_model or {})
    settings = [
        f"model.{k}={_shown(saved[k])} in the checkpoint, {_shown(model.get(k))} in the config"
        for k in sorted(saved, key=str)
        if not _same(saved[k], model.get(k, _ABSENT))
    ]
    detail = "; ".join(
        settings[:3] or shapes[:1] or [f"missing {missing[:1]}, unexpected {unexpected[:1]}"]
    )
    raise CheckpointError(
        f"{path} holds a model of another shape ({detail}); evaluate it with the config it "
        "was trained with: drop model.* overrides, or pass run_dir=<the run that wrote it>"
    )


# model keys that choose how the same function is computed or trained (the kernel,
# compilation, recomputation, dropout, the initialisation the weights replace): a checkpoint
# loads under any value of them
HOW_KEYS = ("attn_impl", "compile", "activation_checkpointing", "dropout", "attn_dropout", "init")
# keys whose default computes what a model without them computes (no soft-cap, RoPE's base
# 10000 over every feature, μP's multipliers at 1): a checkpoint whose model does not read one
# (saved before the key existed, or trained on an attn_impl that does not read it) loads
# under that default
NEUTRAL_AT_DEFAULT = ("attn_softcap", "final_softcap", "rope_theta", "rotary_fraction",
                      "mup_output_mult", "mup_attn_mult")  # fmt: skip


def check_same_model(path: Path, saved_model: Mapping[str, Any] | None,
                     model: Mapping[str, Any]) -> None:  # fmt: skip
    """A CheckpointError naming the ``model.*`` keys whose settings in the checkpoint differ
    from the config's: the same shapes then compute another function (an SP checkpoint
    under ``model.param=mup``)."""
    saved = dict(saved_model or {})
    differ = [
        f"model.{key}={_shown(saved[key])} in the checkpoint, {_shown(model[key])} in the config"
        if key in saved
        else f"model.{key}={_shown(model[key])} in the config, a key the checkpoint's model "
        "does not read"
        # the keys both set, then those only the config sets
        for key in sorted(set(model) if saved else set(), key=lambda k: (k not in saved, str(k)))
        if key not in HOW_KEYS and not _same(saved.get(key, _ABSENT), model[key])
        and not (key not in saved and _neutral(key, model[key]))
    ]
    if differ:
        raise CheckpointError(
            f"{path} was trained with other model settings ({'; '.join(differ[:3])}), under "
            "which its weights compute another function; load it with the config it was "
            "trained with: drop model.* overrides, or pass run_dir=<the run that wrote it>"
        )


def _neutral(key: str, value: Any) -> bool:
    from attnlab.components.core import KEYS

    return key in NEUTRAL_AT_DEFAULT and _same(KEYS[key].default, value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b  # true is not 1
    try:
        return bool(a == b)
    except Exception:  # a value no plain config holds (a tensor): not the same
        return False


def _shown(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    text = "null" if value is None else text
    return text if len(text) <= 60 else text[:57] + "..."


def config_overrides(argv: Iterable[str], options: Mapping[str, Any]) -> list[str]:
    """The arguments of ``argv`` that override the run's config (not this command's
    ``options``), as Hydra override lines."""
    from attnlab.cli.compose import quote_non_ascii

    return [a for a in quote_non_ascii(list(argv)) if a.partition("=")[0] not in options]


def load_run_config(run_dir: Path, overrides: Iterable[str]) -> DictConfig:
    """The run's saved ``.hydra/config.yaml`` with Hydra ``overrides`` on top, composed by
    Hydra's ``compose`` as ``attnlab-train`` composes its own.

    Every ``_target_`` in the file is checked against attnlab's allowlist first,
    before anything is imported or built (:mod:`attnlab.cli.targets`). An override
    must name a key the saved config has (``+key`` adds one), and may not replace a
    whole group (``data=copy``): evaluation reuses the run.
    """
    from attnlab.cli.targets import check_targets

    register_resolvers()
    path = run_dir / CONFIG_FILE
    try:
        saved = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise CheckpointError(
            f"{path} is not a readable config ({reason}); restore it from the run's copy or retrain"
        ) from None
    if not isinstance(saved, DictConfig):
        raise CheckpointError(f"{path} is not a config mapping; restore it or retrain")
    check_targets(saved, str(path))
    for key in RUNTIME_ONLY:
        saved.pop(key, None)
    drop_unread_model_keys(saved)
    cfg = compose_saved(saved, list(overrides), path)
    check_targets(cfg, "the command line")
    return cfg


def compose_saved(saved: DictConfig, overrides: list[str], path: Path) -> DictConfig:
    """``saved`` with ``overrides`` applied by Hydra's ``compose`` (from the ConfigStore, the
    file already read); ``+key`` adds a key or sets one the run has, as ``++key`` does."""
    from hydra import compose, initialize
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from attnlab.cli.compose import parse_overrides

    lines = []
    for override in parse_overrides(overrides):
        key = override.key_or_group
        node = OmegaConf.select(saved, key, default=None, throw_on_missing=False)
        if key.split(".")[0] in RUNTIME_ONLY:
            raise ConfigError(f"{key} is not a key of {path}; evaluation builds no loggers, "
                              "callbacks or Hydra run: drop it")  # fmt: skip
        if isinstance(node, DictConfig) and not override.is_delete():
            raise ConfigError(
                f"{override.input_line} would replace the whole '{key}' group of the run's "
                f"config; override single keys instead, e.g. {key}.<name>=<value>"
            )
        lines.append(f"+{override.input_line}" if override.is_add() else override.input_line)
    ConfigStore.instance().store(name=SAVED_RUN, node=saved)
    GlobalHydra.instance().clear()
    try:
        with initialize(version_base="1.3"):
            cfg = compose(SAVED_RUN, lines)
    except (HydraException, OmegaConfBaseException) as exc:
        found = re.search(r"Could not override '([^']+)'", str(exc))
        if found:
            key = found.group(1)
            raise ConfigError(f"{key} is not a key of {path}; check the spelling (or write "
                              f"+{key}=… to add it)") from None  # fmt: skip
        raise ConfigError(f"{' '.join(str(exc).split())}; fix that override") from None
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, False)  # the pipeline fills in what the run left unset
    return cfg


def drop_unread_model_keys(cfg: DictConfig) -> None:
    """A run written before models resolved their keys recorded every ``model.*`` key of
    every architecture (``model.cell`` in a decoder-only run): keep those its model reads,
    with the values recorded, so that the run loads as it trained. A model node that does
    not resolve is left as it is, for the model's own checks to name what is wrong."""
    from attnlab.model_config import resolve

    node = cfg.get("model")
    if not isinstance(node, DictConfig):
        return
    try:
        values = OmegaConf.to_container(node, resolve=False)
        reads = resolve(values, strict=False)  # type: ignore[arg-type]
    except (ConfigError, OmegaConfBaseException, TypeError, ValueError):
        return
    for key in [k for k in node if k not in reads]:
        del node[key]  # (pop would read the value, and an unset one raises)


def resolved(cfg: DictConfig, key: str) -> Any:
    """``cfg.<key>`` as plain Python, interpolations resolved; a failure names the key."""
    try:
        node = OmegaConf.select(cfg, key)
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{key} cannot be resolved: {' '.join(str(exc).split())}") from None
