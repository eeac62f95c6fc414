"""TextDataModule: nanoGPT-style blocks, deterministic splits and batches, cache, bad data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from attnlab.data.base import NUM_SPECIAL
from attnlab.data.text import TextDataModule
from attnlab.data.tokenizers import load_tokenizer
from attnlab.errors import DataError

LINES = [
    "First Citizen: Before we proceed any further, hear me speak.",
    "All: Speak, speak.",
    "First Citizen: You are all resolved rather to die than to famish?",
    "All: Resolved. resolved.",
]
TEXT = "\n".join(f"{i}: {LINES[i % 4]}" for i in range(120)) + "\n"


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def build(tmp_path: Path, **kwargs) -> TextDataModule:
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("block_size", 16)
    kwargs.setdefault("batch_size", 4)
    dm = TextDataModule(**kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_batches_are_long_token_blocks_of_block_size_plus_one(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file)
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        tokens = next(iter(loader))["tokens"]
        assert tokens.shape == (4, 17) and tokens.dtype == torch.long


def test_vocab_is_the_training_characters_plus_specials(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file)
    train_chars = set(TEXT[: int(len(TEXT) * 0.9)])
    assert dm.vocab_size == NUM_SPECIAL + len(train_chars)
    assert dm.task == "lm" and dm.num_classes is None


def test_path_splits_first_part_train_last_part_val(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file, val_fraction=0.25)
    cut = int(len(TEXT) * 0.75)
    assert dm.decode(dm.splits["train"].tolist()) == TEXT[:cut]
    assert dm.decode(dm.splits["val"].tolist()) == TEXT[cut:]


def test_test_loader_uses_val_split_when_there_is_no_test_data(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file)
    assert torch.equal(dm.splits["test"], dm.splits["val"])


def test_val_blocks_tile_the_whole_split_in_order(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file, batch_size=1000)
    blocks = next(iter(dm.val_dataloader()))["tokens"]
    val = dm.splits["val"]
    assert torch.equal(blocks[:, :-1].reshape(-1), val[: blocks.shape[0] * 16].long())
    assert len(val) - blocks.shape[0] * 16 <= 16  # nothing but a partial block left out


def test_eval_blocks_spread_evenly_over_the_split(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file, eval_blocks=5, batch_size=5)
    blocks = next(iter(dm.val_dataloader()))["tokens"]
    val = dm.splits["val"].long()
    assert torch.equal(blocks[0], val[:17]) and torch.equal(blocks[-1], val[-17:])


def test_train_batches_are_deterministic_for_a_seed(tmp_path, text_file) -> None:
    def first_batches(seed: int) -> list[torch.Tensor]:
        dm = build(tmp_path, path=text_file, seed=seed)
        loader = iter(dm.train_dataloader())
        return [next(loader)["tokens"] for _ in range(3)]

    same = [torch.equal(a, b) for a, b in zip(first_batches(1), first_batches(1), strict=True)]
    other = [torch.equal(a, b) for a, b in zip(first_batches(1), first_batches(2), strict=True)]
    assert all(same) and not all(other)


def test_train_samples_are_random_offsets_of_the_train_split(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file, batch_size=64)
    train = dm.splits["train"].long()
    starts = set()
    for row in next(iter(dm.train_dataloader()))["tokens"]:
        matches = [s for s in range(len(train) - 16) if torch.equal(train[s : s + 17], row)]
        starts.update(matches[:1])
    assert len(starts) > 32 and any(s % 16 for s in starts)


def test_samples_per_epoch_bounds_the_epoch(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file, samples_per_epoch=40, batch_size=4)
    assert len(dm.train_dataloader()) == 10


def test_files_give_train_val_and_test_splits(tmp_path) -> None:
    parts = {s: tmp_path / f"{s}.txt" for s in ("train", "val", "test")}
    for split, path in parts.items():
        path.write_text(f"{split} " * 40, encoding="utf-8")
    parts["train"].write_text("train val test " * 20, encoding="utf-8")  # every character
    dm = build(tmp_path, files={k: str(v) for k, v in parts.items()}, block_size=8)
    assert dm.decode(dm.splits["test"].tolist()) == "test " * 40


def test_bpe_stream_decodes_back_to_the_text(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file, tokenizer="bpe", vocab_size=300)
    assert dm.decode(dm.splits["train"].tolist()) == TEXT[: int(len(TEXT) * 0.9)]
    assert len(dm.splits["train"]) < int(len(TEXT) * 0.9)


def test_tokenizer_and_vocab_size_are_set_after_prepare_and_setup_fit(tmp_path, text_file) -> None:
    dm = TextDataModule(path=text_file, cache_dir=tmp_path / "cache", block_size=16)
    assert dm.vocab_size == 0
    dm.prepare_data()
    dm.setup("fit")
    assert dm.tokenizer is not None and dm.vocab_size > NUM_SPECIAL


def test_repeated_setup_does_not_rebuild(tmp_path, text_file, monkeypatch) -> None:
    dm = build(tmp_path, path=text_file)
    monkeypatch.setattr(dm, "_identity", lambda: pytest.fail("setup rebuilt the data"))
    dm.setup("validate")
    dm.setup("test")


def test_second_build_hits_the_cache(tmp_path, text_file) -> None:
    first = build(tmp_path, path=text_file)
    second = build(tmp_path, path=text_file)
    assert first.cache_hit is False and second.cache_hit is True
    assert torch.equal(first.splits["train"], second.splits["train"])


@pytest.mark.parametrize("change", [{"val_fraction": 0.2}, {"tokenizer": "bpe", "vocab_size": 300}])
def test_changed_setting_rebuilds_the_cache(tmp_path, text_file, change) -> None:
    first = build(tmp_path, path=text_file)
    changed = build(tmp_path, path=text_file, **change)
    assert changed.cache_hit is False and changed.cache_path != first.cache_path


def test_changed_file_rebuilds_the_cache(tmp_path, text_file) -> None:
    build(tmp_path, path=text_file)
    text_file.write_text(TEXT + "Exeunt.\n", encoding="utf-8")
    assert build(tmp_path, path=text_file).cache_hit is False


def test_block_size_does_not_change_the_cache_key(tmp_path, text_file) -> None:
    build(tmp_path, path=text_file, block_size=16)
    assert build(tmp_path, path=text_file, block_size=8).cache_hit is True


def test_cache_never_touches_the_data_file(tmp_path, text_file) -> None:
    before = text_file.stat().st_mtime_ns
    build(tmp_path, path=text_file)
    assert text_file.stat().st_mtime_ns == before and text_file.read_text() == TEXT
    assert not list(tmp_path.joinpath("cache").glob(".*.tmp"))


def test_save_tokenizer_writes_a_reloadable_file(tmp_path, text_file) -> None:
    dm = build(tmp_path, path=text_file)
    dm.save_tokenizer(tmp_path / "run")
    assert load_tokenizer(tmp_path / "run" / "tokenizer.json").encode("All") == dm.encode("All")


# -- bad input -------------------------------------------------------------------------------------


def test_no_source_asks_for_path_files_or_hf(tmp_path) -> None:
    with pytest.raises(DataError, match=r"data\.path.*data\.files.*data\.hf\.name"):
        build(tmp_path)


def test_missing_file_names_the_file_and_key(tmp_path) -> None:
    with pytest.raises(DataError, match=r"data\.path.*nope\.txt"):
        build(tmp_path, path=tmp_path / "nope.txt")


def test_empty_file_raises(tmp_path) -> None:
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DataError, match=r"empty\.txt is empty"):
        build(tmp_path, path=tmp_path / "empty.txt")


def test_non_utf8_file_raises_naming_it(tmp_path) -> None:
    (tmp_path / "latin1.txt").write_bytes("Fa\xe7ade d\xe9j\xe0 vu\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.txt is not UTF-8"):
        build(tmp_path, path=tmp_path / "latin1.txt")


def test_block_size_longer_than_a_split_raises(tmp_path, text_file) -> None:
    with pytest.raises(DataError, match=r"data\.block_size.*val split"):
        build(tmp_path, path=text_file, block_size=len(TEXT) // 5)


def test_hugging_face_name_while_offline_raises(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    with pytest.raises(DataError, match=r"not available offline.*data\.path"):
        build(tmp_path, hf={"name": "attnlab-test/no-such-dataset", "text_column": "text"})


def test_hugging_face_local_dataset_folder_is_read(tmp_path, monkeypatch) -> None:
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    folder = tmp_path / "hfdata"
    folder.mkdir()
    for split, n in (("train", 60), ("validation", 20)):
        rows = "".join(f'"{split} line {i}"\n' for i in range(n))
        (folder / f"{split}.csv").write_text("text\n" + rows, encoding="utf-8")
    hf = {"name": os.fspath(folder), "text_column": "text"}
    dm = build(tmp_path, hf=hf, tokenizer="bpe", vocab_size=300, block_size=8)
    assert dm.decode(dm.splits["val"].tolist()).startswith("validation line 0\n")
