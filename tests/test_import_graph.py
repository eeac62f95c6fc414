"""The direction of the package map (docs/design.md): each layer imports only the layers below.

Every ``import`` counts, also those inside functions (an import held inside a function
still ties the two modules together).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"

# package -> the attnlab packages it must never import
FORBIDDEN = {
    # the components' configs: torch-free declarations the command line is checked against
    "components": {"nn", "models", "inference", "tasks", "data", "callbacks", "cli", "bench",
                   "compare"},  # fmt: skip
    "nn": {"models", "inference", "tasks", "data", "callbacks", "cli", "bench", "compare"},
    "models": {"inference", "tasks", "data", "callbacks", "cli", "bench", "compare"},
    "inference": {"tasks", "data", "callbacks", "cli", "bench", "compare"},
    "compare": {"nn", "models", "inference", "tasks", "data", "callbacks", "bench"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The attnlab modules a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("attnlab")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab"):
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return found


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        return name or None

    edges = {}
    for name, path in MODULES.items():
        targets = {resolve(t) for t in imports(path)} - {None, name}
        edges[name] = {t for t in targets if t is not None}
    return edges


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if name.split(".")[1:2] == [package]
        for target in targets
        if target.split(".")[1:2] and target.split(".")[1] in FORBIDDEN[package]
    ]
    assert not wrong, wrong


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


PACKAGES = ["components", "nn", "models", "inference", "cli", "tasks", "data", "callbacks",
            "compare", "bench"]  # fmt: skip


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_within_a_package(package: str) -> None:
    inside = [c for c in cycles(graph()) if any(m.split(".")[1:2] == [package] for m in c)]
    assert not inside, inside


def test_no_import_cycle_anywhere() -> None:
    assert not cycles(graph())


def test_the_config_and_the_components_need_no_torch() -> None:
    names = ["attnlab.model_config", "attnlab.registry", "attnlab.value_checks",
             *(m for m in MODULES if m.startswith("attnlab.components"))]  # fmt: skip
    assert len(names) > 5
    for name in names:
        assert not any(t.startswith("attnlab.") and t.split(".")[1] in FORBIDDEN["compare"]
                       for t in graph()[name]), name  # fmt: skip
        text = MODULES[name].read_text(encoding="utf-8")
        assert "import torch" not in text and "from torch" not in text, name
