"""The sweeper's config (``hydra/sweeper=optuna``) and its samplers (``hydra/sweeper/sampler=…``).

Registered in Hydra's ConfigStore when Hydra scans the ``hydra_plugins`` package, so the
keys are typed: ``hydra.sweeper.n_trials=ten`` is refused when the command is composed. A
sampler's keys left ``null`` take Optuna's own default; ``seed`` null draws an unseeded
sampler.

No ``from __future__ import annotations`` here: Hydra's plugin scan runs this module before
it is in ``sys.modules``, where dataclasses would look up string annotations.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class SamplerConf:
    _target_: str = MISSING
    seed: int | None = None


@dataclass
class TPESamplerConf(SamplerConf):
    """optuna.samplers.TPESampler (Tree-structured Parzen Estimator)."""

    _target_: str = "optuna.samplers.TPESampler"
    n_startup_trials: int | None = None  # random trials before TPE takes over
    n_ei_candidates: int | None = None
    multivariate: bool | None = None
    group: bool | None = None
    constant_liar: bool | None = None


@dataclass
class RandomSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class GridSamplerConf(SamplerConf):
    """Every combination of the search space's values, once; ``choice`` and ``range`` only."""

    _target_: str = "optuna.samplers.GridSampler"


@dataclass
class QMCSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.QMCSampler"
    qmc_type: str | None = None  # sobol, halton
    scramble: bool | None = None


@dataclass
class GPSamplerConf(SamplerConf):
    """optuna.samplers.GPSampler (Gaussian-process Bayesian optimisation)."""

    _target_: str = "optuna.samplers.GPSampler"
    n_startup_trials: int | None = None
    deterministic_objective: bool | None = None


@dataclass
class CmaEsSamplerConf(SamplerConf):
    """optuna.samplers.CmaEsSampler; needs the ``cmaes`` package (``pip install cmaes``)."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    sigma0: float | None = None
    n_startup_trials: int | None = None
    restart_strategy: str | None = None
    popsize: int | None = None
    inc_popsize: int | None = None
    use_separable_cma: bool | None = None
    with_margin: bool | None = None
    lr_adapt: bool | None = None


@dataclass
class NSGAIISamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.NSGAIISampler"
    population_size: int | None = None
    mutation_prob: float | None = None
    crossover_prob: float | None = None
    swapping_prob: float | None = None


SAMPLERS = {
    "tpe": TPESamplerConf,
    "random": RandomSamplerConf,
    "grid": GridSamplerConf,
    "qmc": QMCSamplerConf,
    "gp": GPSamplerConf,
    "cmaes": CmaEsSamplerConf,
    "nsgaii": NSGAIISamplerConf,
}


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.attnlab_optuna_sweeper.ResumableOptunaSweeper"
    # the sampler reaches the sweeper as config: it is built when the study's trials are known
    _recursive_: bool = False
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConf = MISSING
    direction: str = "minimize"  # or maximize: the value each job returns
    # an RDB URL (sqlite:///path.db, postgresql://user:pass@host/db): the study outlives
    # the process and continues when the command is run again; null keeps it in memory
    storage: str | None = None
    study_name: str | None = None
    n_trials: int = 20  # trials of the whole study, counting those of earlier runs
    n_jobs: int = 2  # trials asked for at once (a batch, run side by side by a parallel launcher)
    max_failure_rate: float = 0.0  # failed fraction of a batch above which the search stops
    # key: Hydra sweep syntax (interval, tag(int|log, interval), choice, range), or a fixed value
    params: dict[str, str] | None = None
    # a callable (cfg, optuna.trial.Trial) -> None that suggests more parameters
    custom_search_space: str | None = None


_store = ConfigStore.instance()
_store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="attnlab")
for _name, _node in SAMPLERS.items():
    _store.store(group="hydra/sweeper/sampler", name=_name, node=_node, provider="attnlab")
