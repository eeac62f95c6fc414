"""Weights & Biases: offline without credentials, runs named and grouped by their settings."""

from __future__ import annotations

import netrc
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

SUMMARY_GOALS = {"val/loss": "min", "val/ppl": "min", "val/acc": "max",
                 "val/bleu": "max", "val/exact_match": "max"}  # fmt: skip


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


def flat_config(cfg: DictConfig) -> dict[str, Any]:
    """Dotted keys (``model.norm``) so W&B tables group and filter on any of them."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            out[prefix] = node

    walk("", OmegaConf.to_container(cfg, resolve=True))
    return out


def run_name(overrides: list[str]) -> str:
    """decoder_only·post·seed1 from the overrides' values (keys dropped)."""
    parts = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key.startswith(("hydra", "ckpt_path", "logger", "trainer", "callbacks")):
            continue
        parts.append(f"seed{value}" if key == "seed" else value)
    return "·".join(parts) or "defaults"


def prepare_wandb(cfg: DictConfig, node: DictConfig, run_dir: Path) -> Any:
    """A WandbLogger with name, group, job type, flat config and declared summaries."""
    from hydra.core.hydra_config import HydraConfig
    from lightning.pytorch.loggers import WandbLogger

    from attnlab.callbacks.summary import git_sha

    mode = ensure_mode()
    overrides, group = [], node.get("group")
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        overrides = list(hydra_cfg.overrides.task)
        if group is None and str(hydra_cfg.mode) == "RunMode.MULTIRUN":
            group = Path(str(hydra_cfg.sweep.dir)).name
    if group is None and cfg.get("experiment_name"):
        group = str(cfg.experiment_name)
    options = OmegaConf.to_container(node, resolve=True)
    assert isinstance(options, dict)
    options.pop("_target_", None)
    options["name"] = options.get("name") or run_name(overrides)
    options["group"] = group
    options["save_dir"] = str(run_dir)
    options["offline"] = bool(options.get("offline")) or mode == "offline"
    id_file = run_dir / "wandb_id.txt"  # a resumed run keeps its W&B run
    if id_file.is_file():
        options["id"], options["resume"] = id_file.read_text().strip(), "allow"
    logger = WandbLogger(**options)
    if mode != "disabled":
        experiment = logger.experiment
        id_file.write_text(str(experiment.id))
        experiment.config.update(
            {**flat_config(cfg), "git_sha": git_sha(), "command": " ".join(sys.argv)},
            allow_val_change=True,
        )
        for metric, goal in SUMMARY_GOALS.items():
            experiment.define_metric(metric, summary=goal)
    return logger


def sync_hint(run_dir: Path) -> str | None:
    """The command that uploads an offline run later."""
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    return f"wandb sync {offline[-1]}" if offline else None
