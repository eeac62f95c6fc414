"""One run composes its config once, checks it once and builds its model once; the files
Hydra's job runner leaves (``.hydra/``) are the ones ``hydra.main`` leaves."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from attnlab import train as attnlab_train
from attnlab.cli.launch import HydraCallbacks
from cli_runs import TINY


def counting(monkeypatch: pytest.MonkeyPatch, counts: collections.Counter, owner: Any,
             name: str) -> None:  # fmt: skip
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> collections.Counter:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    import attnlab.models
    from attnlab.cli import pipeline
    from attnlab.model_config import ModelConfig

    tally: collections.Counter = collections.Counter()
    counting(monkeypatch, tally, ConfigLoaderImpl, "load_configuration")
    counting(monkeypatch, tally, ModelConfig, "validated")
    counting(monkeypatch, tally, attnlab.models, "build_model")
    counting(monkeypatch, tally, pipeline, "check_config")
    return tally


def test_a_single_run_composes_checks_and_builds_once(
    tmp_path: Path, counts: collections.Counter
) -> None:
    run_dir = tmp_path / "run"
    assert attnlab_train.main([*TINY, "model=decoder_only", "data=copy",
                               f"hydra.run.dir={run_dir}"]) == 0  # fmt: skip
    assert counts == {"load_configuration": 1, "validated": 1, "build_model": 1}
    hydra = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml").hydra
    assert hydra.job.name == "train" and hydra.mode == "RUN"
    assert "hydra.mode=RUN" in hydra.overrides.hydra
    assert hydra.runtime.version_base == "1.3"
    saved = OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")
    assert list(saved) == [*TINY, "model=decoder_only", "data=copy"]
    assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").model.name == "decoder_only"


def test_each_job_of_a_sweep_checks_its_own_composition(
    tmp_path: Path, counts: collections.Counter
) -> None:
    sweep = tmp_path / "sweep"
    assert attnlab_train.main(["-m", *TINY, "model=decoder_only", "data=copy", "seed=1,2",
                               f"hydra.sweep.dir={sweep}"]) == 0  # fmt: skip
    # each value of the swept key checked before any job starts, then each job its own
    assert counts["check_config"] == 2 and counts["build_model"] == 2
    assert counts["validated"] == 4
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]


class Recorder(Callback):
    """A Hydra callback that notes each event it receives, with its own name."""

    events: list[str] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        Recorder.events.append(f"{self.name}:run_start")

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        Recorder.events.append(f"{self.name}:run_end")


def test_hydra_callbacks_are_instantiated_from_the_config_and_called_in_hydras_order() -> None:
    target = f"{__name__}.Recorder"
    cfg = OmegaConf.create({"hydra": {"callbacks": {
        "first": {"_target_": target, "name": "first"},
        "second": {"_target_": target, "name": "second"},
    }}})  # fmt: skip
    Recorder.events = []
    callbacks = HydraCallbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="config")
    callbacks.on_run_end(config=cfg, config_name="config", job_return=None)
    assert Recorder.events == ["first:run_start", "second:run_start",
                               "second:run_end", "first:run_end"]  # fmt: skip
