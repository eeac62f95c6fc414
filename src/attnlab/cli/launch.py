"""A single run composed once: the config the pre-flight checks read is the one the job runs on.

``hydra.main`` composes an app's config itself (twice: once to read ``hydra.mode``, once to
run), after attnlab's pre-flight composition has checked it and the run directory. For a
single run on the command line (no ``-m``, no Hydra flag, no ``hydra.mode``)
:class:`OneComposition` makes that one composition with Hydra's own node, the way
``hydra.main`` would (the same search path, job name, version base and ``hydra.mode=RUN``),
and runs the job on it as ``Hydra.run`` does: Hydra's callbacks, ``.hydra/`` files, job
logging and output directory are Hydra's. Sweeps keep ``hydra.main``: the sweeper
composes each job's config from its overrides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

JOB_NAME = "train"  # hydra.job.name, as hydra.main names attnlab.train's jobs
CONFIG_NAME = "config"
VERSION_BASE = "1.3"  # as attnlab's hydra.main and compose calls ask for


class OneComposition:
    """The Hydra instance and the one config of a single run."""

    def __init__(self, config_path: str) -> None:
        self.config_path = config_path
        self.hydra: Any = None
        self.cfg: DictConfig | None = None

    def compose(self, overrides: list[str]) -> DictConfig:
        """The run's config, Hydra's node included (checks skip it); errors as one line."""
        from hydra import version
        from hydra._internal.hydra import Hydra
        from hydra._internal.utils import create_automatic_config_search_path
        from hydra.core.global_hydra import GlobalHydra
        from hydra.types import RunMode

        from attnlab.cli.compose import composition_error

        version.setbase(VERSION_BASE)
        GlobalHydra.instance().clear()
        search_path = create_automatic_config_search_path(None, None, self.config_path)
        self.hydra = Hydra.create_main_hydra2(JOB_NAME, search_path)
        try:
            self.cfg = self.hydra.compose_config(
                CONFIG_NAME, [*overrides, "hydra.mode=RUN"], run_mode=RunMode.RUN,
                with_log_configuration=True,
            )  # fmt: skip
        except Exception as exc:
            GlobalHydra.instance().clear()
            composition_error(exc, overrides)
            raise
        return self.cfg

    def run(self, task_function: Callable[[DictConfig], Any]) -> Any:
        """``Hydra.run`` on the composed config: the job's return value, or its exception."""
        from hydra._internal.callbacks import Callbacks
        from hydra.core.utils import run_job
        from hydra.types import HydraContext

        cfg = self.cfg
        assert cfg is not None and self.hydra is not None, "compose() first"
        callbacks = Callbacks(cfg)
        callbacks.on_run_start(config=cfg, config_name=CONFIG_NAME)
        ret = run_job(
            hydra_context=HydraContext(config_loader=self.hydra.config_loader, callbacks=callbacks),
            task_function=task_function,
            config=cfg,
            job_dir_key="hydra.run.dir",
            job_subdir_key=None,
            configure_logging=True,
        )
        callbacks.on_run_end(config=cfg, config_name=CONFIG_NAME, job_return=ret)
        return ret.return_value  # re-raises the job's exception
