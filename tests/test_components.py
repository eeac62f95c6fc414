"""Every key belongs to the component that reads it (``attnlab.components``): a key set for a
model that none of its components reads is refused in one line naming who would read it,
on the command line, in a preset and in a sweep; the rules between components are one
table, and every pair of registered values either builds or is refused in one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from attnlab import train as attnlab_train
from attnlab.components import FAMILIES, KEYS
from attnlab.components.architectures import FROM_DATA
from attnlab.errors import ConfigError
from attnlab.model_config import ModelConfig
from attnlab.models import build_model
from cli_runs import TINY
from test_bad_inputs import one_error_line

IMAGE = {"image_size": 8, "channels": 1, "patch_size": 2}


@pytest.mark.parametrize(("model", "key", "says"), [
    ("decoder_only", "model.cell=gru", "model.cell=gru applies to model=rnn, not "
     "model=decoder_only; remove it"),
    ("rnn", "model.qk_norm=true", "model.qk_norm=true applies to Transformer architectures"),
    ("conv", "model.norm=post", "model.norm=post applies to Transformer architectures"),
    ("conv", "model.qk_norm=true", "not model=conv; remove it"),
    ("decoder_only", "model.window=64", "model.window=64 applies to model.attention=longformer, "
     "sliding_window, not model.attention=full; remove it, or choose one of those"),
    ("encoder_only", "model.prefix_lm=true", "applies to model=decoder_only"),
    ("vit", "model.tie_embeddings=false", "not model=vit; remove it"),
])  # fmt: skip
def test_a_key_the_chosen_model_does_not_read_is_refused_before_anything_runs(
    model: str, key: str, says: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    data = "data=digits" if model == "vit" else "data=copy"
    heads = [] if model in ("rnn", "conv") else ["model.n_heads=2"]
    args = [a for a in TINY if not a.startswith(("model.n_heads", "data" if model == "vit"
                                                 else "-"))] + heads  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        attnlab_train.main([*args, f"model={model}", data, key, f"paths.log_dir={tmp_path}"])
    assert exited.value.code == 2
    assert says in one_error_line(capfd)
    assert not any(tmp_path.iterdir())  # no run directory


def test_a_sweep_over_a_key_no_job_reads_is_refused_before_its_first_job(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        attnlab_train.main(["-m", *TINY, "model=decoder_only", "model.cell=gru,lstm", "data=copy",
                            f"hydra.sweep.dir={tmp_path / 'sweep'}"])  # fmt: skip
    assert exited.value.code == 2
    assert "model.cell=gru applies to model=rnn" in one_error_line(capfd)
    assert not (tmp_path / "sweep").exists()


def test_a_sweep_key_some_jobs_read_is_kept_for_them_only(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import json

    sweep = tmp_path / "sweep"
    assert attnlab_train.main(["-m", *TINY, "model=decoder_only", "data=copy",
                               "model.attention=full,sliding_window", "model.window=4",
                               f"hydra.sweep.dir={sweep}"]) == 0  # fmt: skip
    assert "note: model.window: the jobs whose model does not read it" in capfd.readouterr().err
    models = [json.loads((sweep / job / "summary.json").read_text())["config"]["model"]
              for job in ("0", "1")]  # fmt: skip
    assert [m["attention"] for m in models] == ["full", "sliding_window"]
    assert "window" not in models[0] and models[1]["window"] == 4


def test_every_key_has_one_meaning_and_every_family_its_default() -> None:
    for family in FAMILIES.values():
        assert family.default in family.names(), family.key
        for config in family:
            assert config.summary(), f"model.{family.key}={config.name} has no docstring"
            for key, declared in config.keys.items():
                assert KEYS[key] == declared, (family.key, config.name, key)
    assert not set(KEYS) & set(FAMILIES)


def test_a_resolved_config_holds_only_the_keys_its_model_reads() -> None:
    cfg = ModelConfig.from_dict({"name": "decoder_only", "attention": "sliding_window"})
    assert cfg.window == 256 and "cell" not in cfg and "n_global" not in cfg
    with pytest.raises(AttributeError, match="no key 'cell'"):
        _ = cfg.cell
    assert ModelConfig.from_dict({"name": "rnn"}).d_model == 256  # the architecture's default
    saved = {**cfg.to_dict(), "cell": "lstm", "n_global": 1}  # a run saved before refusals
    assert ModelConfig.from_dict(saved, strict=False) == cfg


def family_values(arch: str) -> list[tuple[str, str]]:
    config = FAMILIES["name"].get(arch)
    return [(key, name) for key in config.families for name in FAMILIES[key].names()]


def pairs() -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    out = []
    for arch in FAMILIES["name"].names():
        values = family_values(arch)
        out += [(arch, a, b) for a, b in itertools.combinations(values, 2) if a[0] != b[0]]
        out += [(arch, a, a) for a in values]  # each value on its own
    return out


PAIRS = pairs()


def resolve_or_refuse(arch: str, a: tuple[str, str], b: tuple[str, str]) -> ModelConfig | None:
    values = {"name": arch, a[0]: a[1], b[0]: b[1], "d_model": 16, "n_heads": 2, "n_layers": 1}
    if arch in ("rnn", "conv"):
        values.pop("n_heads")
    try:
        return ModelConfig.from_dict(values).with_data(
            {"vocab_size": 20, **(IMAGE if arch == "vit" else {})})
    except ConfigError as refusal:
        text = str(refusal)
        assert "\n" not in text and text.startswith("model"), text
        return None


def test_every_pair_of_registered_values_builds_or_is_refused_in_one_line() -> None:
    """Every architecture with every pair of values of the families it has: refused by a rule
    (one line, naming a key) or built (one layer of width 16)."""
    built = refused = 0
    for arch, a, b in PAIRS:
        cfg = resolve_or_refuse(arch, a, b)
        if cfg is None:
            refused += 1
            continue
        with torch.no_grad():
            build_model(cfg)
        built += 1
    assert built > 1000 and refused > 50, (built, refused)


def test_the_data_fills_only_keys_the_model_reads() -> None:
    assert set(FROM_DATA) <= set(KEYS)
    with pytest.raises(ConfigError, match="model.image_size is not a key of model=decoder_only"):
        ModelConfig.from_dict({"name": "decoder_only"}).with_data({"image_size": 8})
