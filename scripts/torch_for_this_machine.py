"""Which torch ``make setup`` installs into the environment it runs in.

Run by ``make setup`` with the environment's own Python, before attnlab is installed (so it
imports nothing of attnlab). It prints the arguments of one ``pip install`` of torch, or
nothing when the torch already installed fits this machine, and says on stderr, in one
line, why it replaces a torch it finds:

- a machine with an NVIDIA driver (``nvidia-smi`` on the path, or ``/proc/driver/nvidia``)
  gets PyPI's torch, whose Linux build is a CUDA one; a CPU-only torch found there is
  replaced (``ATTNLAB_TORCH=cpu`` keeps it);
- a Linux x86-64 machine without one gets the CPU wheel (``+cpu``) from PyTorch's CPU index,
  a few hundred MB instead of the several GB of the CUDA build (where that index cannot be
  reached, from pip's configured indexes alone: a mirror or a local wheel cache);
- elsewhere (macOS, whose PyPI wheel has the MPS backend; Linux on ARM) PyPI's torch.

A torch already installed below ``--floor`` is replaced by ``--spec``; one at or above it is
kept (for example a user's own CUDA build). ``ATTNLAB_TORCH=cpu`` or ``=cuda`` overrides the
detection of the driver.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


class Installed(NamedTuple):
    """The torch found in the environment: its release and whether it was built for CUDA."""

    release: tuple[int, ...]
    cuda: bool


class Machine(NamedTuple):
    system: str  # platform.system(): Linux, Darwin, Windows
    arch: str  # platform.machine(): x86_64, aarch64, arm64
    nvidia: bool  # an NVIDIA driver is present (or ATTNLAB_TORCH=cuda)


def plan(installed: Installed | None, machine: Machine, spec: str, floor: tuple[int, int],
         cpu_index: bool = True) -> tuple[list[str], str | None]:  # fmt: skip
    """The ``pip install`` arguments for torch (empty: keep what is installed) and the note
    that says why an installed torch is replaced (None: nothing to say). ``cpu_index``:
    PyTorch's CPU index can be reached; where it cannot (a machine behind a mirror or with a
    local wheel cache), the ``+cpu`` build is asked of pip's configured indexes alone."""
    note = None
    if installed is not None:
        if installed.release[:2] < floor:
            note = (f"make setup: replacing torch {'.'.join(map(str, installed.release))}, "
                    f"older than attnlab's floor {'.'.join(map(str, floor))}, by {spec}")
        elif machine.nvidia and not installed.cuda:
            note = ("make setup: this machine has an NVIDIA driver but .venv's torch is a "
                    f"CPU-only build; replacing it by {spec} from PyPI (a CUDA build; "
                    "ATTNLAB_TORCH=cpu keeps the CPU one)")
        else:
            return [], None
    if machine.system == "Linux" and machine.arch == "x86_64" and not machine.nvidia:
        pinned = "==" in spec and "+" not in spec
        if not cpu_index:
            return [f"{spec}+cpu" if pinned else spec], note
        return (["--extra-index-url", CPU_INDEX, f"{spec}+cpu"] if pinned
                else ["--index-url", CPU_INDEX, spec]), note  # fmt: skip
    # `torch==X` is met by the CPU build `X+cpu` already installed: reinstall it from PyPI
    return (["--force-reinstall", spec] if note and installed else [spec]), note


def nvidia_driver() -> bool:
    choice = os.environ.get("ATTNLAB_TORCH", "").lower()
    if choice in ("cpu", "cuda"):
        return choice == "cuda"
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists()


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether ``url``'s host answers on its port (pip would retry an unreachable index for
    minutes, once for every package)."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def installed_torch() -> Installed | None:
    try:
        from importlib.metadata import version

        release = version("torch").split("+")[0]
    except Exception:  # no torch (importlib.metadata.PackageNotFoundError)
        return None
    try:
        import torch

        cuda = torch.version.cuda is not None
    except Exception:  # a broken install: replace it
        return Installed((0, 0), False)
    return Installed(tuple(int(p) for p in release.split(".")[:3] if p.isdigit()), cuda)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="torch==2.13.0", help="the torch to install")
    parser.add_argument("--floor", default="2.7",
                        help="the oldest torch attnlab runs on: 2.7 or the Makefile's (2, 7)")
    args = parser.parse_args(argv)
    floor = tuple(int(p) for p in re.findall(r"\d+", args.floor)[:2])
    machine = Machine(platform.system(), platform.machine(), nvidia_driver())
    installed = installed_torch()
    needs_index = machine.system == "Linux" and not machine.nvidia
    pip_args, note = plan(installed, machine, args.spec, floor,  # type: ignore[arg-type]
                          cpu_index=needs_index and reachable(CPU_INDEX))
    if note:
        print(note, file=sys.stderr)
    print(" ".join(pip_args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
