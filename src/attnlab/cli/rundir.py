"""An explicit run directory (``hydra.run.dir=…``) is never overwritten by accident, nor shared.

Hydra writes ``.hydra/config.yaml`` into the run directory before the job
starts, so both checks run in ``attnlab-train``'s own process before Hydra:

* a directory that already holds a run (its ``summary.json`` or checkpoints)
  is refused unless the run resumes there (``ckpt_path=last`` or a checkpoint
  inside it) or the user says ``overwrite=true``;
* a lock file (``.attnlab.lock``, ``fcntl.flock``) is held for the life of the
  process, so a second run started into the same directory is refused while
  the first one writes it. On a file system without locks (``flock`` fails with
  ENOLCK, ENOSYS or EOPNOTSUPP: NFS without a lock daemon, Lustre mounted without
  ``flock``) the run goes on with a warning: nothing can refuse a second run there.

Default run directories carry a timestamp and a random suffix and need neither.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from attnlab.errors import ConfigError

LOCK_FILE = ".attnlab.lock"
_held: list[int] = []  # open lock descriptors, kept until the process ends
# flock's errors on a file system that has no locks (as opposed to EWOULDBLOCK: locked)
NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)


def explicit_dir(overrides: list[str], key: str) -> Path | None:
    """The value of the last ``key=…`` override, resolved when it holds ``${…}``."""
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    if not values:
        return None
    value = values[-1].strip("'\"")
    if "${" in value:
        return None  # resolved by Hydra from the config (torchrun's shared directory)
    return Path(value).expanduser().absolute()


def holds_a_run(folder: Path) -> bool:
    return (folder / "summary.json").is_file() or any((folder / "checkpoints").glob("*.ckpt"))


def is_primary_process() -> bool:
    """Rank 0 of a distributed launch, or a plain process (the others share rank 0's dir):
    torchrun and Lightning's launcher set RANK/LOCAL_RANK/NODE_RANK, srun and submitit
    SLURM_PROCID."""
    keys = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")
    return all(os.environ.get(k, "0") == "0" for k in keys)


def claim(folder: Path, resuming: bool, overwrite: bool, what: str) -> None:
    """Refuse a directory that holds a finished run or is being written; else lock it."""
    if not is_primary_process():
        return
    if what == "hydra.run.dir":
        jobs = [folder]
    else:
        jobs = sorted(p.parent for p in folder.glob("*/summary.json"))
    folder.mkdir(parents=True, exist_ok=True)
    lock(folder, what)  # a run writing it now is the first thing to report
    taken = [d for d in jobs if holds_a_run(d)]
    if taken and not (resuming or overwrite):
        release_all()
        raise ConfigError(
            f"{what}={folder} already holds a run ({taken[0] / 'summary.json'}); continue it "
            f"with ckpt_path=last, choose another {what}, or pass overwrite=true to replace it"
        )
    if taken and overwrite and not resuming:
        for run in taken:  # the old run's results, so none is mistaken for the new run's
            shutil.rmtree(run / "checkpoints", ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (run / "summary.json").unlink()


def lock(folder: Path, what: str) -> None:
    import fcntl

    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)  # the umask applies
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in NO_LOCKS:
            print(f"warning: {what}={folder} is on a file system without file locks "
                  f"({errno.errorcode.get(exc.errno, exc.errno)}); a second run started into "
                  "it meanwhile would not be refused", file=sys.stderr)  # fmt: skip
        else:
            _refuse_locked(fd, folder, what)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    except OSError as exc:  # a full disk: say which file
        os.close(fd)
        raise OSError(exc.errno, exc.strerror, str(folder / LOCK_FILE)) from None
    _held.append(fd)


def _refuse_locked(fd: int, folder: Path, what: str) -> NoReturn:
    owner = os.read(fd, 64).decode(errors="replace").strip() or "another process"
    os.close(fd)
    raise ConfigError(
        f"{what}={folder} is being written by another run (pid {owner}); wait for it to "
        f"finish or choose another {what}"
    ) from None


def release_all() -> None:
    """Drop the locks this process holds (for callers that run several commands in-process)."""
    import fcntl

    while _held:
        fd = _held.pop()
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def check_writable(folder: Path, key: str) -> None:
    """Create ``folder`` and a file in it (os.access is no test for root or ACLs)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{key}={folder} is not a writable directory ({exc.strerror or exc}); choose one "
            "you can write, e.g. paths.log_dir=<dir> or hydra.run.dir=<dir>"
        ) from None


def check_run_dirs(
    overrides: list[str], multirun: bool, resuming: bool, overwrite: bool, log_dir: str
) -> Path:
    """Before Hydra creates anything: the output directory is writable, and not taken.
    Returns where the run's files go."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    folder = explicit_dir(overrides, key)
    if folder is None:
        folder = Path(log_dir).expanduser().absolute()
        check_writable(folder, "paths.log_dir")
        return folder
    check_writable(folder, key)
    claim(folder, resuming, overwrite, key)
    return folder


RUN_FIX = ("free disk space or choose a writable directory (paths.log_dir=…), then continue "
           "with ckpt_path=last")


def disk_error(exc: OSError, folder: str | Path | None = None, fix: str = RUN_FIX) -> str | None:
    """A one-line message for a write that failed for want of space or permission.

    It names the file (``exc.filename``), or else ``folder`` where the write went: a
    write to a full disk fails with no file name. ``fix``: what to do (a run's, by default)."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
        return None
    if exc.filename:
        where = f" writing {exc.filename}"
    else:
        where = f" writing into {folder}" if folder is not None else ""
    return f"{exc.strerror or exc}{where}; {fix}"
