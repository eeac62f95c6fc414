"""attnlab's Optuna sweeper: a search whose study outlives its process (a Hydra plugin: Hydra
finds sweepers only in the ``hydra_plugins`` namespace package).

``hparams_search=optuna`` selects it (``hydra/sweeper=optuna``, keys in :mod:`.config`) and
keeps the study in ``<sweep dir>/optuna.db`` (SQLite) by default. It drives Optuna's
ask-and-tell interface (:mod:`._study`): a batch of ``n_jobs`` trials is asked for, run as
ordinary Hydra jobs by the configured launcher (joblib locally, a SLURM array on a
cluster), and each is told the value its job returned, or that it failed. Rerunning the
same command with ``hydra.sweep.dir=<that dir>`` (and ``resume=true``, so the directory
may be reused) continues the study:

* trials that finished (complete or failed) count towards ``hydra.sweeper.n_trials``, so
  a 6-trial search stopped after 3 runs 3 more, not 6;
* a trial left running by a killed process is marked failed (no process will ever
  report it) and runs again, as a new trial with the same parameters that takes its
  place in the count; with ``retry_failed=true``, so does each failed trial;
* new trials take the next job numbers, so no earlier trial's directory is reused;
* a seeded sampler is seeded from (its seed, trials so far), so the continued study does
  not replay the first trials' parameters, and stays reproducible.

Several ``attnlab-train`` processes on several nodes sharing one study need a database
server instead (``hydra.sweeper.storage=postgresql://user:pass@host/db``): SQLite locks
across nodes. Pruning is not available: a job gets only the sampled parameters, never
the Optuna trial that ``MedianPruner`` reports to.
"""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ResumableOptunaSweeper(Sweeper):
    """``hydra.sweeper``: the keys of :class:`.config.OptunaSweeperConf`."""

    def __init__(
        self,
        sampler: DictConfig,
        direction: str,
        storage: str | None,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: DictConfig | None,
        custom_search_space: str | None,
    ) -> None:
        self.sampler = sampler
        self.direction = str(direction)
        self.storage = storage
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = params
        self.custom_search_space = custom_search_space
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        """Run the search; a search space, sampler or storage the user must fix is one
        ``error:`` line and exit code 2."""
        from attnlab.cli.common import user_errors

        with user_errors():
            from hydra_plugins.attnlab_optuna_sweeper._study import run_search

            run_search(self, list(arguments))
