"""Hydra's sweep syntax as Optuna distributions: the search space of ``hydra.sweeper.params``
and of the command line.

=============================  ====================================================
``key=interval(a, b)``         a float in [a, b]
``key=tag(int, interval(a, b))``  an integer in [a, b]
``key=tag(log, interval(a, b))``  a float (``tag(int, log, …)``: an integer), drawn
                               uniformly in log space (a > 0)
``key=range(a, b[, step])``    a, a + step, … up to b, both ends included (Optuna's
                               bounds include the end; a grid sweep's range does not)
``key=choice(x, y, …)``        one of the values
``key=value``                  fixed: every trial runs with it (the last one given wins,
                               so the command line overrides hydra.sweeper.params)
=============================  ====================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, QuotedString, Transformer
from hydra.errors import HydraException
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from attnlab.errors import ConfigError

SCALARS = (str, int, float, bool, type(None))
FIX = "fix it in hydra.sweeper.params or on the command line"
INTERVAL_TAGS = {"int", "log"}


@dataclass
class SearchSpace:
    """What Optuna draws (``distributions``) and what every trial gets as it is (``fixed``)."""

    distributions: dict[str, BaseDistribution] = field(default_factory=dict)
    fixed: dict[str, str] = field(default_factory=dict)
    # choices that are lists or dicts: Optuna holds them as their text in the override grammar
    verbatim: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, entries: list[str]) -> SearchSpace:
        """From ``key=value`` lines, the sweeper's ``params`` first, the command line last."""
        try:
            overrides = OverridesParser.create().parse_overrides(entries)
        except HydraException as exc:
            raise ConfigError(f"{' '.join(str(exc).split())}; {FIX}") from None
        space = cls()
        for override in overrides:
            key = override.get_key_element()
            space.distributions.pop(key, None)
            space.fixed.pop(key, None)
            space.verbatim.pop(key, None)
            if override.is_sweep_override():
                space.distributions[key] = distribution(override)
                space.verbatim[key] = {text for _, text in choices(override) if text}
            else:
                space.fixed[key] = override.get_value_element_as_str()
        return space

    def probes(self) -> list[list[str]]:
        """Overrides that give every dimension each of its choices, or its two ends, once:
        the first with every dimension at its first value, then one value changed at a time."""
        ends = {key: probe_values(d) for key, d in self.distributions.items()}
        first = {key: values[0] for key, values in ends.items()}
        points = [first] + [{**first, key: v} for key, values in ends.items() for v in values[1:]]
        return [self.overrides(point) for point in points]

    def overrides(self, drawn: dict[str, Any]) -> list[str]:
        """A job's overrides: the drawn values in the override grammar (a string's special
        characters escaped, a list or dict choice as written), then the fixed values."""
        texts = [f"{key}={self.text(key, value)}" for key, value in drawn.items()]
        return [*texts, *(f"{key}={value}" for key, value in self.fixed.items())]

    def text(self, key: str, value: Any) -> str:
        if isinstance(value, str) and value in self.verbatim.get(key, ()):
            return value
        return Transformer.str(value)

    def grid(self) -> dict[str, list[Any]]:
        """Every value of every dimension, for Optuna's GridSampler."""
        return {key: grid_values(key, d) for key, d in self.distributions.items()}


def distribution(override: Override) -> BaseDistribution:
    """The Optuna distribution of one sweep override; a bad one is a ConfigError."""
    try:
        return _distribution(override)
    except (ValueError, TypeError) as exc:
        reason = str(exc).rstrip(".")
        raise ConfigError(f"'{override.input_line}': {reason}; {FIX}") from None


def _distribution(override: Override) -> BaseDistribution:
    value = override.value()
    tags = set(getattr(value, "tags", ()))
    allowed = INTERVAL_TAGS if override.is_interval_sweep() else set()
    if tags - allowed:
        known = f"interval(…) takes {', '.join(sorted(INTERVAL_TAGS))}"
        raise ValueError(f"tag {', '.join(sorted(tags - allowed))} does not apply ({known})")
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution([choice for choice, _ in choices(override)])
    if override.is_range_sweep():
        start, stop, step = value.start, value.stop, value.step
        if any(isinstance(x, float) for x in (start, stop, step)):
            return FloatDistribution(start, stop, step=step)
        return IntDistribution(int(start), int(stop), step=int(step))
    if override.is_interval_sweep():  # Hydra's interval(a, b) holds floats
        if "int" in tags:
            low, high = int(value.start), int(value.end)
            if (low, high) != (value.start, value.end):
                raise ValueError("tag(int, interval(a, b)) takes whole numbers a and b")
            return IntDistribution(low, high, log="log" in tags)
        return FloatDistribution(value.start, value.end, log="log" in tags)
    raise ValueError("not a search-space entry (interval, range or choice)")


def choices(override: Override) -> list[tuple[Any, str | None]]:
    """(the value Optuna holds, its override text when Optuna holds a list or a dict as
    that text) for each choice of a choice or shuffled range; none for other sweeps."""
    if not (override.is_choice_sweep() or override.is_range_sweep() and override.value().shuffle):
        return []
    held = []
    for choice in override.sweep_iterator(transformer=Transformer.identity):
        if isinstance(choice, QuotedString):
            choice = choice.text
        if isinstance(choice, SCALARS):
            held.append((choice, None))
        else:
            text = Transformer.str(choice)
            held.append((text, text))
    return held


def probe_values(distribution: BaseDistribution) -> list[Any]:
    """A categorical's choices, a numeric distribution's two ends."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    return [distribution.low, distribution.high]


def grid_values(key: str, distribution: BaseDistribution) -> list[Any]:
    """The values a discrete distribution holds, ends included."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    step = getattr(distribution, "step", None)
    if isinstance(distribution, (IntDistribution, FloatDistribution)) and step is not None:
        count = int(round((distribution.high - distribution.low) / step)) + 1
        return [distribution.low + i * step for i in range(count)]
    raise ConfigError(
        f"hydra/sweeper/sampler=grid takes choice(…) and range(…) only, not the interval of "
        f"{key}; make it a choice or a range, or use another sampler"
    )
