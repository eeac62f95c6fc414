"""The conf/data presets: each instantiates, and the real ones build on the data folder
(``$ATTNLAB_DATA_ROOT``: the tests point it at ../shared/data beside the checkout).

The real-data tests skip when the data folder is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import attnlab.data  # noqa: F401  (registers ${attnlab_data_root:})
from attnlab.data.base import TASKS, AttnlabDataModule
from attnlab.data.paths import DATA_ROOT_ENV, data_root
from attnlab.errors import DataError

REPO = Path(__file__).resolve().parents[1]
DATA_YAMLS = sorted((REPO / "conf" / "data").glob("*.yaml"))


def compose(name: str, seed: int = 0, **overrides) -> DictConfig:
    """The data preset as the main config would see it: ``data`` beside ``seed`` and ``paths``."""
    cfg = OmegaConf.create({
        "seed": seed, "data": OmegaConf.load(REPO / "conf/data" / name),
        "paths": OmegaConf.load(REPO / "conf/paths/default.yaml"),
    })  # fmt: skip
    for key, value in overrides.items():
        cfg.data[key] = value
    return cfg


def real_data(*parts: str) -> Path:
    path = Path(data_root(), *parts)
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    return path


def built(name: str, tmp_path: Path, **overrides) -> AttnlabDataModule:
    dm = instantiate(compose(name, cache_dir=str(tmp_path / "cache"), **overrides).data)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_data_root_defaults_to_data_in_the_working_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert data_root() == str(tmp_path / "data")
    assert OmegaConf.create({"p": "${attnlab_data_root:}"}).p == str(tmp_path / "data")


def test_data_root_follows_the_environment_variable(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    assert OmegaConf.create({"p": "${attnlab_data_root:}/x"}).p == f"{tmp_path}/x"


@pytest.mark.parametrize("path", DATA_YAMLS, ids=[p.stem for p in DATA_YAMLS])
def test_each_data_yaml_has_the_common_keys_and_instantiates(path: Path) -> None:
    raw = OmegaConf.to_container(OmegaConf.load(path))
    assert {"_target_", "batch_size"} <= set(raw)
    assert raw["num_workers"] == 0 and raw["seed"] == "${seed}"
    dm = instantiate(compose(path.name, seed=7).data)
    assert isinstance(dm, AttnlabDataModule) and dm.task in TASKS


def test_missing_shakespeare_file_asks_for_data_path(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=rf"data\.path.*input\.txt.*{DATA_ROOT_ENV}"):
        built("shakespeare_char.yaml", tmp_path)


def test_text_preset_without_a_source_asks_for_one(tmp_path) -> None:
    with pytest.raises(DataError, match=r"data\.path.*data\.files.*data\.hf\.name"):
        built("text.yaml", tmp_path)


def test_shakespeare_char_builds_65_characters_and_block_batches(tmp_path) -> None:
    real_data("tinyshakespeare", "input.txt")
    dm = built("shakespeare_char.yaml", tmp_path)
    assert dm.task == "lm" and dm.vocab_size == 65 + 6
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 1_115_394
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        assert next(iter(loader))["tokens"].shape == (12, 65)


def test_multi30k_builds_and_keeps_every_test_pair(tmp_path) -> None:
    real_data("multi30k", "train.de.gz")
    dm = built("multi30k.yaml", tmp_path, vocab_size=1000)
    assert dm.task == "seq2seq" and dm.vocab_size == 1000
    assert len(dm.datasets["train"]) + dm.dropped_pairs == 29_000
    assert len(dm.references("val")) == 1014 and len(dm.references("test")) == 1000
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        batch = next(iter(loader))
        assert batch["src"].shape[0] == batch["tgt"].shape[0] == 64
    first = next(iter(dm.test_dataloader()))["tgt"][0].tolist()
    assert dm.decode(first) == dm.references("test")[0]


def test_sst2_builds_two_classes_from_differing_headers(tmp_path) -> None:
    real_data("sst2", "train.tsv")
    dm = built("sst2.yaml", tmp_path, vocab_size=1000)
    assert dm.task == "classification" and dm.num_classes == 2
    assert len(dm.datasets["train"]) == 67_349 and len(dm.datasets["val"]) == 872
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        batch = next(iter(loader))
        assert batch["input_ids"].shape[0] == batch["labels"].shape[0] == 32
