"""Name -> class registries: how a YAML option value becomes a building block.

A built-in variant is one class plus one line of :mod:`attnlab.catalog`, which says
where the class lives; the class is imported the first time its name is asked for.
``@REGISTRY.register("name")`` adds a class at run time (a notebook, a test, a plug-in).
Either way the name is then a valid value of the matching ``model.*`` key, validated up
front.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from attnlab.catalog import CATALOG, locate
from attnlab.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named set of interchangeable implementations for one config key."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._builtin: dict[str, str] = CATALOG[key].names if key in CATALOG else {}
        self._items: dict[str, T] = {}
        self._loaded: dict[str, T] = {}  # built-ins already imported

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items or name in self._builtin:
                raise ValueError(f"{self.key}={name} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: Any) -> T:
        if name in self._items:
            return self._items[name]
        if isinstance(name, str) and name in self._builtin:
            if name not in self._loaded:
                self._loaded[name] = locate(self._builtin[name])  # type: ignore[assignment]
            return self._loaded[name]
        raise ConfigError(
            f"{self.key}={name} is not a known option; use one of: {', '.join(self.names())}"
        )

    def names(self) -> list[str]:
        return sorted({*self._builtin, *self._items})

    def items(self) -> list[tuple[str, T]]:
        return [(name, self.get(name)) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._builtin


def known_names(key: str) -> list[str]:
    """The names of registry ``key`` without importing it: the catalog's, and those
    registered at run time if the registry's module is already loaded."""
    module, _, variable = CATALOG[key].registry.partition(":")
    live = getattr(sys.modules.get(module), variable, None)
    extra = live.names() if isinstance(live, Registry) else []
    return sorted({*CATALOG[key].names, *extra})


def check_model_names(model: Any) -> None:
    """Refuse a ``model.*`` value that no registry holds, in the registry's own words; the
    same rule as :meth:`Registry.get`, read from the catalog so that torch is not imported."""
    from attnlab.catalog import MODEL_KEYS

    if not isinstance(model, dict):
        return
    for key, field in MODEL_KEYS.items():
        value = model.get(field)
        if not isinstance(value, str):
            continue  # absent, or a type the field check names
        names = known_names(key)
        if value not in names:
            choices = ", ".join(names)
            raise ConfigError(f"{key}={value} is not a known option; use one of: {choices}")
