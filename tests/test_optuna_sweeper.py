"""attnlab's Optuna sweeper (``hydra/sweeper=optuna``): Hydra finds it, and its search space
is Hydra's sweep syntax read as Optuna's distributions. Sweeps and resumed studies through
the real command: tests/test_sweep_resume.py and tests/test_sweeps.py."""

from __future__ import annotations

import re

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from attnlab.errors import ConfigError
from hydra_plugins.attnlab_optuna_sweeper._space import SearchSpace


def test_hydra_discovers_the_sweeper_that_hydra_sweeper_optuna_names() -> None:
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    discovered = [f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(Sweeper)]
    assert search_config().hydra.sweeper._target_ in discovered


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("x=interval(0.0, 0.3)", FloatDistribution(0.0, 0.3)),
        ("x=interval(0, 1)", FloatDistribution(0.0, 1.0)),  # Hydra's interval holds floats
        ("x=tag(log, interval(1e-4, 1e-2))", FloatDistribution(1e-4, 1e-2, log=True)),
        ("x=tag(int, interval(1, 8))", IntDistribution(1, 8)),
        ("x=tag(int, log, interval(1, 64))", IntDistribution(1, 64, log=True)),
        ("x=range(0, 10, 2)", IntDistribution(0, 10, step=2)),
        ("x=range(0.0, 1.0, 0.25)", FloatDistribution(0.0, 1.0, step=0.25)),
        ("x=choice(pre, post)", CategoricalDistribution(["pre", "post"])),
        ("x=0,50,100", CategoricalDistribution([0, 50, 100])),
    ],
)
def test_each_sweep_syntax_is_the_optuna_distribution_it_names(entry: str, expected) -> None:
    assert SearchSpace.parse([entry]).distributions == {"x": expected}


def test_a_plain_value_is_fixed_for_every_trial_and_the_last_entry_wins() -> None:
    space = SearchSpace.parse(["lr=interval(0.1, 0.2)", "data=copy", "lr=0.5", "data=majority"])
    assert space.distributions == {}
    assert space.fixed == {"lr": "0.5", "data": "majority"}


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ("x=tag(log, interval(0, 1))", "'x=tag(log, interval(0, 1))'"),  # log of 0
        ("x=interval(2, 1)", "'x=interval(2, 1)'"),
        ("x=tag(int, interval(0.5, 4))", "whole numbers"),
        ("x=tag(log, choice(1, 2))", "tag log does not apply"),
        ("x=tag(exp, interval(1, 2))", "tag exp does not apply"),
        ("x=interval(1,", "hydra.sweeper.params or on the command line"),
    ],
)
def test_a_search_space_optuna_cannot_draw_from_is_a_config_error(entry: str, names: str) -> None:
    with pytest.raises(ConfigError, match=f".*{re.escape(names)}"):
        SearchSpace.parse([entry])


@pytest.mark.parametrize(
    ("entry", "drawn", "override", "value"),
    [
        ("x=choice([0.9, 0.98], [0.9, 0.999])", "[0.9,0.98]", "x=[0.9,0.98]", [0.9, 0.98]),
        ("x=choice('a b', c)", "a b", "x=a\\ b", "a b"),
        ("x=choice(true, false)", False, "x=False", False),
        ("x=tag(log, interval(1e-5, 1e-3))", 1e-05, "x=1e-05", 1e-05),
    ],
)
def test_a_drawn_value_reaches_the_job_as_the_override_that_gives_it(
    entry: str, drawn, override: str, value
) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    space = SearchSpace.parse([entry, "data=majority"])
    assert space.overrides({"x": drawn}) == [override, "data=majority"]
    assert OverridesParser.create().parse_override(override).value() == value


def test_the_grid_of_a_discrete_space_holds_both_ends() -> None:
    space = SearchSpace.parse(["a=range(0, 4, 2)", "b=choice(pre, post)"])
    assert space.grid() == {"a": [0, 2, 4], "b": ["pre", "post"]}


def test_a_grid_over_an_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="hydra/sweeper/sampler=grid takes choice"):
        SearchSpace.parse(["x=interval(0, 1)"]).grid()


def test_the_probes_give_each_choice_and_each_end_once() -> None:
    space = SearchSpace.parse(["a=choice(1, 2, 3)", "b=interval(0, 1)", "data=copy"])
    assert space.probes() == [
        ["a=1", "b=0.0", "data=copy"],
        ["a=2", "b=0.0", "data=copy"],
        ["a=3", "b=0.0", "data=copy"],
        ["a=1", "b=1.0", "data=copy"],
    ]


def search_config(*overrides: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from attnlab.cli.common import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", ["hparams_search=optuna", *overrides], return_hydra_config=True)
    GlobalHydra.instance().clear()
    return cfg


@pytest.mark.parametrize("name", ["tpe", "random", "grid", "qmc", "gp", "cmaes", "nsgaii"])
def test_each_sampler_composes_with_the_search_preset_and_builds_seeded(name: str) -> None:
    from hydra_plugins.attnlab_optuna_sweeper._study import make_sampler

    if name == "cmaes":
        pytest.importorskip("cmaes")
    conf = search_config(f"hydra/sweeper/sampler={name}").hydra.sweeper.sampler
    assert conf.seed == 1234
    sampler = make_sampler(conf, SearchSpace.parse(["a=choice(1, 2)"]), trials_so_far=0)
    assert f"optuna.samplers.{type(sampler).__name__}" == conf._target_


def test_a_continued_seeded_sampler_draws_anew_and_reproducibly() -> None:
    import optuna
    from omegaconf import OmegaConf

    from hydra_plugins.attnlab_optuna_sweeper._study import make_sampler

    conf = OmegaConf.create({"_target_": "optuna.samplers.RandomSampler", "seed": 7})
    space = SearchSpace.parse(["x=interval(0, 1)", "y=choice(a, b, c, d)"])

    def first_draw(trials_so_far: int) -> dict:
        study = optuna.create_study(sampler=make_sampler(conf, space, trials_so_far))
        return study.ask(space.distributions).params

    assert first_draw(3) == first_draw(3) != first_draw(0)
