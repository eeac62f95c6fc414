"""The search: Optuna's ask-and-tell loop around Hydra's launcher.

Each batch of ``n_jobs`` trials is asked for (``Study.ask`` with the search space's
distributions), launched as ordinary Hydra jobs, and told its outcome (``Study.tell`` with
the job's value, or ``state=FAIL``). The study lives in ``hydra.sweeper.storage``; run again,
the same command continues it (:func:`continue_study`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra.utils import instantiate
from omegaconf import OmegaConf
from optuna.trial import Trial, TrialState

from attnlab.errors import ConfigError
from hydra_plugins.attnlab_optuna_sweeper._space import FIX, SearchSpace

log = logging.getLogger(__name__)
SQLITE = "sqlite:///"
RETRY_OF = "retry_of"  # user attribute of a trial that reruns a failed one: its number
DIRECTIONS = ("minimize", "maximize")
RUN_DIR = "run_dir"  # user attribute: the job directory a trial ran in


@dataclass
class Plan:
    """What this run of the command does with the study it opened."""

    to_run: int  # new trials to ask for
    first_job: int  # the job number of the first of them (the trials the study holds)


def check_space(sweeper: Any, space: SearchSpace) -> None:
    """Before any trial: each choice and each end of the search space composed and checked
    as a job checks its config, so a key or a value no job could run with is one line."""
    from attnlab.cli.compose import check_values

    for overrides in space.probes():
        cfg = compose_job(sweeper, overrides)
        check_values(cfg, source="hydra.sweeper.params", strict=False)


def compose_job(sweeper: Any, overrides: list[str]) -> Any:
    """A job's config, as the launcher composes it; a key or value Hydra refuses is one line."""
    loader = sweeper.hydra_context.config_loader
    try:
        return loader.load_sweep_config(master_config=sweeper.config, sweep_overrides=overrides)
    except Exception as exc:  # noqa: BLE001 -- Hydra's and OmegaConf's errors, as one line
        unknown = re.search(r"Could not override '([^']+)'", str(exc))
        reason = (f"{unknown.group(1)} is not a config key" if unknown
                  else " ".join(str(exc).split()))  # fmt: skip
        raise ConfigError(f"{reason}; fix the search space ({FIX})") from None


def storage_of(url: str | None) -> str | optuna.storages.BaseStorage:
    """The storage URL, with a SQLite file's folder made (Optuna makes the file, not it); no
    URL: a study in this process's memory."""
    if not url:
        return optuna.storages.InMemoryStorage()
    if url.startswith(SQLITE):
        Path(url.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
    return url


def make_sampler(conf: Any, space: SearchSpace, trials_so_far: int) -> optuna.samplers.BaseSampler:
    """The configured sampler. A seeded one continuing a study is seeded from (its seed,
    trials so far), so it does not replay the first trials' draws and stays reproducible."""
    kwargs = {k: v for k, v in OmegaConf.to_container(conf, resolve=True).items() if v is not None}
    seed = kwargs.get("seed")
    if seed is not None and trials_so_far:
        kwargs["seed"] = int(np.random.SeedSequence([seed, trials_so_far]).generate_state(1)[0])
    if kwargs["_target_"] == "optuna.samplers.GridSampler":
        kwargs["search_space"] = space.grid()
    try:
        return instantiate(kwargs)
    except Exception as exc:  # noqa: BLE001 -- an argument or a package the sampler refuses
        cause = exc.__cause__ or exc
        raise ConfigError(f"hydra.sweeper.sampler ({kwargs['_target_']}): {cause}") from None


def open_study(sweeper: Any, storage: str | optuna.storages.BaseStorage) -> optuna.Study:
    """The study named ``study_name`` in the storage: a new one, or the one already there,
    which must go the same direction."""
    import sqlalchemy.exc

    try:
        study = optuna.create_study(
            study_name=sweeper.study_name, storage=storage, direction=sweeper.direction,
            load_if_exists=True,
        )  # fmt: skip
        directions = [d.name.lower() for d in study.directions]
    except (ValueError, ImportError, sqlalchemy.exc.SQLAlchemyError) as exc:
        raise ConfigError(
            f"hydra.sweeper.storage={sweeper.storage}: Optuna cannot open study "
            f"{sweeper.study_name!r} there ({exc}); give another storage or study_name"
        ) from None
    if directions != [sweeper.direction]:
        raise ConfigError(
            f"hydra.sweeper.direction={sweeper.direction}, but study {study.study_name!r} in "
            f"{sweeper.storage} was created to {' and '.join(directions)}; keep its direction, "
            "or give another study_name or storage"
        )
    return study


def continue_study(study: optuna.Study, n_trials: int, retry_failed: bool) -> Plan:
    """Count what earlier runs left. A trial left RUNNING by a killed process is marked failed
    (no process will ever report it) and asked again: a new trial with its parameters takes
    its place; with ``retry_failed``, so does each failed trial. Every other finished trial
    counts towards ``n_trials``."""
    killed = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    for number in killed:
        study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    finished = [t for t in trials if t.state.is_finished() and t.number not in retried]
    again = [t for t in finished if t.state == TrialState.FAIL
             and (t.number in killed or retry_failed)]  # fmt: skip
    to_run = max(n_trials - (len(finished) - len(again)), 0)
    again = again[:to_run]  # the others stay failed, and count
    for trial in again:
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
    if trials:
        asked_again = f" ({len(again)} of them asking failed ones again)" if again else ""
        print(f"optuna: study {study.study_name!r} has {len(finished) - len(again)} finished "
              f"trials; running {to_run} more{asked_again}", flush=True)  # fmt: skip
    return Plan(to_run=to_run, first_job=len(trials))


def job_value(ret: JobReturn) -> float | None:
    """The value a job returned, or None for a failed one (an exception, no value, NaN)."""
    if ret.status != JobStatus.COMPLETED:
        return None
    try:
        value = float(ret.return_value)
    except (TypeError, ValueError):
        return None
    return None if value != value else value


def tell(study: optuna.Study, trial: Trial, ret: JobReturn) -> bool:
    """Record a launched trial's outcome; True when it failed."""
    run_dir = OmegaConf.select(ret.hydra_cfg, "hydra.runtime.output_dir") if ret.hydra_cfg else None
    if run_dir is not None:
        trial.set_user_attr(RUN_DIR, str(run_dir))
    value = job_value(ret)
    try:
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
    except RuntimeError as exc:  # the grid sampler calls Study.stop (for optimize) when
        if not isinstance(study.sampler, optuna.samplers.GridSampler):  # the grid is done;
            raise  # the trial is recorded before that
        log.debug("grid sampler: %s", exc)
    return value is None


def write_results(study: optuna.Study, sweep_dir: str) -> None:
    """The best trial of the whole study, printed and in ``optimization_results.yaml``."""
    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not completed:
        print(f"optuna: no trial of study {study.study_name!r} completed; no best parameters")
        return
    best = study.best_trial
    log.info(f"Best parameters: {best.params}")
    log.info(f"Best value: {best.value}")
    results = {"name": "optuna", "best_params": best.params, "best_value": best.value}
    OmegaConf.save(OmegaConf.create(results), Path(sweep_dir) / "optimization_results.yaml")


def run_search(sweeper: Any, arguments: list[str]) -> None:
    """Ask, launch and tell, a batch of ``n_jobs`` trials at a time, until the study holds
    ``n_trials`` finished trials (or a batch fails more than ``max_failure_rate``)."""
    if sweeper.direction not in DIRECTIONS:
        raise ConfigError(f"hydra.sweeper.direction={sweeper.direction} must be one of "
                          f"{', '.join(DIRECTIONS)}")  # fmt: skip
    params = [f"{k}={v}" for k, v in (sweeper.params or {}).items()]
    space = SearchSpace.parse([*params, *arguments])
    n_trials = sweeper.n_trials
    is_grid = sweeper.sampler.get("_target_") == "optuna.samplers.GridSampler"
    if is_grid:
        n_trials = min(n_trials, int(np.prod([len(v) for v in space.grid().values()])))
    check_space(sweeper, space)
    retry = bool(sweeper.config.get("retry_failed"))
    storage = storage_of(sweeper.storage)
    study = open_study(sweeper, storage)
    plan = continue_study(study, n_trials, retry)
    sampler = make_sampler(sweeper.sampler, space, plan.first_job)
    study = optuna.load_study(study_name=study.study_name, storage=storage, sampler=sampler)
    log.info(f"Study name: {study.study_name}")
    log.info(f"Storage: {sweeper.storage}")
    log.info(f"Sampler: {type(study.sampler).__name__}")
    log.info(f"Direction: {sweeper.direction}")
    job, to_go = plan.first_job, plan.to_run
    while to_go > 0:
        trials = [ask(study, space, sweeper) for _ in range(min(to_go, sweeper.n_jobs))]
        overrides = [trial_overrides(trial, space) for trial in trials]
        try:
            for job_overrides in overrides:  # as Hydra's own sweepers do before a launch
                compose_job(sweeper, job_overrides)
        except ConfigError:
            for trial in trials:
                study.tell(trial, state=TrialState.FAIL)
            raise
        returns = sweeper.launcher.launch(overrides, initial_job_idx=job)
        job += len(returns)
        failed = sum(tell(study, t, ret) for t, ret in zip(trials, returns, strict=True))
        to_go -= len(trials)
        if failed / len(trials) > sweeper.max_failure_rate:
            rate = sweeper.max_failure_rate
            log.error(f"{failed} of {len(trials)} trials failed, more than "
                      f"hydra.sweeper.max_failure_rate={rate}: the search stops")  # fmt: skip
            break
    write_results(study, str(sweeper.config.hydra.sweep.dir))


def ask(study: optuna.Study, space: SearchSpace, sweeper: Any) -> Trial:
    """A new trial (a queued retry first), its fixed values recorded as user attributes."""
    try:
        trial = study.ask(dict(space.distributions))
    except ImportError as exc:  # a sampler's optional package (cmaes)
        raise ConfigError(f"hydra.sweeper.sampler: {exc}") from None
    for key, value in space.fixed.items():
        trial.set_user_attr(key, value)
    if sweeper.custom_search_space:
        extend = instantiate({"_target_": sweeper.custom_search_space, "_partial_": True})
        extend(sweeper.config, trial)
    return trial


def trial_overrides(trial: Trial, space: SearchSpace) -> list[str]:
    """The job's overrides: the drawn parameters, then the fixed values."""
    return space.overrides(trial.params)
