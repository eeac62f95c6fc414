"""Grouping runs by the settings that differ between them.

By default the settings are the Hydra overrides that vary across the runs,
minus the ones that only tell repeats apart (``seed``) or say where a run
lives (``hydra.*``, ``tags``, ``task_name``, run directories). Runs without
overrides (W&B runs logged before attnlab recorded them) use every config key
instead, minus the same ones and what a run records about itself (``command``,
``git_sha``, ``params``, W&B's ``_wandb``). With ``by`` the settings are dotted
config keys; a config group alone (``model``) means the option chosen in it
(``model.name``).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attnlab.errors import UserError

from .runs import Run

NOT_SET = "—"
ALL_RUNS = "all runs"
# Settings that never define an ablation arm, and what a run records about itself.
IGNORED_KEYS = frozenset({
    "seed", "tags", "task_name", "ckpt_path", "run_dir", "resume", "retry_failed", "overwrite",
    "test", "optimized_metric", "command", "git_sha", "overrides", "params", "flops_per_token",
    "active_params",
})  # fmt: skip
IGNORED_PREFIXES = ("hydra.", "hydra/", "logger.", "callbacks.", "paths.", "_",
                    "trainer.enable_", "trainer.log_every_n_steps")  # fmt: skip
_MISSING = object()


@dataclass
class Group:
    """Runs that share one setting of the varying keys."""

    label: str
    settings: dict[str, str]
    runs: list[Run] = field(default_factory=list)

    @property
    def completed(self) -> list[Run]:
        return [r for r in self.runs if r.completed]


def parse_override(override: str) -> tuple[str, str]:
    """``"+model.norm=post"`` -> ``("model.norm", "post")``; ``"~key"`` -> ``("key", "null")``."""
    key, _, value = override.partition("=")
    if key.startswith("~"):
        return key.lstrip("~"), "null"
    return key.lstrip("+"), value


def is_ignored(key: str) -> bool:
    """Whether ``key`` names a run's identity or location rather than an ablation setting."""
    last = key.rsplit(".", 1)[-1]
    return (
        key in IGNORED_KEYS
        or last in IGNORED_KEYS
        or key.startswith(IGNORED_PREFIXES)
        or last == "dir"
        or last.endswith(("_dir", "_path"))
    )


def lookup(config: dict[str, Any], key: str) -> Any:
    """The value at dotted ``key``; a config group (a mapping) stands for its ``name``."""
    if key in config:  # flat, W&B-style keys
        node = config[key]
    else:
        node = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
    if isinstance(node, dict):
        return node.get("name", _MISSING)
    return node


def format_value(value: Any) -> str:
    """A config value spelled the way one writes it in a Hydra override."""
    if value is _MISSING:
        return NOT_SET
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):  # model.layer_pattern=[sliding_window*5,full]
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def parse_filters(filters: Sequence[str]) -> list[tuple[str, str]]:
    """``["model.norm=pre"]`` -> ``[("model.norm", "pre")]``; a UserError for anything else."""
    parsed = []
    for text in filters:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--filter wants KEY=VALUE (e.g. model.norm=pre), got '{text}'")
        parsed.append((key.strip(), value.strip()))
    return parsed


def filter_runs(runs: Sequence[Run], filters: Sequence[tuple[str, str]]) -> list[Run]:
    """The runs whose setting of every ``key`` is ``value`` (spelled as in an override)."""
    kept = list(runs)
    for key, value in filters:
        matching = [r for r in kept if setting(r, key) == value]
        if not matching:
            seen = sorted({setting(r, key) for r in kept})
            raise UserError(
                f"--filter {key}={value} matches no run; the runs have {key}="
                f"{', '.join(seen)}; check the key and the value"
            )
        kept = matching
    return kept


def setting(run: Run, key: str) -> str:
    """The run's value for ``key``: its resolved config, else its override, else ``—``."""
    value = lookup(run.config, key)
    if value is _MISSING:
        value = dict(parse_override(o) for o in run.overrides).get(key, _MISSING)
    return format_value(value)


def varying_keys(runs: Sequence[Run]) -> list[str]:
    """Override keys (or, for runs without overrides, config keys) whose value differs."""
    if any(r.overrides for r in runs):
        candidates = [parse_override(o)[0] for r in runs for o in r.overrides]
    else:
        candidates = [k for r in runs for k in _leaves(r.config)]
    keys = list(dict.fromkeys(k for k in candidates if not is_ignored(k)))
    return [k for k in keys if len({setting(r, k) for r in runs}) > 1]


def _leaves(config: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, value in config.items():
        key = f"{prefix}{name}"
        out.extend(_leaves(value, f"{key}.") if isinstance(value, dict) else [key])
    return out


def _check_keys(runs: Sequence[Run], keys: Sequence[str]) -> None:
    for key in keys:
        if any(setting(r, key) != NOT_SET for r in runs):
            continue
        leaves = {k for r in runs for k in _leaves(r.config)}
        known = sorted(leaves | {k.split(".")[0] for k in leaves})
        close = difflib.get_close_matches(key, known, n=3)
        hint = ", ".join(close) if close else ", ".join(known[:12])
        raise UserError(
            f"unknown --by key '{key}': no run's config has it; use a dotted config key "
            f"such as {hint or 'model.norm'}"
        )


def _sort_key(values: tuple[str, ...]) -> tuple[tuple[int, float, str], ...]:
    def one(v: str) -> tuple[int, float, str]:
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)

    return tuple(one(v) for v in values)


def group_runs(runs: Sequence[Run], by: Sequence[str] | None = None) -> list[Group]:
    """Group ``runs`` by dotted config keys ``by``, or by the overrides that vary."""
    keys = list(by) if by else varying_keys(runs)
    if by:
        _check_keys(runs, keys)
    groups: dict[tuple[str, ...], Group] = {}
    for run in runs:
        values = tuple(setting(run, k) for k in keys)
        if values not in groups:
            settings = dict(zip(keys, values, strict=True))
            label = " ".join(f"{k}={v}" for k, v in settings.items()) or ALL_RUNS
            groups[values] = Group(label, settings)
        groups[values].runs.append(run)
    return [groups[v] for v in sorted(groups, key=_sort_key)]
