"""The names of the ``model.*`` registries, read from attnlab's source without importing it.

Importing the registries imports torch (seconds); reading the ``@REGISTRY.register("name")``
lines of the modules that hold them takes milliseconds, so a misspelt value is refused
before torch is loaded. A variant is still one class and one name: its ``register`` line
is what is read. Registrations made at run time (a registry module already imported, as
in a test or a notebook) count too. A registry with a registration whose name is not a
string literal is not read this way, and is left to the full check that follows.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path
from typing import Any

from attnlab.errors import ConfigError

# registry key -> the model config key its value sits in (ARCHITECTURES: ``model.name``)
CONFIG_KEYS = {"model": "name"}


@functools.cache
def source_registries() -> dict[str, tuple[str, str, frozenset[str]]]:
    """{registry key: (module, variable, names)} for every registry of attnlab read completely."""
    return scan(Path(__file__).resolve().parent.parent)


def scan(root: Path, package: str = "attnlab") -> dict[str, tuple[str, str, frozenset[str]]]:
    """``source_registries`` of the package whose source is under ``root``."""
    found: dict[str, tuple[str, str]] = {}  # variable -> (key, module)
    names: dict[str, set[str]] = {}
    unread: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "Registry(" not in text and ".register(" not in text:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join((package, *parts[: -1 if parts[-1] == "__init__" else None]))
        for node in ast.walk(ast.parse(text)):
            definition = _definition(node)
            if definition is not None:
                found[definition[0]] = (definition[1], module)
            registration = _registration(node)
            if registration is not None:
                variable, name = registration
                if name is None:
                    unread.add(variable)
                else:
                    names.setdefault(variable, set()).add(name)
    return {
        key: (module, variable, frozenset(names.get(variable, ())))
        for variable, (key, module) in found.items()
        if variable not in unread
    }


def _definition(node: ast.AST) -> tuple[str, str] | None:
    """``X = Registry("key")`` or ``X: Registry[...] = Registry("key")``: (X, key)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        target, value = node.target, node.value
    else:
        return None
    if not (isinstance(target, ast.Name) and isinstance(value, ast.Call)):
        return None
    func = value.func
    if not (isinstance(func, ast.Name) and func.id == "Registry" and value.args):
        return None
    key = value.args[0]
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return target.id, key.value
    return None


def _registration(node: ast.AST) -> tuple[str, str | None] | None:
    """``X.register("name")``: (X, name); (X, None) when the name is not a literal."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    func = node.func
    if func.attr != "register" or not isinstance(func.value, ast.Name):
        return None
    arg = node.args[0] if node.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return func.value.id, arg.value
    return func.value.id, None


def known_names(key: str) -> list[str] | None:
    """The registered names of registry ``key`` (source and run time), or None if unread."""
    entry = source_registries().get(key)
    if entry is None:
        return None
    module, variable, names = entry
    live = getattr(sys.modules.get(module), variable, None)
    extra = live.names() if live is not None and hasattr(live, "names") else []
    return sorted(names | set(extra))


def check_model_names(model: Any) -> None:
    """Refuse a ``model.*`` value that no registry holds, in the registry's own words."""
    if not isinstance(model, dict):
        return
    for key in source_registries():
        if not key.startswith("model"):
            continue
        field = CONFIG_KEYS.get(key, key.removeprefix("model."))
        value = model.get(field)
        if not isinstance(value, str):
            continue  # absent, or a type the full check names
        names = known_names(key)
        if names is not None and value not in names:
            choices = ", ".join(names)
            raise ConfigError(f"{key}={value} is not a known option; use one of: {choices}")
