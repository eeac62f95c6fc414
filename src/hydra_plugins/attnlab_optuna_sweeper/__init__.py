"""Hydra's Optuna sweeper, with a study that outlives its process (a Hydra plugin: Hydra
finds sweepers only in the ``hydra_plugins`` namespace package).

``hparams_search=optuna`` keeps the study in ``<sweep dir>/optuna.db`` (SQLite)
by default. Rerunning the same command with ``hydra.sweep.dir=<that dir>``
(and ``resume=true``, so the directory may be reused) continues the study:

* trials that finished (complete, failed or pruned) count towards
  ``hydra.sweeper.n_trials``, so a 6-trial search stopped after 3 runs 3 more,
  not 6;
* a trial left ``RUNNING`` by a killed process is marked failed (no process
  will ever report it);
* new trials take the next job numbers, so no earlier trial's directory is reused;
* the seeded sampler is re-seeded from (its seed, trials so far), so the continued
  study does not replay the first trials' parameters, and stays reproducible.

Hydra's plugin asks Optuna for trials and tells it their final value in the
launching process; every trial runs as an ordinary job (joblib locally, a SLURM
array on a cluster) and all of them share the one study. Several ``attnlab-train``
processes on several nodes sharing one study need a database server instead
(``hydra.sweeper.storage=postgresql://user:pass@host/db``): SQLite locks across
nodes. Pruning is not available: the plugin hands a job only the sampled
parameters, never the Optuna trial that ``MedianPruner`` reports to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

SQLITE = "sqlite:///"


class ResumableOptunaSweeper(OptunaSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        impl = self.sweeper
        storage = impl.storage
        if isinstance(storage, str) and storage.startswith(SQLITE):
            Path(storage.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
        if storage:
            self._continue(impl)
        return super().sweep(arguments)

    @staticmethod
    def _continue(impl: Any) -> None:
        import optuna
        from optuna.trial import TrialState

        storage = str(impl.storage)
        if storage.startswith(SQLITE) and not Path(storage.removeprefix(SQLITE)).is_file():
            return  # a new study (opening a missing SQLite file would create it half-made)
        try:
            study = optuna.load_study(study_name=impl.study_name, storage=impl.storage)
        except KeyError:  # no study of that name yet
            return
        finished = [t for t in study.trials if t.state.is_finished()]
        for trial in study.trials:
            if trial.state == TrialState.RUNNING:  # its process was killed
                study._storage.set_trial_state(trial._trial_id, TrialState.FAIL)
        impl.n_trials = max(impl.n_trials - len(finished), 0)
        _reseed(impl.sampler, len(study.trials))
        impl.job_idx = len(study.trials)
        print(f"optuna: study {impl.study_name!r} has {len(finished)} finished trials; "
              f"running {impl.n_trials} more", flush=True)  # fmt: skip


def _reseed(sampler: Any, offset: int) -> None:
    """Move a seeded sampler's random streams past the ``offset`` trials already drawn."""
    import numpy as np

    seed = getattr(sampler, "_attnlab_seed", None)
    if seed is None:
        state = getattr(sampler, "_rng", None)
        seed = int(state.randint(2**31)) if state is not None else 0
    for owner in (sampler, getattr(sampler, "_random_sampler", None)):
        if owner is not None and hasattr(owner, "_rng"):
            owner._rng = np.random.RandomState([seed, offset])
