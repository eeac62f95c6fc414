"""``attnlab-train [overrides] [-m]``: train (fit, then test on the best checkpoint).

attnlab-train model=decoder_only model.norm=post data=copy seed=1
attnlab-train -m model=decoder_only,encoder_decoder model.norm=pre,post
attnlab-train --options      # every value of every registry-backed key, with its reference
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any

from attnlab.cli.common import (
    config_dir,
    hydra_errors,
    quiet_environment,
    register_resolvers,
    torchrun_run_dir,
    user_errors,
)

HYDRA_FLAGS_WITHOUT_CHECK = (
    "--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--shell-completion",
)  # fmt: skip

# Jobs of a joblib or submitit sweep run in other processes, which import this module to
# unpickle run_job; the config's resolvers must exist there before Hydra resolves it.
register_resolvers()


def run_job(cfg: Any, checked: Any = None) -> float | None:
    """One training run inside Hydra: always leaves summary.json in the run directory.
    ``checked``: the ModelConfig the pre-flight check of this very config returned."""
    from hydra.core.hydra_config import HydraConfig

    from attnlab.cli.console import log_to_file
    from attnlab.cli.run import RunRecord
    from attnlab.cli.rundir import is_primary_process

    record = RunRecord(cfg, HydraConfig.get(), checked)
    # Lightning's console handler must bind to the real stderr, not to this run's tee
    import lightning.pytorch  # noqa: F401

    with log_to_file(record.run_dir) if is_primary_process() else contextlib.nullcontext():
        return record.run(cfg, checked)


def __getattr__(name: str) -> Any:
    """``train``, ``as_user_error`` and ``EXIT_CODES`` live in :mod:`attnlab.cli.run`
    (imported when first asked for, so ``--help`` stays free of torch)."""
    if name in ("train", "as_user_error", "EXIT_CODES"):
        from attnlab.cli import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sets_mode(overrides: list[str]) -> bool:
    """``hydra.mode=…`` on the command line: Hydra's own app decides how to run."""
    return any(o.lstrip("+~").startswith("hydra.mode") for o in overrides)


# Hydra runs in one of these modes; it refuses two at once with a traceback
HYDRA_MODES = {"-m": "--multirun", "--multirun": "--multirun", "-r": "--run", "--run": "--run",
               "-c": "--cfg", "--cfg": "--cfg", "-i": "--info", "--info": "--info",
               "-sc": "--shell-completion", "--shell-completion": "--shell-completion"}  # fmt: skip


def _split(argv: list[str]) -> tuple[list[str], bool, bool]:
    """(overrides, multirun?, has other Hydra flags?); two modes at once end in one line."""
    from attnlab.cli.common import fail

    modes = sorted({HYDRA_MODES[a.split("=")[0]] for a in argv if a.split("=")[0] in HYDRA_MODES})
    if len(modes) > 1:
        fail(f"{' and '.join(modes)} cannot be combined: Hydra runs one of them at a time "
             "(--cfg and --info show one run's config: drop -m and give one value per key)")
    multirun = any(a in ("-m", "--multirun") for a in argv)
    flags = any(a.split("=")[0] in HYDRA_FLAGS_WITHOUT_CHECK for a in argv)
    overrides = [a for a in argv if not a.startswith("-")]
    return overrides, multirun, flags


@contextlib.contextmanager
def _cleared_on_refusal() -> Any:
    """A refused run leaves no Hydra instance behind (main() may be called again)."""
    from hydra.core.global_hydra import GlobalHydra

    try:
        yield
    except BaseException:
        GlobalHydra.instance().clear()
        raise


def _composed_once(one: Any, overrides: list[str]) -> tuple[list[str], Any, Any]:
    """A single run's overrides, config and checked ModelConfig: composed and checked once,
    or once more when ``ckpt_path=last`` found its run (then with that run's directory)."""
    from attnlab.cli.compose import check_values, resume_overrides, split_sweeps

    split_sweeps(overrides, multirun=False)
    cfg = one.compose(overrides)
    checked = check_values(cfg, this_machine=True)
    resumed = resume_overrides(cfg, overrides)
    if resumed != overrides:
        cfg = one.compose(resumed)
        checked = check_values(cfg, this_machine=True)
    return resumed, cfg, checked


def _claim_run_dirs(cfg: Any, overrides: list[str], multirun: bool) -> Path:
    """Refuse run directories the run may not write (a finished run, a resume that does not
    match, a sweep to plan); return where the run's files go."""
    from attnlab.cli.resume_sweep import plan_sweep
    from attnlab.cli.rundir import check_run_dirs, explicit_dir

    resuming = cfg.get("ckpt_path") not in (None, "") or bool(cfg.get("resume"))
    if cfg.get("resume"):
        plan_sweep(overrides, multirun)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    log_dir = explicit_dir(overrides, key) or Path(str(cfg.paths.log_dir)).absolute()
    check_run_dirs(overrides, multirun, resuming, bool(cfg.get("overwrite")),
                   str(cfg.paths.log_dir))  # fmt: skip
    return log_dir


def _launch(app: Any, argv: list[str], log_dir: Path | None) -> None:
    """Run ``app`` with ``argv`` as the process's arguments (Hydra reads them there)."""
    from hydra.core.global_hydra import GlobalHydra

    from attnlab.cli.rundir import release_all

    saved_argv = sys.argv
    sys.argv = [saved_argv[0] if saved_argv else "attnlab-train", *argv]
    try:
        with hydra_errors(log_dir):
            app()
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

    from attnlab.cli.compose import quote_non_ascii, resume_overrides, validate_overrides
    from attnlab.cli.launch import OneComposition
    from attnlab.cli.sweep import SweepStatus

    quiet_environment()
    register_resolvers()
    argv = quote_non_ascii(list(sys.argv[1:] if argv is None else argv))
    if "--options" in argv:
        from attnlab.cli.listing import print_options

        print_options()
        return 0
    with user_errors():
        argv = torchrun_run_dir(argv)
    overrides, multirun, flags = _split(argv)
    if "--help" in argv or "-h" in argv:
        from attnlab.cli.help import help_text

        with user_errors():
            print(help_text(config_dir(), overrides))
        return 0
    log_dir = None  # where the run's files go, named when a full disk's error names no file
    one = None  # a single run without Hydra flags: composed once, checked once
    with user_errors(), _cleared_on_refusal():
        conf = str(config_dir())
        if not multirun and overrides == argv and not _sets_mode(overrides):
            one = OneComposition(conf)
            overrides, cfg, checked = _composed_once(one, overrides)
            argv = overrides
        elif not flags:
            # a sweep launched to a cluster runs elsewhere: its jobs check their machine
            local = not any(o.startswith("hydra/launcher=") and ("slurm" in o or "submitit" in o)
                            for o in overrides)  # fmt: skip
            cfg = validate_overrides(overrides, multirun, this_machine=local)
            if not multirun:
                overrides = resume_overrides(cfg, overrides)
                argv = [a for a in argv if a.startswith("-")] + overrides
        if not flags:
            log_dir = _claim_run_dirs(cfg, overrides, multirun)
    SweepStatus.failed = []
    if one is not None:
        app = functools.partial(one.run, functools.partial(run_job, checked=checked))
    else:
        app = hydra.main(config_path=conf, config_name="config", version_base="1.3")(run_job)
    _launch(app, argv, log_dir)
    return 1 if SweepStatus.failed else 0


if __name__ == "__main__":
    # Run the importable attnlab.train, not this __main__ copy, so that run_job pickles by
    # reference into joblib/submitit workers (which then import the module and its resolvers).
    from attnlab.train import main as entry_point

    sys.exit(entry_point())
