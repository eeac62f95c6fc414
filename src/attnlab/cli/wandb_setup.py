"""Weights & Biases: offline without credentials, runs named and grouped by their settings.

* name: the values of the overrides that vary in the sweep, ``decoder_only·post·seed1``
* group: the sweep (multirun directory name, after the experiment if one is chosen)
* config: flat dotted keys (``model.norm``) plus ``git_sha`` and ``command``
* summary: ``val/loss`` min, accuracies/BLEU max, and the run's ``status``
* resume: ``wandb_id.txt`` in the run directory keeps the same W&B run
"""

from __future__ import annotations

import netrc
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.common import identity_overrides
from attnlab.errors import ConfigError

SUMMARY_GOALS = {"val/loss": "min", "val/ppl": "min", "val/acc": "max",
                 "val/bleu": "max", "val/exact_match": "max"}  # fmt: skip
STEP_METRIC = "trainer/global_step"  # Lightning's x-axis for every logged metric


def has_credentials() -> bool:
    """An API key in the environment or a netrc entry for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1]
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def ensure_mode() -> str:
    """Respect WANDB_MODE; without it and without credentials, go offline (never prompt)."""
    if not os.environ.get("WANDB_MODE") and not has_credentials():
        os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault("WANDB_SILENT", "true")
    return os.environ.get("WANDB_MODE", "online")


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"norm": "pre"}}`` -> ``{"model.norm": "pre"}`` (lists stay values)."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def flat_config(cfg: DictConfig) -> dict[str, Any]:
    """Dotted keys (``model.norm``) so W&B tables group and filter on any of them."""
    return flatten(OmegaConf.to_container(cfg, resolve=True))


def swept_keys(sweep_dir: Path, sweeper_params: Any = None) -> set[str]:
    """Keys given several values in the sweep (its multirun.yaml) or searched by a sweeper."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = {str(k) for k in (sweeper_params or {})}
    try:
        given = list(OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task)
        parsed = OverridesParser.create().parse_overrides(given)
    except Exception:  # no multirun.yaml (yet): name from all settings instead
        return keys
    return keys | {o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()}


def run_name(overrides: list[str], varying: set[str] | None = None) -> str:
    """``decoder_only·post·seed1``: the values of the overrides that vary (all, outside sweeps).

    A number or boolean keeps its key's last part (``seed1``, ``lr0.001``); a
    choice stands alone (``post``, ``decoder_only``).
    """
    chosen = [o for o in overrides if varying is None or o.split("=", 1)[0].lstrip("+~") in varying]
    parts = []
    for override in identity_overrides(chosen or overrides):
        key, _, value = override.lstrip("+~").partition("=")
        if _is_number_or_bool(value):
            parts.append(f"{key.split('.')[-1].split('/')[-1]}{value}")
        else:
            parts.append(value)
    return "·".join(parts) or "defaults"


def _is_number_or_bool(value: str) -> bool:
    if value.lower() in ("true", "false"):
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


class FlatWandbLogger(WandbLogger):
    """Lightning's WandbLogger, with the module's nested hyperparameters logged flat.

    Keeps one spelling per setting in W&B (``model.norm``), the same as the config.
    """

    def log_hyperparams(self, params: Any) -> None:
        super().log_hyperparams(flatten(dict(params)) if isinstance(params, dict) else params)


def command_line(overrides: list[str] | None = None) -> str:
    """The command that reruns this run alone: ``attnlab-train model.norm=post seed=1``."""
    program = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "train"
    program = program if program.startswith("attnlab") else f"attnlab-{program}"
    args = overrides if overrides is not None else sys.argv[1:]
    return " ".join([program, *(shlex.quote(a) for a in args)])


def _naming(cfg: DictConfig) -> tuple[list[str], set[str] | None, str | None]:
    """(this run's overrides, the keys that vary, the sweep's group name)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return sys.argv[1:], None, None
    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    experiment = hydra_cfg.runtime.choices.get("experiment")
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return overrides, None, str(experiment) if experiment else None
    sweep_dir = Path(str(hydra_cfg.sweep.dir))
    varying = swept_keys(sweep_dir, hydra_cfg.sweeper.get("params"))
    group = f"{experiment}-{sweep_dir.name}" if experiment else sweep_dir.name
    return overrides, varying, group


def prepare_wandb(cfg: DictConfig, node: DictConfig, run_dir: Path) -> WandbLogger:
    """A WandbLogger with name, group, job type, flat config and declared summaries."""
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from attnlab.callbacks.summary import git_sha

    mode = ensure_mode()
    overrides, varying, sweep_group = _naming(cfg)
    options = OmegaConf.to_container(node, resolve=True)
    assert isinstance(options, dict)
    options.pop("_target_", None)
    options["name"] = options.get("name") or run_name(overrides, varying)
    options["group"] = options.get("group") or sweep_group
    options["save_dir"] = str(run_dir)
    options["offline"] = bool(options.get("offline")) or mode == "offline"
    if options.get("log_model") and options["offline"]:
        raise ConfigError(
            "logger.wandb.log_model=true uploads checkpoints as W&B artifacts, which an offline "
            "run cannot do; log in (wandb login) or set WANDB_MODE=online, or drop log_model "
            "(the checkpoints stay in <run_dir>/checkpoints/)"
        )
    if mode in ("online", "offline", "disabled"):
        options["mode"] = mode  # wandb reads WANDB_MODE once per process; be explicit per run
    options["config"] = {**flat_config(cfg), "git_sha": git_sha(),
                         "command": command_line(overrides)}  # fmt: skip
    id_file = run_dir / "wandb_id.txt"  # a resumed run keeps its W&B run
    if id_file.is_file():
        options["id"], options["resume"] = id_file.read_text().strip(), "allow"
    logger = FlatWandbLogger(**options)
    if mode != "disabled" and rank_zero_only.rank == 0:
        experiment = logger.experiment
        id_file.write_text(str(experiment.id))
        for metric, goal in SUMMARY_GOALS.items():
            experiment.define_metric(metric, summary=goal, step_metric=STEP_METRIC)
    return logger


def finish_wandb(loggers: list[Any], status: str) -> None:
    """Record the run's status in its W&B summary and close it (the next job starts a new run)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            experiment = logger._experiment
            if hasattr(experiment, "summary") and hasattr(experiment, "finish"):
                experiment.summary["status"] = status
                experiment.finish(exit_code=0 if status == "completed" else 1)


def sync_hint(run_dir: Path) -> str | None:
    """The command that uploads an offline run later."""
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    return f"wandb sync {offline[-1]}" if offline else None
