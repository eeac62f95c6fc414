"""The install is true: the torch floor in pyproject.toml is the Makefile's, the installed
torch meets it, and the torch APIs attnlab calls exist in it (each newer than the floor
would be a crash on a torch that pip accepts)."""

from __future__ import annotations

import importlib.util
import inspect
import re
from importlib import metadata
from pathlib import Path

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
