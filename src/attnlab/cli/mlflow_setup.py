"""``logger=mlflow``: Lightning's MLFlowLogger, named and tagged as the W&B run is.

- run name: the overrides that vary in the sweep (``model.norm=post seed=1``), or for a
  single run every override that sets what it computes; tag ``group``: the same without
  the seed (the experiment or sweep when only the seed varies), so a search on
  ``tags.group`` pools the seeds of one setting;
- experiment: ``logger.mlflow.experiment_name``, else the experiment's name, else the
  task's (``train``);
- params: the whole config, flat (``model.norm``), as in W&B, and ``params`` and
  ``flops_per_token`` at the first step; tags ``command`` (the line that reruns this run
  alone), ``git_sha``, ``run_dir``, ``status`` (``completed``, ``diverged``, …) and the
  run's tags (``tag.<name>``);
- store: ``logger.mlflow.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else a local SQLite
  database, ``<paths.log_dir>/mlflow.db``, that every run on this machine shares
  (``mlflow ui --backend-store-uri sqlite:///logs/mlflow.db``). MLflow ≥ 3.7 refuses its
  older folder store (``./mlruns``); a folder given as the store is one line here;
- a resumed run (``ckpt_path=last``) continues its MLflow run (``mlflow_id.txt``).

MLflow is an extra (``pip install -e '.[mlflow]'``: ``mlflow-skinny``, the client without
the server, whose requirements do not clash with the ``sqlalchemy<2`` that the Optuna
sweeper needs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.wandb_setup import _identity, command_line, flat_config, flatten, run_identity
from attnlab.errors import ConfigError

ID_FILE = "mlflow_id.txt"
# hyperparameters the task module saves (Lightning logs them): not logged twice
MODULE_KEYS = ("model.", "optim.", "task.", "decode.", "num_classes", "seed")


class FlatMLFlowLogger(MLFlowLogger):
    """Lightning's MLFlowLogger, with nested hyperparameters logged under dotted keys
    (``model.norm``: the config's spelling, not ``model/norm``)."""

    def log_hyperparams(self, params: Any) -> None:
        super().log_hyperparams(flatten(dict(params)) if isinstance(params, dict) else params)


def tracking_uri(cfg: DictConfig, given: str | None) -> str:
    """The store: the given URI, ``$MLFLOW_TRACKING_URI``, or ``<paths.log_dir>/mlflow.db``."""
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        folder = Path(str(cfg.paths.log_dir)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder / 'mlflow.db'}"
    if uri.startswith("file:") or "://" not in uri:
        raise ConfigError(
            f"logger.mlflow.tracking_uri={uri} is a folder, which MLflow ≥ 3.7 no longer "
            "accepts as a store; give a database (sqlite:///path/to/mlflow.db) or a server "
            "(http://host:5000), or leave it unset for <paths.log_dir>/mlflow.db"
        )
    return uri


def prepare_mlflow(cfg: DictConfig, node: DictConfig, run_dir: Path) -> MLFlowLogger:
    """An MLFlowLogger with run name, group tag, flat params and the run's command."""
    from lightning.pytorch.loggers.mlflow import _MLFLOW_AVAILABLE
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from attnlab.callbacks.summary import git_sha

    if not _MLFLOW_AVAILABLE:
        raise ConfigError(
            "logger=mlflow needs MLflow, which is not installed: pip install -e '.[mlflow]' "
            "(or pip install mlflow-skinny)"
        )
    identity = _identity(cfg)
    name, group = run_identity(identity.overrides, identity.varying, identity.fallback)
    options = OmegaConf.to_container(node, resolve=True)
    assert isinstance(options, dict)
    options.pop("_target_", None)
    options["tracking_uri"] = tracking_uri(cfg, options.get("tracking_uri"))
    options["experiment_name"] = (options.get("experiment_name")
                                  or cfg.get("experiment_name") or str(cfg.task_name))  # fmt: skip
    options["run_name"] = options.get("run_name") or name
    tags = {str(k): str(v) for k, v in (options.get("tags") or {}).items()}
    tags.update({"group": group or name, "command": command_line(identity.overrides),
                 "git_sha": str(git_sha()), "run_dir": str(run_dir)})  # fmt: skip
    for tag in dict.fromkeys([*(cfg.get("tags") or []), *identity.tags]):
        tags[f"tag.{tag}"] = "true"
    options["tags"] = tags
    id_file = run_dir / ID_FILE  # a resumed run keeps its MLflow run
    if id_file.is_file() and not options.get("run_id"):
        options["run_id"] = id_file.read_text().strip()
    logger = FlatMLFlowLogger(**options)
    if rank_zero_only.rank == 0:
        id_file.write_text(str(logger.run_id))
        if "run_id" not in options:  # the model's own settings Lightning logs at fit start
            logger.log_hyperparams({k: v for k, v in flat_config(cfg).items()
                                    if not k.startswith(MODULE_KEYS)})  # fmt: skip
    return logger


def finish_mlflow(loggers: list[Any], status: str) -> None:
    """Tag the run's status (``completed``, ``diverged``, …) and end an unfinished run as
    FAILED (Lightning ends every run it finishes as FINISHED)."""
    for logger in loggers:
        if isinstance(logger, MLFlowLogger) and logger._initialized:
            logger.experiment.set_tag(logger.run_id, "status", status)
            if status != "completed":
                logger.experiment.set_terminated(logger.run_id, "FAILED")
