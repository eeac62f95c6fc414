"""Name -> class: the torch side of a family of components, and the other registries.

A ``model.*`` key's registry (``RESIDUALS = Registry("model.norm")``) is a view of its
family (:mod:`attnlab.components`): ``get(name)`` imports the class the component's config
builds. ``@REGISTRY.register("name")`` adds a class at run time (a notebook, a test, a
plug-in); the name is then a value of its key like a declared one, a component without
keys of its own. A registry that is not a model key (``TASKS``) names its built-in classes
itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from attnlab.components.core import FAMILIES, locate
from attnlab.errors import ConfigError

T = TypeVar("T")


def family_of(key: str) -> Any:
    """The family of ``model.<key>`` (``model`` for the architectures), or None."""
    import attnlab.components  # noqa: F401  (declares the built-in families)

    if key == "model":
        return FAMILIES["name"]
    return FAMILIES.get(key.removeprefix("model.")) if key.startswith("model.") else None


class Registry(Generic[T]):
    """A named set of interchangeable implementations for one config key."""

    def __init__(self, key: str, builtin: dict[str, str] | None = None) -> None:
        self.key = key
        self.family = family_of(key)
        self._builtin = dict(builtin or {})  # registries that are no model key
        self._items: dict[str, T] = {}  # registered at run time
        if self.family is not None:
            self.family.registry = self

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self:
                raise ValueError(f"{self.key}={name} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: Any) -> T:
        if isinstance(name, str) and name in self._items:
            return self._items[name]
        if self.family is not None:
            return self.family.get(name).target()
        if isinstance(name, str) and name in self._builtin:
            return locate(self._builtin[name])
        raise ConfigError(
            f"{self.key}={name} is not a known option; use one of: {', '.join(self.names())}"
        )

    def names(self) -> list[str]:
        declared = self.family.names() if self.family is not None else self._builtin
        return sorted({*declared, *self._items})

    def items(self) -> list[tuple[str, T]]:
        return [(name, self.get(name)) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self.names()


def known_names(key: str) -> list[str]:
    """The values of ``model.<key>`` (``model``: the architectures): declared, and those
    registered at run time in a registry already imported."""
    family = family_of(key)
    return family.names() if family is not None else []


def check_model_names(model: Any) -> None:
    """Refuse a ``model.*`` value that no family holds, in the family's own words (no torch)."""
    if not isinstance(model, dict):
        return
    family_of("model")
    for key, family in FAMILIES.items():
        value = model.get(key)
        if isinstance(value, str) and value != "???":
            family.get(value)


__all__ = ["Registry", "check_model_names", "known_names"]
