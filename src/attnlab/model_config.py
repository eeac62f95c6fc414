"""A model's config: the keys of its architecture and of the components it chose (no torch).

``model.*`` on the command line is flat (``model.window=64``); which keys a model has is
not: an architecture (``model=decoder_only``) names the parts it always has and the
families it chooses from, each chosen component declares the keys it reads
(:mod:`attnlab.components`), and :meth:`ModelConfig.from_dict` resolves one model:

1. the architecture, then each family's chosen component (the value set, else the
   architecture's default, else the family's);
2. a key that was set but that none of these reads is refused, naming who would read it;
3. every key it reads takes the value set, else the architecture's default, else its own;
4. each value is checked against its key's type and rule, then the rules between
   components (:mod:`attnlab.components.rules`), then each component's own ``check``.

A value ``???`` (Hydra's "missing", which ``conf/model/_base.yaml`` gives every key) is not
set. The resolved config holds the keys its model reads and no others.
"""

from __future__ import annotations

from typing import Any

import attnlab.components  # noqa: F401  (declares every built-in component)
from attnlab.components.architectures import FROM_DATA, INITS, TIE_OPTIONS  # noqa: F401
from attnlab.components.core import FAMILIES, KEYS, ComponentConfig
from attnlab.components.rules import check_rules
from attnlab.errors import ConfigError
from attnlab.value_checks import describe, matches, nearest

ARCHITECTURES = FAMILIES["name"]
ATTN_IMPLS = tuple(FAMILIES["attn_impl"].names())
BLOCKS = tuple(FAMILIES["block"].names())
PARAMETRIZATIONS = tuple(FAMILIES["param"].names())
MISSING = "???"


def is_set(value: Any) -> bool:
    return not (isinstance(value, str) and value == MISSING)


def every_key() -> dict[str, Any]:
    """Each key any component reads (its family's name for a choosing key), with its default."""
    out: dict[str, Any] = {"name": ARCHITECTURES.default}
    out.update({key: family.default for key, family in FAMILIES.items() if key != "name"})
    out.update({key: declared.default for key, declared in KEYS.items()})
    return out


class ModelConfig:
    """The keys of one model and their values. ``from_dict`` resolves and checks them (a key
    the model does not read is refused); ``ModelConfig(**values)`` takes every known key with
    its default, and these values, unchecked (``validated()`` checks them)."""

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - set(every_key()))
        if unknown:
            raise TypeError(f"ModelConfig has no key {unknown[0]!r}")
        self._values = {**every_key(), **values}

    # -- resolution ----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: dict[str, Any], strict: bool = True) -> ModelConfig:
        """The model ``values`` describe, checked. ``strict=False`` drops the keys this model
        does not read instead of refusing them (a run saved before they were refused)."""
        resolved = cls.__new__(cls)
        resolved._values = resolve(values, strict)
        return resolved.validated(types=True)

    def validated(self, types: bool = False) -> ModelConfig:
        """Raise ConfigError naming the key and the fix for any invalid value: each key's type
        (``types``) and rule, the rules between components, then each component's check."""
        declared = {**KEYS}
        for key, value in self._values.items():
            if key in FAMILIES:
                FAMILIES[key].get(value)
                continue
            rule = declared.get(key)
            if rule is None:
                continue
            if types and not matches(value, rule.type):
                shown = "null" if value is None else value
                raise ConfigError(f"model.{key}={shown} must be {describe(rule.type)}")
            if rule.rule is not None:
                rule.rule(key, value)
        check_rules(self)
        for component in self.components():
            component.check(self)
        return self

    def with_data(self, values: dict[str, Any]) -> ModelConfig:
        """This (validated) config with the keys only the data knows (``vocab_size``, an
        image data module's sizes), each checked by its own rule."""
        for key, value in values.items():
            if key not in FROM_DATA or key not in self._values:
                raise ConfigError(f"model.{key} is not a key of model={self.name}; remove it")
            rule = KEYS[key].rule
            if rule is not None:
                rule(key, value)
        return self.replace(**values)

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with ``changes`` (keys this config holds), unchecked."""
        unknown = sorted(set(changes) - set(self._values))
        if unknown:
            raise ConfigError(f"model.{unknown[0]} is not a key of model={self.name}")
        copy = type(self).__new__(type(self))
        copy._values = {**self._values, **changes}
        return copy

    # -- reading -------------------------------------------------------------------------
    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"model={self._values.get('name')} has no key {key!r} "
                                 "(no component of it reads one)") from None  # fmt: skip

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelConfig) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self._values.items())))

    def __repr__(self) -> str:
        return f"ModelConfig({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def __getstate__(self) -> dict[str, Any]:
        return {"_values": self._values}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._values = state["_values"]

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def architecture(self) -> type[ComponentConfig]:
        return ARCHITECTURES.get(self.name)

    @property
    def families(self) -> tuple[str, ...]:
        return self.architecture.families  # type: ignore[attr-defined]

    def component(self, key: str) -> Any:
        """The config of the component ``model.<key>`` chose (``"ffn"`` → SwiGLU's)."""
        return FAMILIES[key].get(self._values[key])

    def components(self) -> list[Any]:
        """The architecture, the parts it always has, and the components it chose."""
        arch = self.architecture
        return [arch, *arch.parts, *(self.component(key) for key in self.families)]  # type: ignore[attr-defined]

    @property
    def encoder_layers(self) -> int:
        return self.get("n_encoder_layers") or self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.get("n_decoder_layers") or self.n_layers

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or self.component("ffn").default_d_ff(self.d_model)

    @property
    def tie(self) -> str:
        return TIE_OPTIONS[self.tie_embeddings]


def resolve(values: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    """The keys the model of ``values`` reads, each with its value (see the module's doc)."""
    given = {key: value for key, value in values.items() if is_set(value)}
    known = set(every_key())
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"model.{unknown[0]} is not a config key; "
                          f"{nearest(unknown[0], known, 'model.')}")  # fmt: skip
    arch = ARCHITECTURES.get(given.get("name", ARCHITECTURES.default))
    chosen = {"name": arch.name}
    for key in arch.families:  # type: ignore[attr-defined]
        family = FAMILIES[key]
        chosen[key] = family.get(given.get(key, arch.defaults.get(key, family.default))).name  # type: ignore[attr-defined]
    parts = [arch, *arch.parts, *(FAMILIES[k].get(chosen[k]) for k in arch.families)]  # type: ignore[attr-defined]
    parts += [also for part in parts for also in part.also_reads(given)]
    reads = {key: declared for part in parts for key, declared in part.keys.items()}
    unread = [key for key in given if key not in reads and key not in chosen]
    if strict and unread:  # a key that chooses a component says the most: named first
        key = min(unread, key=lambda k: (k not in FAMILIES, list(given).index(k)))
        raise ConfigError(not_read(key, given[key], chosen))
    out = dict(chosen)
    for key, declared in reads.items():
        out[key] = given.get(key, arch.defaults.get(key, declared.default))  # type: ignore[attr-defined]
    return out


def not_read(key: str, value: Any, chosen: dict[str, str]) -> str:
    """The refusal of a key set for a model that does not read it: who would read it, and
    what this model chose instead."""
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
    archs = [a for a in ARCHITECTURES if key in a.families or any(  # type: ignore[attr-defined]
        key in part.keys for part in (a, *a.parts))]  # type: ignore[attr-defined]  # fmt: skip
    transformers = [a.name for a in ARCHITECTURES if "attention" in a.families]  # type: ignore[attr-defined]
    readers, instead = [], f"model={chosen['name']}"
    for family_key, family in FAMILIES.items():  # a key every member of a family reads
        if family_key != "name" and family.readers(key) == family.names():
            archs += [a for a in ARCHITECTURES if family_key in a.families and a not in archs]  # type: ignore[attr-defined]
    archs = sorted(archs, key=lambda a: a.name)
    if archs:
        names = [a.name for a in archs]
        described = ("Transformer architectures" if names == transformers
                     else "model=" + ", ".join(names))  # fmt: skip
        readers.append(f"{described} (model={', '.join(names)})" if names == transformers
                       else described)  # fmt: skip
    for family_key, family in FAMILIES.items():
        members = family.readers(key) if family_key != "name" else []
        if members and members != family.names():
            readers.append(f"model.{family_key}={', '.join(members)}")
            if family_key in chosen:
                instead = f"model.{family_key}={chosen[family_key]}"
    fix = "remove it" if instead.startswith("model=") else "remove it, or choose one of those"
    if chosen.get("attention") == "hybrid" and instead == "model.attention=hybrid":
        instead, fix = "the kinds of model.layer_pattern", "remove it, or name one of those there"
    return (f"model.{key}={shown} applies to {' and '.join(readers)}, not {instead}; {fix}")
