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
  (``mlflow ui --backend-store-uri sqlite:///logs/mlflow.db``). The store is opened once
  through MLflow's client before the run starts, with a short timeout and one retry
  (MLflow's own ``MLFLOW_HTTP_REQUEST_TIMEOUT`` and ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
  unless set): a store MLflow cannot open (no server answering, a scheme it does not know,
  a file that is not a database, a folder store where MLflow refuses one) is one line;
- a resumed run (``ckpt_path=last``) continues its MLflow run (``mlflow_id.txt``).

MLflow is an extra (``pip install -e '.[mlflow]'``: ``mlflow-skinny``, the client without
the server).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lightning.pytorch.loggers import MLFlowLogger
from omegaconf import DictConfig, OmegaConf

from attnlab.cli.wandb_setup import _identity, command_line, flat_config, flatten, run_identity
from attnlab.errors import ConfigError

ID_FILE = "mlflow_id.txt"
PROBE_TIMEOUT_S = 5  # each request of the store check, which may be retried once
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
    if uri:
        return uri
    folder = Path(str(cfg.paths.log_dir)).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


@contextmanager
def _short_requests() -> Iterator[None]:
    """MLflow's HTTP timeout and retries, which it reads at each request, made short (unless
    the user set them): its defaults, 120 s and 7 retries with backoff, wait minutes for a
    server that is not there."""
    from mlflow.environment_variables import (
        MLFLOW_HTTP_REQUEST_MAX_RETRIES,
        MLFLOW_HTTP_REQUEST_TIMEOUT,
    )

    chosen = {MLFLOW_HTTP_REQUEST_TIMEOUT.name: PROBE_TIMEOUT_S,
              MLFLOW_HTTP_REQUEST_MAX_RETRIES.name: 1}  # fmt: skip
    set_here = {name: str(value) for name, value in chosen.items() if name not in os.environ}
    os.environ.update(set_here)
    try:
        yield
    finally:
        for name in set_here:
            os.environ.pop(name, None)


def check_store(uri: str) -> None:
    """Open the store through MLflow's client, as the logger will, and list one experiment;
    a store it cannot open is a ConfigError naming ``logger.mlflow.tracking_uri``."""
    from mlflow.tracking import MlflowClient

    try:
        with _short_requests():
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as error:  # noqa: BLE001 — whatever MLflow raises, the store is unusable
        raise ConfigError(_refusal(uri, error)) from None


def _refusal(uri: str, error: Exception) -> str:
    fix = ("give a database (sqlite:///path/to/mlflow.db), a running server "
           "(http://host:5000), or leave it unset for <paths.log_dir>/mlflow.db")  # fmt: skip
    where = f"logger.mlflow.tracking_uri={uri}"
    scheme = urlparse(uri).scheme
    if scheme in ("", "file") and uri not in ("databricks", "databricks-uc", "uc"):
        if not _folder_store_allowed():
            return (f"{where} is a folder, which MLflow refuses as a store unless "
                    f"MLFLOW_ALLOW_FILE_STORE=true; {fix}")  # fmt: skip
    known = getattr(error, "supported_uri_schemes", None)
    if known is not None:  # MLflow's registry knows no store of this scheme
        schemes = ", ".join(s for s in known if s)
        return f"{where}: MLflow has no store for scheme {scheme!r} (it has: {schemes}); {fix}"
    if scheme in ("http", "https"):
        return (f"{where}: no MLflow server answered there within {PROBE_TIMEOUT_S} s, or it "
                f"refused the request ({_reason(error)}); start one (mlflow server --port "
                f"5000) or {fix}")  # fmt: skip
    return f"{where}: MLflow cannot open this store ({_reason(error)}); {fix}"


def _folder_store_allowed() -> bool:
    """MLflow ≥ 3.13 opens a folder store only with ``MLFLOW_ALLOW_FILE_STORE=true``."""
    import mlflow.environment_variables as variables

    allowed = getattr(variables, "MLFLOW_ALLOW_FILE_STORE", None)
    return allowed is None or bool(allowed.get())


def _reason(error: BaseException) -> str:
    """The innermost cause, on one line: ``[Errno 111] Connection refused``,
    ``file is not a database``."""
    while (inner := error.__cause__ or error.__context__) is not None:
        error = inner
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else f"{text[:199]}…"


def prepare_mlflow(cfg: DictConfig, node: DictConfig, run_dir: Path) -> MLFlowLogger:
    """An MLFlowLogger with run name, group tag, flat params and the run's command."""
    import importlib.util

    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from attnlab.callbacks.summary import git_sha

    if importlib.util.find_spec("mlflow") is None:
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
    if rank_zero_only.rank == 0:  # the only process that writes to the store
        check_store(options["tracking_uri"])
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
        if isinstance(logger, MLFlowLogger) and logger.run_id is not None:  # rank 0's run
            logger.experiment.set_tag(logger.run_id, "status", status)
            if status != "completed":
                logger.experiment.set_terminated(logger.run_id, "FAILED")
