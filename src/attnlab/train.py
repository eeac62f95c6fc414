"""``attnlab-train [overrides] [-m]``: train a model (fit, then test on the best checkpoint).

  attnlab-train model=decoder_only data=shakespeare_char model.norm=post seed=1
  attnlab-train -m model=decoder_only,encoder_decoder model.norm=pre,post   # a sweep
  attnlab-train --options      # every value of every model.*/optim.* key that takes a name
  attnlab-train --hydra-help   # Hydra's own flags
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from typing import Any

from attnlab.cli.common import (
    config_dir,
    hydra_errors,
    quiet_environment,
    register_resolvers,
    torchrun_run_dir,
    user_errors,
)

# Jobs of a joblib or submitit sweep run in other processes, which import this module to
# unpickle run_job; the config's resolvers must exist there before Hydra resolves it.
register_resolvers()


def run_job(cfg: Any) -> float | None:
    """One training run inside Hydra: always leaves summary.json in the run directory."""
    from hydra.core.hydra_config import HydraConfig

    from attnlab.cli.console import log_to_file
    from attnlab.cli.hydra_callbacks import PreFlight
    from attnlab.cli.run import RunRecord
    from attnlab.cli.rundir import is_primary_process

    checked = PreFlight.checked  # a single run's, checked as it started; a sweep's job: None
    record = RunRecord(cfg, HydraConfig.get(), checked)
    # Lightning's console handler must bind to the real stderr, not to this run's tee
    import lightning.pytorch  # noqa: F401

    with log_to_file(record.run_dir) if is_primary_process() else contextlib.nullcontext():
        return record.run(cfg, checked)


# Hydra runs in one of these modes; it refuses two at once with a traceback
HYDRA_MODES = {"-m": "--multirun", "--multirun": "--multirun", "-r": "--run", "--run": "--run",
               "-c": "--cfg", "--cfg": "--cfg", "-i": "--info", "--info": "--info",
               "-sc": "--shell-completion", "--shell-completion": "--shell-completion"}  # fmt: skip


def _split(argv: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun?, other Hydra flags than -r?); two modes at once end in one line."""
    from attnlab.cli.common import fail

    modes = sorted({HYDRA_MODES[a.split("=")[0]] for a in argv if a.split("=")[0] in HYDRA_MODES})
    if len(modes) > 1:
        fail(f"{' and '.join(modes)} cannot be combined: Hydra runs one of them at a time "
             "(--cfg and --info show one run's config: drop -m and give one value per key)")
    overrides = [a for a in argv if not a.startswith("-")]
    multirun = any(a in ("-m", "--multirun") for a in argv) or any(
        o.lstrip("+").replace(" ", "") == "hydra.mode=MULTIRUN" for o in overrides)
    flags = any(a.startswith("-") and a not in ("-m", "--multirun", "-r", "--run") for a in argv)
    return overrides, multirun, flags


def _launch(app: Any, argv: list[str], check: list[str] | None = None) -> None:
    """Run ``app`` with ``argv`` as the process's arguments: ``hydra.main`` reads them there
    only, and Lightning's launcher starts the other ranks of a run with them. ``check``: a
    sweep's overrides, checked again to name what Hydra refused to compose."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from attnlab.cli.compose import validate_overrides
    from attnlab.cli.hydra_callbacks import PreFlight
    from attnlab.cli.rundir import release_all

    saved_argv = sys.argv
    sys.argv = [saved_argv[0] if saved_argv else "attnlab-train", *argv]
    try:
        with hydra_errors(lambda: PreFlight.log_dir):  # a full disk names the run's folder
            try:
                app()
            except (HydraException, OmegaConfBaseException):
                if check is not None:  # the user's mistake ends in one line, exit code 2
                    validate_overrides(check, multirun=True)
                raise  # else Hydra's own report
    finally:
        sys.argv = saved_argv
        GlobalHydra.instance().clear()  # so main() can be called again in one process
        release_all()


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the process exit code. As the process's own command
    (``argv`` None), a SIGINT or SIGTERM after the command's work is done ends the process
    at once with the signal's exit code: it would otherwise raise KeyboardInterrupt out of
    whichever exit hook of torch or a logger runs then, with a traceback."""
    code = _main(argv)
    if argv is None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _leave)
    return code


def _leave(signum: int, frame: object) -> None:
    with contextlib.suppress(Exception):  # what was printed is kept
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(128 + signum)


def _main(argv: list[str] | None) -> int:
    import hydra

    from attnlab.cli import launch
    from attnlab.cli.compose import quote_non_ascii
    from attnlab.cli.hydra_callbacks import PreFlight, SweepStatus

    quiet_environment()
    register_resolvers()
    argv = quote_non_ascii(list(sys.argv[1:] if argv is None else argv))
    if "--options" in argv:
        from attnlab.cli.listing import print_options

        print_options()
        return 0
    with user_errors():
        argv = torchrun_run_dir(argv)
        conf = str(config_dir())
    overrides, multirun, flags = _split(argv)
    if "--help" in argv or "-h" in argv:
        from attnlab.cli.common import plain_text
        from attnlab.cli.help import help_text

        with user_errors():
            print(help_text(config_dir(), overrides, plain_text(__doc__ or "")))
        return 0
    SweepStatus.failed, PreFlight.checked, PreFlight.log_dir = [], None, None
    if multirun or flags:  # Hydra's own app: a sweep, --cfg, --info…
        app = hydra.main(config_path=conf, config_name=launch.CONFIG_NAME,
                         version_base=launch.VERSION_BASE)(run_job)
        argv = sorted(argv, key=lambda a: a not in ("-m", "--multirun"))  # argparse: -m first
        _launch(app, argv, overrides if multirun else None)
    else:  # a single run: composed once, run as Hydra runs it (PreFlight checks it first)
        with user_errors():
            cfg, overrides = launch.compose_run(conf, overrides)
        _launch(functools.partial(launch.run, cfg, run_job), overrides)
    return 1 if SweepStatus.failed else 0


if __name__ == "__main__":
    # Run the importable attnlab.train, not this __main__ copy, so that run_job pickles by
    # reference into joblib/submitit workers (which then import the module and its resolvers).
    from attnlab.train import main as entry_point

    sys.exit(entry_point())
