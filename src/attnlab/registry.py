"""Name -> class registries: how a YAML option value becomes a building block.

Adding a variant is one class plus one ``@REGISTRY.register("name")`` line; the
name is then a valid value of the matching ``model.*`` key, validated up front.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from attnlab.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named set of interchangeable implementations for one config key."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.key}={name} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: Any) -> T:
        if name not in self._items:
            raise ConfigError(
                f"{self.key}={name} is not a known option; use one of: {', '.join(self.names())}"
            )
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items
