"""The install is true: the torch floor in pyproject.toml is the Makefile's, the installed
torch meets it, and the torch APIs attnlab calls exist in it (each newer than the floor
would be a crash on a torch that pip accepts)."""

from __future__ import annotations

import inspect
import re
from importlib import metadata
from pathlib import Path

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
