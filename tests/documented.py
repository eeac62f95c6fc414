"""README examples as code: a documented catalog line, registered for the length of a test."""

from __future__ import annotations

import re
import sys
import types
from typing import Any

import pytest

from attnlab.catalog import CATALOG, registry

LINE = re.compile(r'"(\w+)": "([\w.]+):(\w+)"')


def catalog_line(text: str, name: str) -> tuple[str, str]:
    """(module, class) of the ``"name": "module:Class"`` line of ``name`` in ``text``."""
    found = {m.group(1): (m.group(2), m.group(3)) for m in LINE.finditer(text)}
    assert name in found, f"no catalog line for {name} in the documented text"
    return found[name]


def add_to_catalog(
    monkeypatch: pytest.MonkeyPatch, key: str, name: str, text: str, namespace: dict[str, Any]
) -> None:
    """Put the class that the documented line of ``name`` names (defined in ``namespace``)
    where the line says it lives, and the line into the catalog's entry ``key``: both
    restored after the test."""
    module, cls = catalog_line(text, name)
    if module not in sys.modules:
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    monkeypatch.setattr(sys.modules[module], cls, namespace[cls], raising=False)
    monkeypatch.setitem(CATALOG[key].names, name, f"{module}:{cls}")
    monkeypatch.setattr(registry(key), "_loaded", {})
