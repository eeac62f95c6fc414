"""The install is true: the torch floor in pyproject.toml is the Makefile's, the installed
torch meets it, and the torch APIs attnlab calls exist in it (each newer than the floor
would be a crash on a torch that pip accepts)."""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import tomllib
import torch
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# The release each API first shipped in: the floor must be at least the newest of them.
NEEDED = {
    "torch.compiler.set_stance(skip_guard_eval_unsafe=…)": "2.7",  # inference/decoding.py
    "torch.nn.attention.flex_attention.create_block_mask": "2.5",  # nn/flex.py
}


def _floor(requirements: list[str]) -> Version:
    (spec,) = [r for r in requirements if re.match(r"torch\s*[><=]", r)]
    return Version(re.search(r">=\s*([\d.]+)", spec).group(1))


def test_the_torch_floor_is_the_one_the_code_needs() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python ≥ 3.11)
    floor = _floor(re.findall(r'^\s*"(torch[^"]*)"', pyproject, flags=re.M))
    assert floor >= max(Version(v) for v in NEEDED.values()), (floor, NEEDED)
    makefile = re.search(r"TORCH_FLOOR := \((\d+), (\d+)\)", (ROOT / "Makefile").read_text())
    assert Version(".".join(makefile.groups())) == floor
    # the installed package says the same (a stale editable install would not)
    assert _floor(metadata.requires("attnlab")) == floor
    assert Version(torch.__version__.split("+")[0]) >= floor


def test_the_torch_apis_attnlab_calls_exist() -> None:
    assert "skip_guard_eval_unsafe" in inspect.signature(torch.compiler.set_stance).parameters
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    assert callable(create_block_mask) and callable(flex_attention)


SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_console_script_also_runs_as_python_dash_m(script: str) -> None:
    """docs/design.md: each script runs as ``python -m attnlab.<name>``: a package needs a
    ``__main__`` module, a module its ``if __name__ == "__main__"`` call."""
    module = SCRIPTS[script].split(":")[0]
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    if spec.submodule_search_locations is not None:  # a package
        main = importlib.util.find_spec(f"{module}.__main__")
        assert main is not None, f"python -m {module} fails: no {module}.__main__"
        source = Path(main.origin).read_text(encoding="utf-8")
        assert "main()" in source, source
    else:
        source = Path(spec.origin).read_text(encoding="utf-8")
        assert 'if __name__ == "__main__":' in source, f"python -m {module} does nothing"


def _load_torch_chooser() -> Any:
    spec = importlib.util.spec_from_file_location(
        "torch_for_this_machine", ROOT / "scripts" / "torch_for_this_machine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHOOSER = _load_torch_chooser()
CPU_WHEEL = ["--extra-index-url", CHOOSER.CPU_INDEX, "torch==2.13.0+cpu"]


@pytest.mark.parametrize(("installed", "machine", "pip_args", "note"), [
    # nothing installed: the CPU wheel on a Linux x86-64 machine without a driver, else PyPI's
    (None, ("Linux", "x86_64", False), CPU_WHEEL, None),
    (None, ("Linux", "x86_64", True), ["torch==2.13.0"], None),
    (None, ("Darwin", "arm64", False), ["torch==2.13.0"], None),
    # a torch that fits is kept: CUDA on a driver, CPU without one, whichever meets the floor
    (((2, 13, 0), True), ("Linux", "x86_64", True), [], None),
    (((2, 13, 0), False), ("Linux", "x86_64", False), [], None),
    (((2, 9, 1), False), ("Darwin", "arm64", False), [], None),
    # a CPU-only torch on a machine with a driver is replaced, with a note that says so
    (((2, 13, 0), False), ("Linux", "x86_64", True), ["--force-reinstall", "torch==2.13.0"],
     "NVIDIA driver"),
    # one below the floor is replaced by the pinned one for the machine
    (((2, 5, 1), False), ("Linux", "x86_64", False), CPU_WHEEL, "older than attnlab's floor"),
])  # fmt: skip
def test_make_setup_installs_the_torch_this_machine_needs(
    installed: Any, machine: tuple, pip_args: list[str], note: str | None
) -> None:
    found = CHOOSER.Installed(*installed) if installed else None
    args, said = CHOOSER.plan(found, CHOOSER.Machine(*machine), "torch==2.13.0", (2, 7))
    assert args == pip_args
    assert (said is None) if note is None else (note in said)


def test_a_torch_range_takes_the_cpu_index_whole() -> None:
    """A spec without one release cannot name the ``+cpu`` build: the CPU index replaces PyPI."""
    args, _ = CHOOSER.plan(None, CHOOSER.Machine("Linux", "x86_64", False), "torch>=2.8", (2, 7))
    assert args == ["--index-url", CHOOSER.CPU_INDEX, "torch>=2.8"]


def test_without_pytorchs_index_the_cpu_wheel_is_asked_of_pips_own_indexes() -> None:
    """A mirror or a wheel cache: pip would retry the unreachable index for every package."""
    args, _ = CHOOSER.plan(None, CHOOSER.Machine("Linux", "x86_64", False), "torch==2.13.0",
                           (2, 7), cpu_index=False)
    assert args == ["torch==2.13.0+cpu"]


def test_the_torch_chooser_reads_the_makefiles_floor_and_keeps_this_torch() -> None:
    floor = re.search(r"TORCH_FLOOR := (\(.*\))", (ROOT / "Makefile").read_text()).group(1)
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "torch_for_this_machine.py"), "--floor", floor],
        capture_output=True, text=True, env={**os.environ, "ATTNLAB_TORCH": "cpu"}, check=True,
    )
    kept = torch.version.cuda is None  # this environment's CPU torch on a "cpu" machine
    assert (run.stdout.strip() == "") == kept and run.stderr == ""


def test_make_setup_installs_for_users_what_training_needs_and_make_test_adds_the_rest() -> None:
    makefile = (ROOT / "Makefile").read_text()
    user = re.search(r"^\$\(STAMP\):.*?\n\n", makefile, flags=re.M | re.S).group(0)
    assert "-e ." in user and "[dev]" not in user and "hf-parity" not in user.lower()
    for target in ("test", "test-all", "lint", "bench"):
        assert re.search(rf"^{target}: setup-dev$", makefile, flags=re.M), target
    assert re.search(r"^train: setup$", makefile, flags=re.M)
