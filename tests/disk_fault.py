"""A full or read-only disk, simulated in this process below one folder (the fault tests of
attnlab-train and attnlab-export).

Every open for writing below the folder is counted, and from the ``at``-th on it fails —
read-only (``EROFS``, at the open) or full (``ENOSPC``: the open succeeds, and every write
or flush through it fails, as on a real full disk, with no file name in the error: the file
object is ``/dev/full``'s).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path

import pytest

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
FULL = "/dev/full"


class DiskFault:
    """Opens for writing below ``root`` are counted; from the ``at``-th (0-based) on they
    fail with ``code`` (``at=None``: only count). ``paths`` lists what was opened."""

    def __init__(self, root: Path, code: int, at: int | None) -> None:
        self.root, self.code, self.at = root.resolve(), code, at
        self.paths: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_open, real_os_open = builtins.open, os.open
        real_write, real_fdopen = os.write, os.fdopen
        full_fds: set[int] = set()  # opened below root after the fault: writes fail

        def fault_open(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN202
            if isinstance(file, str | os.PathLike) and set(str(mode)) & set("wax+"):
                if self._fails(file):
                    real_open(file, mode, *args, **kwargs).close()  # the open itself succeeds
                    return real_open(FULL, "a" + ("b" if "b" in mode else ""), *args, **kwargs)
            return real_open(file, mode, *args, **kwargs)

        def fault_os_open(path, flags, mode=0o777, *args, **kwargs):  # noqa: ANN001, ANN202
            fails = bool(flags & WRITE_FLAGS) and self._fails(path)
            fd = real_os_open(path, flags, mode, *args, **kwargs)
            if fails:
                full_fds.add(fd)
            return fd

        def fault_write(fd: int, data: bytes) -> int:
            if fd in full_fds:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(fd, data)

        def fault_fdopen(fd: int, mode: str = "r", *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if fd in full_fds:
                full_fds.discard(fd)
                os.close(fd)
                return real_open(FULL, "a" + ("b" if "b" in mode else ""))
            return real_fdopen(fd, mode, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", fault_open)
        monkeypatch.setattr(io, "open", fault_open)
        monkeypatch.setattr(os, "open", fault_os_open)
        monkeypatch.setattr(os, "write", fault_write)
        monkeypatch.setattr(os, "fdopen", fault_fdopen)

    def _fails(self, path: object) -> bool:
        """True: redirect to /dev/full (ENOSPC on write); raises EROFS at the open."""
        resolved = Path(os.fsdecode(path)).absolute()  # type: ignore[arg-type]
        if resolved != self.root and self.root not in resolved.parents:
            return False
        self.paths.append(str(resolved))
        if self.at is None or len(self.paths) <= self.at:
            return False
        if self.code == errno.EROFS:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(resolved))
        return True
