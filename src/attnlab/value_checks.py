"""Values against their annotations: the type rules every config section shares (no torch).

A plain value read from a config (``OmegaConf.to_container``) is checked against the
annotation of the field, argument or key it sets; a wrong one is refused in one line that
says what it must be (``model.dropout=abc must be a number``), and an unknown key with the
nearest valid spelling (``+sed=1`` → "did you mean seed?").
"""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import os
import pathlib
import types
import typing
from typing import Any

from attnlab.errors import ConfigError


def describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [describe(a) for a in args if a is not type(None)]
        text = " or ".join(dict.fromkeys(parts))
        return f"{text} (or null)" if type(None) in args else text
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} {describe(args[0]).removeprefix('a ')}s"
        return "a list"
    if origin in (dict, collections.abc.Mapping):
        return "a mapping"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if hint in (os.PathLike, pathlib.Path):
        return "a path"
    return f"a {getattr(hint, '__name__', hint)} (a mapping with _target_)"


def matches(value: Any, hint: Any) -> bool:
    """Whether a plain config value (from OmegaConf.to_container) fits the annotation."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str or hint in (os.PathLike, pathlib.Path):
        return isinstance(value, str)
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(matches, value, args))
        return not args or all(matches(v, args[0]) for v in value)
    if origin in (dict, collections.abc.Mapping) or hint in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return False
        return len(args) != 2 or all(matches(v, args[1]) for v in value.values())
    if isinstance(hint, type):  # an object built from a `_target_` mapping (checked by targets)
        return isinstance(value, dict) and "_target_" in value
    return True  # an annotation this checker does not model: leave it to the callee


def nearest(key: str, known: collections.abc.Iterable[str], prefix: str = "") -> str:
    """ "did you mean <prefix><closest>?", or the list of valid keys when none is close."""
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    return f"valid keys: {', '.join(prefix + k for k in known)}"


def check_keys(values: dict[str, Any], hints: dict[str, Any], prefix: str) -> None:
    """Refuse unknown keys (naming the nearest valid one) and values of the wrong type."""
    for key, value in values.items():
        name = f"{prefix}{key}"
        if key not in hints:
            raise ConfigError(f"{name} is not a config key; {nearest(key, hints, prefix)}")
        if not matches(value, hints[key]):
            shown = "null" if value is None else value
            raise ConfigError(f"{name}={shown} must be {describe(hints[key])}")
