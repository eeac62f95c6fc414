"""A component's config: the keys one part of a model reads, and how it is built (no torch).

A model is an architecture (``model=…``) and the parts it has; each part is a **component**,
declared once by a small class — its config:

* ``name``: the value of the model key that chooses it (``model.norm=pre``);
* ``keys``: the ``model.*`` keys it reads, each a :class:`Key` (default, type, rule, help);
* ``builds``: the ``"module:Class"`` it builds, imported only when a model is built, and
  ``build(cfg, …)``, which hands the class its keys;
* ``check(cfg)``: its own rules (RoPE rotates pairs: an even head size);
* its docstring's first line: what ``attnlab-train --options`` shows (the equation, the paper).

The components one key chooses between form a :class:`Family`; declaring a config with
``@FAMILY.declare`` registers it. An architecture's config names the families it has and
the parts it always has (:mod:`attnlab.components.architectures`); the keys of one model
are exactly those of its architecture and of the components it chose
(:mod:`attnlab.model_config`), so a key that none of them reads can be refused.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from attnlab.errors import ConfigError

Rule = Callable[[str, Any], None]  # (key, value): raise ConfigError naming both


class ModelKeys(Protocol):
    """What a component reads of one model's config (:class:`attnlab.model_config.ModelConfig`):
    each key it holds as an attribute, and the components it chose."""

    def __getattr__(self, key: str) -> Any: ...

    def get(self, key: str, default: Any = None) -> Any: ...

    def component(self, key: str) -> Any: ...

    @property
    def architecture(self) -> Any: ...

    @property
    def families(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Key:
    """One model key a component reads: its default, its type, its rule, what it means.

    ``type`` is a plain annotation (``int``, ``float``, ``bool``, ``str``, ``int | None``,
    ``Any``); the command line's values are checked against it before any rule runs.
    ``cite``: the paper (and section) a key that is a recipe of its own comes from;
    ``attnlab-train --options`` lists such keys with it."""

    default: Any
    type: Any
    rule: Rule | None = None
    help: str = ""
    cite: str = ""


def locate(path: str) -> Any:
    """The object at ``"module:attribute"``, imported."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


class ComponentConfig:
    """Base of every component's config: class attributes only, never instantiated."""

    name: ClassVar[str] = ""
    builds: ClassVar[str] = ""  # "module:Class"; the class may also be set (run-time registration)
    target_class: ClassVar[Any] = None
    keys: ClassVar[dict[str, Key]] = {}

    @classmethod
    def target(cls) -> Any:
        """The class this config builds, imported the first time it is asked for."""
        if cls.target_class is None:
            cls.target_class = locate(cls.builds)
        return cls.target_class

    @classmethod
    def check(cls, cfg: ModelKeys) -> None:
        """Raise ConfigError for values of the model this component cannot take."""

    @classmethod
    def also_reads(cls, given: dict[str, Any]) -> list[type[ComponentConfig]]:
        """Further components whose keys the model reads, given the values set (the kinds a
        hybrid's ``model.layer_pattern`` names); none by default."""
        return []

    @classmethod
    def summary(cls) -> str:
        """The docstring's first paragraph on one line: the equation or the paper."""
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        return " ".join(doc.split())


class Family:
    """The components that one model key chooses between (``model.norm``: the residual
    placements). ``default``: the name chosen when the key is not set (an architecture may
    choose another, :attr:`ArchitectureConfig.defaults`)."""

    def __init__(self, key: str, what: str, default: str, base: type[ComponentConfig]) -> None:
        self.key, self.what, self.default, self.base = key, what, default, base
        self.members: dict[str, type[ComponentConfig]] = {}
        # classes registered at run time on the torch side (``@RESIDUALS.register("mine")``:
        # attnlab.registry.Registry), each taken as a config without keys of its own
        self.registry: Any = None
        self._wrapped: dict[str, type[ComponentConfig]] = {}
        FAMILIES[key] = self

    def declare(self, config: type[ComponentConfig]) -> type[ComponentConfig]:
        """Register ``config`` under its ``name`` (a class decorator)."""
        if not issubclass(config, self.base):
            raise TypeError(f"{config.__name__} must subclass {self.base.__name__}")
        if config.name in self.members:
            raise ValueError(f"model.{self.key}={config.name} is registered twice")
        label = f"model.{self.key}={config.name}"
        for part in (config, *getattr(config, "parts", ())):  # an architecture's parts too
            for key, declared in part.keys.items():
                declare_key(key, declared, label)
        self.members[config.name] = config
        return config

    def get(self, name: Any) -> type[ComponentConfig]:
        if isinstance(name, str) and name in self.members:
            return self.members[name]
        registered = self._registered()
        if isinstance(name, str) and name in registered:
            return self._wrap(name, registered[name])
        label = "model" if self.key == "name" else f"model.{self.key}"
        raise ConfigError(
            f"{label}={name} is not a known option; use one of: {', '.join(self.names())}"
        )

    def names(self) -> list[str]:
        return sorted({*self.members, *self._registered()})

    def __contains__(self, name: object) -> bool:
        return name in self.members or name in self._registered()

    def _registered(self) -> dict[str, Any]:
        return dict(getattr(self.registry, "_items", None) or {})

    def _wrap(self, name: str, target: Any) -> type[ComponentConfig]:
        """A run-time class as a config: its family's keys, its docstring, no keys of its own."""
        wrapped = self._wrapped.get(name)
        if wrapped is None or wrapped.target_class is not target:
            attributes = {"name": name, "target_class": target, "__doc__": target.__doc__}
            wrapped = type(f"{target.__name__}Config", (self.base,), attributes)
            self._wrapped[name] = wrapped
        return wrapped

    def __iter__(self) -> Iterator[type[ComponentConfig]]:
        return iter(self.get(name) for name in self.names())

    def readers(self, key: str) -> list[str]:
        """The names of the members that read ``key``."""
        return [config.name for config in self if key in config.keys]


FAMILIES: dict[str, Family] = {}  # by the model key that chooses ("name", "norm", "pos", …)
KEYS: dict[str, Key] = {}  # every key any component reads, declared alike by each


def declare_key(key: str, declared: Key, by: str) -> None:
    """One key, one meaning: a key read by several components has the same default and type
    in each (``model.window`` for sliding_window and longformer)."""
    known = KEYS.setdefault(key, declared)
    if (known.default, known.type) != (declared.default, declared.type):
        raise ValueError(f"{by} declares model.{key} with default {declared.default!r} "
                         f"({declared.type}); elsewhere it is {known.default!r} ({known.type})")


# rules of one value ------------------------------------------------------------------------
def positive(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"model.{key}={value} must be a positive integer")


def positive_or_null(key: str, value: Any) -> None:
    if value is not None:
        positive(key, value)


def at_least_zero(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"model.{key}={value} must be an integer >= 0")


FLOAT32_RANGE = (1.1754943508222875e-38, 3.4028234663852886e38)  # its normal numbers


def positive_number(key: str, value: Any) -> None:
    """A number > 0 that float32 holds: the model computes with it in float32 or lower (an
    infinite soft-cap would make every logit inf·0 = NaN)."""
    if not FLOAT32_RANGE[0] <= float(value) <= FLOAT32_RANGE[1]:  # NaN fails too
        raise ConfigError(f"model.{key}={value} must be a finite number > 0 that float32 "
                          f"holds ({FLOAT32_RANGE[0]:.3g} to {FLOAT32_RANGE[1]:.3g})")  # fmt: skip


def positive_number_or_null(key: str, value: Any) -> None:
    if value is not None:
        positive_number(key, value)


def probability(key: str, value: Any) -> None:
    if not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"model.{key}={value} must be in [0, 1)")


def one_of(*allowed: Any) -> Rule:
    def check(key: str, value: Any) -> None:
        if value not in allowed:
            choices = ", ".join(str(a) for a in allowed)
            raise ConfigError(f"model.{key}={value} is not valid; use one of: {choices}")

    return check
