"""The private Lightning APIs attnlab uses: each where no public one does the job.

Everything else attnlab asks of Lightning, and all it asks of Hydra, goes through their
public modules. Each function here names the private thing it reaches, why, and the release
it was checked against (:data:`CHECKED_AGAINST`); ``tests/test_compat.py`` runs each one
against the installed libraries, so a release that moves one fails there with the shim's
name. The caps in ``pyproject.toml`` are here for these shims (``lightning<2.7``) and for
the Hydra behaviour ``cli/launch.py`` reproduces with Hydra's public pieces (``hydra-core<1.4``:
``Hydra.run``'s order of callbacks around its job runner, ``tests/test_one_run.py``): to
lift one, run those test files against the new release and mend what they name.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

# the releases every shim below was read against and tested with
CHECKED_AGAINST = {"lightning": "2.6.6", "hydra-core": "1.3.8"}


def logs_this_step(trainer: Any) -> bool:
    """Whether the values logged in this training step reach the loggers.

    Private: ``trainer._logger_connector.should_update_logs`` (Lightning 2.6.6): true every
    ``log_every_n_steps`` optimizer steps and at a stop. Lightning's own LearningRateMonitor
    asks the same property; the counter behind it (``fit_loop.epoch_loop._batches_that_stepped``)
    is private too, and is not ``trainer.global_step`` (which counts every optimizer's steps).
    """
    return bool(trainer._logger_connector.should_update_logs)


class AdjustableLearningRateMonitor(LearningRateMonitor):
    """Lightning's LearningRateMonitor with a public place to change what it logs:
    :meth:`adjust` receives the ``{series: value}`` of each logging step.

    Private: ``LearningRateMonitor._extract_stats(trainer, interval)`` (Lightning 2.6.6),
    which reads the rates, puts them in ``trainer.callback_metrics`` and returns what the
    callback's ``on_train_batch_start``/``on_train_epoch_start`` then hand the loggers; no
    public hook sits between reading and logging.
    """

    def adjust(self, trainer: Any, stats: dict[str, float]) -> dict[str, float]:
        """The series to log instead of ``stats`` (this class: ``stats`` unchanged)."""
        return stats

    def _extract_stats(self, trainer: Any, interval: str) -> dict[str, float]:
        return self.adjust(trainer, super()._extract_stats(trainer, interval))


class ContinuingExperimentWriter(ExperimentWriter):
    """Lightning's metrics.csv writer that continues an existing file instead of deleting it;
    its header is taken as the columns written so far.

    Private: ``ExperimentWriter._check_log_dir_exists`` (Lightning 2.6.6), which
    ``__init__`` calls to warn about a non-empty directory and delete metrics.csv; the
    writer has no public option to keep it.
    """

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if path.is_file():
            with path.open(newline="") as handle:
                self.metrics_keys = list(csv.DictReader(handle).fieldnames or [])


def handlers_lightning_restores(trainer: Any) -> dict[int, Any] | None:
    """The signal handlers Lightning puts back when its fit ends, keyed by signal number
    (the dict it reads then, so a change to it changes what is restored), or None.

    Private: ``trainer._signal_connector._original_handlers`` (Lightning 2.6.6). Lightning
    records the handlers it finds when training starts and re-installs them in its
    teardown, after every callback hook; no public hook runs after that teardown, and no
    public option names the handlers to restore.
    """
    connector = getattr(trainer, "_signal_connector", None)
    originals = getattr(connector, "_original_handlers", None)
    return originals if isinstance(originals, dict) else None


def started_wandb_run(logger: Any) -> Any:
    """The W&B run a WandbLogger has started, or None if it has started none (asking the
    public ``logger.experiment`` would start one).

    Private: ``WandbLogger._experiment`` (Lightning 2.6.6), where the logger keeps its run.
    """
    return logger._experiment
