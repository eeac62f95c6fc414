"""The notebooks run top to bottom headlessly, and are committed without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
NAMES = ["attention_maps", "compare_runs"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_headlessly_on_a_tiny_run(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the kernel inherits this environment: a few training steps, offline, one thread each
    monkeypatch.setenv("ATTNLAB_NOTEBOOK_STEPS", "10")
    monkeypatch.setenv("ATTNLAB_NOTEBOOK_SWEEP", str(tmp_path / "sweep"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    paths = [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        notebook, timeout=180, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )  # fmt: skip
    client.execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name} drew no figure"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_without_outputs(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
