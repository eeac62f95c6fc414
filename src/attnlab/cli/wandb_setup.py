"""Weights & Biases: offline without credentials, runs named and grouped by their settings.

* name: the overrides that vary in the sweep, ``model.norm=post seed=1`` (a single run:
  the overrides that set what it computes)
* group: the same without the seed, ``model.norm=post``, so W&B pools the seeds of a
  setting (the experiment or the sweep when only the seed varies)
* tags: the user's ``tags``, the experiment and the sweep directory's name
* config: flat dotted keys (``model.norm``) plus ``git_sha``, ``command``, ``overrides``,
  and, from the first training step, ``params`` and ``flops_per_token``
* summary: ``val/loss`` min, accuracies/BLEU max, and the run's ``status``
* resume: ``wandb_id.txt`` in the run directory keeps the same W&B run
"""

from __future__ import annotations

import netrc
import os
import shlex
import sys
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
from lightning.pytorch.loggers import MLFlowLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.identity import identity_overrides
from attnlab.compat import started_wandb_run
from attnlab.errors import ConfigError

SUMMARY_GOALS = {"val/loss": "min", "val/ppl": "min", "val/acc": "max",
                 "val/bleu": "max", "val/exact_match": "max"}  # fmt: skip
STEP_METRIC = "trainer/global_step"  # Lightning's x-axis for every logged metric
WHERE = ("hydra.", "hydra/", "paths.")  # overrides that say where a run lives
ONLINE_MODES = ("online", "run", "shared")  # WANDB_MODE values that talk to the server
INIT_TIMEOUT_S = 30  # seconds wandb.init waits for the server before the run is refused


def has_credentials() -> bool:
    """An API key or identity token in the environment, or a netrc entry for the W&B host."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        return netrc.netrc().authenticators(_host().split("://")[-1]) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _host() -> str:
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")


def ensure_mode() -> str:
    """Respect WANDB_MODE; without it and without credentials, go offline (never prompt).

    An online mode without credentials is refused: wandb would ask for a key, on a terminal
    waiting for it with no time limit."""
    mode = os.environ.get("WANDB_MODE")
    if not mode and not has_credentials():
        os.environ["WANDB_MODE"] = mode = "offline"
    elif mode in ONLINE_MODES and not has_credentials():
        raise ConfigError(
            f"WANDB_MODE={mode} needs W&B credentials for {_host()}, and none were found "
            "(WANDB_API_KEY, or wandb login's entry in ~/.netrc); run `wandb login`, or unset "
            "WANDB_MODE to log offline and upload later with `wandb sync`"
        )
    os.environ.setdefault("WANDB_SILENT", "true")
    return mode or "online"


def init_settings(given: dict[str, Any] | None = None) -> dict[str, Any]:
    """wandb.init's settings, with a wait of INIT_TIMEOUT_S for the server unless
    ``WANDB_INIT_TIMEOUT`` or the config sets one (wandb's own default is 90 s)."""
    settings = dict(given or {})
    if "WANDB_INIT_TIMEOUT" not in os.environ:
        settings.setdefault("init_timeout", INIT_TIMEOUT_S)
    return settings


def unreachable(error: Exception) -> ConfigError:
    """wandb.init's failure to reach the server, as one line with the fixes."""
    reason = " ".join(str(error).split())
    return ConfigError(
        f"W&B at {_host()} did not answer ({reason}); check WANDB_BASE_URL and the network, "
        "or log offline with WANDB_MODE=offline and upload later with `wandb sync`"
    )


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


def run_identity(
    overrides: list[str], varying: set[str] | None = None, fallback: str | None = None
) -> tuple[str, str | None]:
    """(name, group): ``model.norm=post seed=1`` and ``model.norm=post``.

    The name is the overrides that vary in the sweep (``varying``), or for a single
    run every override that sets what it computes (:func:`identity_overrides`). The
    group is the same without ``seed=…``, so W&B pools the seeds of each setting;
    ``fallback`` (the experiment or the sweep) when nothing but the seed is set.
    """
    if varying is None:
        chosen = identity_overrides(overrides)
    else:  # a swept trainer.* key names its runs too; where a run lives never does
        chosen = [o for o in overrides if _key(o) in varying and not _key(o).startswith(WHERE)]
    setting = [o for o in chosen if _key(o) != "seed"]
    name = " ".join(chosen) or fallback or "defaults"
    return name, " ".join(setting) or fallback


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


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


class RunIdentity(NamedTuple):
    """What names a run in W&B: the overrides, the keys a sweep varies, group fallback, tags."""

    overrides: list[str]
    varying: set[str] | None
    fallback: str | None
    tags: list[str]


def _identity(cfg: DictConfig) -> RunIdentity:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return RunIdentity(sys.argv[1:], None, None, [])
    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    experiment = hydra_cfg.runtime.choices.get("experiment")
    experiment = str(experiment) if experiment else None
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return RunIdentity(overrides, None, experiment, [experiment] if experiment else [])
    sweep_dir = Path(str(hydra_cfg.sweep.dir))
    varying = swept_keys(sweep_dir, hydra_cfg.sweeper.get("params"))
    tags = [t for t in (experiment, sweep_dir.name) if t]
    return RunIdentity(overrides, varying or None, experiment or sweep_dir.name, tags)


def prepare_wandb(cfg: DictConfig, node: DictConfig, run_dir: Path) -> WandbLogger:
    """A WandbLogger with name, group, tags, job type, flat config and declared summaries."""
    import wandb
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from attnlab.callbacks.summary import git_sha

    mode = ensure_mode()
    identity = _identity(cfg)
    name, group = run_identity(identity.overrides, identity.varying, identity.fallback)
    options = OmegaConf.to_container(node, resolve=True)
    assert isinstance(options, dict)
    options.pop("_target_", None)
    options["name"] = options.get("name") or name
    options["group"] = options.get("group") or group
    options["tags"] = list(dict.fromkeys([*(options.get("tags") or []), *identity.tags]))
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
    options["settings"] = init_settings(options.get("settings"))
    # overrides: attnlab-compare --wandb groups these runs as it groups summary.json's
    options["config"] = {**flat_config(cfg), "git_sha": git_sha(),
                         "command": command_line(identity.overrides),
                         "overrides": identity.overrides}  # fmt: skip
    id_file = run_dir / "wandb_id.txt"  # a resumed run keeps its W&B run
    if id_file.is_file():
        options["id"], options["resume"] = id_file.read_text().strip(), "allow"
    logger = FlatWandbLogger(**options)
    if mode != "disabled" and rank_zero_only.rank == 0:
        try:
            experiment = logger.experiment
        except wandb.errors.CommError as error:
            raise unreachable(error) from None
        id_file.write_text(str(experiment.id))
        for metric, goal in SUMMARY_GOALS.items():
            experiment.define_metric(metric, summary=goal, step_metric=STEP_METRIC)
    return logger


class ModelSizeInConfig(L.Callback):
    """Adds ``params`` and ``flops_per_token`` to the W&B config at the first training step.

    ``flops_per_token``: FLOPs of one training step (forward + backward = 3 × forward) per
    token, at the first batch's sequence lengths (:func:`attnlab.callbacks.mfu.flops_per_token`).
    """

    def __init__(self) -> None:
        self.done = False

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:  # fmt: skip
        from attnlab.callbacks.mfu import flops_per_token

        if self.done:
            return
        self.done = True
        model = pl_module.model
        size: dict[str, Any] = {"params": model.num_params(),
                                "active_params": model.num_active_params()}
        try:
            size["flops_per_token"] = flops_per_token(
                pl_module.model_cfg, *pl_module.sequence_lengths(batch)
            )
        except (NotImplementedError, ValueError):  # an architecture without a FLOP count
            pass
        for logger in trainer.loggers:
            if isinstance(logger, (WandbLogger, MLFlowLogger)):
                logger.log_hyperparams(size)


def uses_wandb(loggers: list[Any]) -> bool:
    """Whether a tracker that takes the model's size into its config is among them."""
    return any(isinstance(logger, (WandbLogger, MLFlowLogger)) for logger in loggers)


def finish_wandb(loggers: list[Any], status: str) -> None:
    """Record the run's status in its W&B summary and close it (the next job starts a new run)."""
    for logger in loggers:
        experiment = started_wandb_run(logger) if isinstance(logger, WandbLogger) else None
        if experiment is not None:
            if hasattr(experiment, "summary") and hasattr(experiment, "finish"):
                experiment.summary["status"] = status
                experiment.finish(exit_code=0 if status == "completed" else 1)


def log_evaluation(run_dir: Path, cfg: DictConfig, metrics: dict[str, float],
                   ckpt: Path) -> str | None:  # fmt: skip
    """Log attnlab-eval's metrics as ``eval/<split>/<name>`` to the run's own W&B run.

    The run is resumed by its ``wandb_id.txt`` (name, group and job type stay those of
    training, which W&B does not let a resume change); offline without credentials.
    Returns the W&B run id, or None with WANDB_MODE=disabled.
    """
    import wandb

    mode = ensure_mode()
    if mode == "disabled":
        return None
    node = (cfg.get("logger") or {}).get("wandb") or {}
    try:
        run = wandb.init(
            id=(run_dir / "wandb_id.txt").read_text().strip(), resume="allow",
            project=node.get("project") or "attnlab", entity=node.get("entity"),
            dir=str(run_dir), mode="offline" if mode == "offline" else "online",
            settings=init_settings(),
        )  # fmt: skip
    except wandb.errors.CommError as error:
        raise unreachable(error) from None
    try:
        run.log({f"eval/{name}": value for name, value in metrics.items()})
        run.summary["eval/checkpoint"] = ckpt.name
    finally:
        run.finish()
    return str(run.id)


def sync_hint(run_dir: Path) -> str | None:
    """The command that uploads an offline run later."""
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    return f"wandb sync {offline[-1]}" if offline else None
