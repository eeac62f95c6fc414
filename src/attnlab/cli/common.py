"""What every entry point shares: the config directory, resolvers, one-line errors."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from omegaconf import OmegaConf

from attnlab.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_DIR.parents[1]  # src/attnlab -> repository root (editable installs)


def config_dir() -> Path:
    """``conf/`` of the checkout (editable install) or the copy inside the wheel."""
    for candidate in (REPO_ROOT / "conf", PACKAGE_DIR / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise UserError("attnlab's conf/ directory is missing; reinstall attnlab (make setup)")


def register_resolvers() -> None:
    """OmegaConf resolvers used in conf/ (idempotent)."""
    if not OmegaConf.has_resolver("attnlab_unique"):
        # cached, so a sweep resolves its directory once and every job agrees
        OmegaConf.register_new_resolver(
            "attnlab_unique", lambda: uuid.uuid4().hex[:8], use_cache=True
        )
    if not OmegaConf.has_resolver("attnlab_job_subdir"):
        from attnlab.cli.resume_sweep import job_subdir

        OmegaConf.register_new_resolver("attnlab_job_subdir", job_subdir)
    from attnlab.data.paths import register_resolvers as register_data_resolvers

    register_data_resolvers()


def torchrun_run_dir(argv: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """``argv`` plus one shared ``hydra.run.dir`` when torchrun started this process.

    torchrun starts every rank itself, and each would resolve Hydra's default run directory
    (timestamp + random suffix) on its own: one directory per rank. The rendezvous id
    (``TORCHELASTIC_RUN_ID``: ``--rdzv-id``, or a fresh uuid with ``--standalone``) is the same
    on every rank and node, so it names the directory. Unchanged when the command gives
    ``hydra.run.dir``, for a sweep (its directory is resolved once), or outside torchrun.
    """
    env = os.environ if environ is None else environ
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id is None or int(env.get("WORLD_SIZE", "1")) < 2:
        return argv
    if any(a in ("-m", "--multirun") for a in argv) or any(
        a.startswith("hydra.run.dir=") for a in argv
    ):
        return argv
    if run_id in ("", "none"):
        raise UserError(
            "under torchrun every rank needs the same run directory: pass "
            "hydra.run.dir=<a directory all nodes share> or torchrun --rdzv-id=<job id>"
        )
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)
    return [*argv, f"hydra.run.dir=${{paths.log_dir}}/${{task_name}}/runs/torchrun_{name}"]


def fail(message: str) -> None:
    """Print ``error: message`` as one line and exit with code 2."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(2)


@contextlib.contextmanager
def user_errors(folder: str | Path | None = None, fix: str | None = None) -> Iterator[None]:
    """Turn a UserError, or a write that failed for want of space or permission (into
    ``folder`` when the error names no file), into one ``error: …`` line and exit code 2.
    ``fix``: what the line tells to do about the disk (by default, a run's)."""
    from attnlab.cli.rundir import RUN_FIX, disk_error

    try:
        yield
    except UserError as exc:
        fail(str(exc))
    except OSError as exc:
        message = disk_error(exc, folder, fix or RUN_FIX)
        if message is None:
            raise
        fail(message)


@contextlib.contextmanager
def hydra_errors(where: Callable[[], str | Path | None]) -> Iterator[None]:
    """Around a Hydra app: a write of Hydra's own that fails for want of space or permission
    (``.hydra/config.yaml`` in the run directory, ``where()``: known once the run's directory
    is claimed) ends in one ``error:`` line, exit code 2.

    Hydra prints any exception escaping a run as a traceback and exits 1, unless
    ``HYDRA_FULL_ERROR`` is set, when it lets the exception through; so it is set here,
    and any other exception is printed and exits 1 as Hydra would (or propagates, when
    the user asked for full errors).
    """
    from attnlab.cli.rundir import disk_error

    asked = os.environ.get("HYDRA_FULL_ERROR", "0") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except Exception as exc:
        from hydra.errors import CompactHydraException

        message = disk_error(exc, where()) if isinstance(exc, OSError) else None
        if message is not None:
            fail(message)
        if asked:
            raise
        if isinstance(exc, CompactHydraException):  # Hydra's own short report
            print(exc, file=sys.stderr)
        else:
            traceback.print_exc()
        raise SystemExit(1) from None
    finally:
        os.environ["HYDRA_FULL_ERROR"] = "1" if asked else "0"


class _DropAdvertisements(logging.Filter):
    """Lightning's "💡 Tip: … try installing litlogger" line, printed at every Trainer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in str(record.msg)


_DROP_ADVERTISEMENTS = _DropAdvertisements()


def quiet_environment() -> None:
    """Defaults that keep runs non-interactive and offline-safe, and the console readable."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DROP_ADVERTISEMENTS)
    # Lightning 2.6 calls a torch.utils._pytree API that torch 2.13 deprecates
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")


def plain_text(docstring: str) -> str:
    """A module docstring as terminal text: reStructuredText's ``literal`` quotes and
    ``:role:`target``` markup dropped, a paragraph's closing ``::`` made one colon."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", docstring)
    text = re.sub(r"``(.+?)``", r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.MULTILINE)


def run_key_value_command(
    run: Callable[[list[str]], int], argv: list[str] | None, usage: str | None
) -> int:
    """Shared body of the ``key=value`` entry points (eval, generate): help, one-line errors."""
    from omegaconf.errors import OmegaConfBaseException

    from attnlab.errors import ConfigError

    quiet_environment()
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    try:
        with user_errors():
            args = list(sys.argv[1:] if argv is None else argv)
            if {"-h", "--help"} & set(args):
                print(plain_text(usage or ""))
                return 0
            try:
                return run(args)
            except OmegaConfBaseException as exc:  # a value the saved config cannot resolve
                message = " ".join(str(exc).split())
                raise ConfigError(f"{message}; fix or override that key") from None
    except SystemExit as exc:  # user_errors printed one `error: …` line
        return int(exc.code or 0)
