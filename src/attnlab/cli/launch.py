"""A single run composed once: the config the pre-flight checks read is the one the job runs on.

``hydra.main`` composes an app's config twice (``Hydra.get_mode`` to read ``hydra.mode``,
then ``Hydra.run``), and reads its arguments from ``sys.argv`` only. For a single run on
the command line (no ``-m``, no Hydra flag but ``-r``) :func:`compose_run` makes that one
composition with Hydra's own node, the way ``hydra.main`` would (the same config
directory, job name, version base, ``hydra.mode=RUN`` and Hydra's logging), and
:func:`run` runs the job on it as ``Hydra.run`` does (``run_job`` between the callbacks'
``on_run_start``, where :class:`attnlab.cli.hydra_callbacks.PreFlight` checks it, and
``on_run_end``): Hydra's callbacks, ``.hydra/`` files, job logging and output directory
are Hydra's. Sweeps keep ``hydra.main``: the sweeper composes each job's config from its
overrides.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

JOB_NAME = "train"  # hydra.job.name, as hydra.main names attnlab.train's jobs
CONFIG_NAME = "config"
VERSION_BASE = "1.3"  # as attnlab's hydra.main and compose calls ask for


def compose_run(config_path: str, overrides: list[str]) -> tuple[DictConfig, list[str]]:
    """A single run's config, Hydra's node included, and its overrides: composed once, or
    once more when ``ckpt_path=last`` found its run (then with that run's directory and
    last.ckpt). A refusal is one line, and leaves no Hydra instance behind."""
    from hydra.core.utils import configure_log

    from attnlab.cli.compose import resume_overrides, split_sweeps

    split_sweeps(overrides, multirun=False)
    try:
        cfg = _compose(config_path, overrides)
        resumed = resume_overrides(cfg, overrides)
        if resumed != overrides:
            cfg = _compose(config_path, resumed)
    except BaseException:
        GlobalHydra.instance().clear()
        raise
    configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
    return cfg, resumed


def _compose(config_path: str, overrides: list[str]) -> DictConfig:
    from attnlab.cli.compose import composition_error

    GlobalHydra.instance().clear()
    initialize_config_dir(config_path, job_name=JOB_NAME, version_base=VERSION_BASE)
    try:
        return compose(CONFIG_NAME, [*overrides, "hydra.mode=RUN"], return_hydra_config=True)
    except Exception as exc:
        GlobalHydra.instance().clear()  # the error's hint composes again, without the node
        composition_error(exc, overrides)  # the user's mistake: one line, exit code 2
        raise


def run(cfg: DictConfig, task_function: Callable[[DictConfig], Any]) -> Any:
    """``Hydra.run`` on the composed config: the job's return value, or its exception."""
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    callbacks = HydraCallbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=CONFIG_NAME)
    loader = GlobalHydra.instance().config_loader()
    ret = run_job(
        hydra_context=HydraContext(config_loader=loader, callbacks=callbacks),
        task_function=task_function,
        config=cfg,
        job_dir_key="hydra.run.dir",
        job_subdir_key=None,
        configure_logging=True,
    )
    callbacks.on_run_end(config=cfg, config_name=CONFIG_NAME, job_return=ret)
    return ret.return_value  # re-raises the job's exception


class HydraCallbacks:
    """Hydra's callbacks of a composed config (``hydra.callbacks``), built with Hydra's
    ``instantiate`` and called as ``Hydra.run`` calls them, for ``run_job``'s
    ``HydraContext``: in order, the ends in reverse, an exception a warning (a callback
    that must stop the run raises SystemExit, as
    :class:`attnlab.cli.hydra_callbacks.PreFlight` does)."""

    def __init__(self, cfg: DictConfig) -> None:
        from hydra.utils import instantiate

        found = OmegaConf.select(cfg, "hydra.callbacks") or {}
        self.callbacks = [instantiate(params) for params in found.values()]

    def _notify(self, name: str, reverse: bool = False, **kwargs: Any) -> None:
        for callback in reversed(self.callbacks) if reverse else self.callbacks:
            try:
                getattr(callback, name)(**kwargs)
            except Exception as exc:
                warnings.warn(f"Callback {type(callback).__name__}.{name} raised "
                              f"{type(exc).__name__}: {exc}", stacklevel=2)  # fmt: skip

    def on_run_start(self, **kwargs: Any) -> None:
        self._notify("on_run_start", **kwargs)

    def on_job_start(self, **kwargs: Any) -> None:
        self._notify("on_job_start", **kwargs)

    def on_job_end(self, **kwargs: Any) -> None:
        self._notify("on_job_end", reverse=True, **kwargs)

    def on_run_end(self, **kwargs: Any) -> None:
        self._notify("on_run_end", reverse=True, **kwargs)
