"""TranslationDataModule: parallel files, joint BPE, length filter, bucketing, references."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler

from attnlab.data.base import BOS, EOS, PAD
from attnlab.data.batching import BucketBatchSampler
from attnlab.data.translation import TranslationDataModule
from attnlab.errors import DataError

WORDS_DE = "ein mann hund katze läuft springt über den die straße im park".split()
WORDS_EN = "a man dog cat runs jumps over the the street in park".split()


def sentence_pairs(n: int, seed: int, max_words: int = 12) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        idx = [rng.randrange(len(WORDS_DE)) for _ in range(rng.randint(1, max_words))]
        src.append(" ".join(WORDS_DE[i] for i in idx))
        tgt.append(" ".join(WORDS_EN[i] for i in idx).capitalize() + ".")
    return src, tgt


def write_lines(path: Path, lines: list[str]) -> str:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, dict[str, str]]:
    out = {}
    for split, n, seed in (("train", 300, 0), ("val", 40, 1), ("test", 30, 2)):
        src, tgt = sentence_pairs(n, seed)
        ext = ".gz" if split == "train" else ""  # plain and gzip side by side
        out[split] = {
            "src": write_lines(tmp_path / f"{split}.de{ext}", src),
            "tgt": write_lines(tmp_path / f"{split}.en{ext}", tgt),
        }
    return out


def build(tmp_path: Path, files, **kwargs) -> TranslationDataModule:
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("vocab_size", 300)
    kwargs.setdefault("batch_size", 8)
    dm = TranslationDataModule(files=files, **kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_batches_are_padded_src_and_tgt_without_bos_or_eos(tmp_path, files) -> None:
    dm = build(tmp_path, files)
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        batch = next(iter(loader))
        assert set(batch) == {"src", "tgt"}
        assert batch["src"].dtype == batch["tgt"].dtype == torch.long
        assert batch["src"].shape[0] == batch["tgt"].shape[0] == 8
        for ids in (batch["src"], batch["tgt"]):
            assert not ((ids == BOS) | (ids == EOS)).any()
            assert (ids[:, -1] == PAD).any() or ids.shape[1] == (ids != PAD).sum(1).max()


def test_gzip_and_plain_files_are_read_alike(tmp_path, files) -> None:
    dm = build(tmp_path, files)
    assert len(dm.datasets["train"]) == 300 and len(dm.datasets["val"]) == 40
    assert dm.task == "seq2seq"


def test_joint_vocabulary_is_learned_on_training_data_only(tmp_path, files) -> None:
    val_src, val_tgt = sentence_pairs(40, 1)
    write_lines(Path(files["val"]["src"]), [*val_src[:-1], "Zebrastreifen " * 20])
    write_lines(Path(files["val"]["tgt"]), [*val_tgt[:-1], "Zebra crossing " * 20])
    dm = build(tmp_path, files, vocab_size=400)
    vocab = dm.tokenizer.hf.get_vocab()
    assert not any("Zebra" in t or "ebra" in t for t in vocab)
    assert any("hund" in t for t in vocab) and any("dog" in t for t in vocab)


def test_long_training_pairs_are_dropped_but_val_pairs_only_truncated(tmp_path, files) -> None:
    dm = build(tmp_path, files, max_len=6)
    assert 0 < dm.dropped_pairs < 300
    assert len(dm.datasets["train"]) == 300 - dm.dropped_pairs
    assert max(dm.datasets["train"].src.lengths.max(), dm.datasets["train"].tgt.lengths.max()) <= 6
    assert len(dm.datasets["val"]) == 40 and len(dm.references("val")) == 40
    assert dm.datasets["val"].tgt.lengths.max() == 6


def test_references_are_raw_targets_in_val_loader_order(tmp_path, files) -> None:
    dm = build(tmp_path, files)
    decoded = [dm.decode(row.tolist()) for b in dm.val_dataloader() for row in b["tgt"]]
    assert decoded == dm.references("val") == sentence_pairs(40, 1)[1]
    assert dm.references("test") == sentence_pairs(30, 2)[1]


def test_test_loader_uses_val_pairs_when_there_is_no_test_data(tmp_path, files) -> None:
    dm = build(tmp_path, {"train": files["train"], "val": files["val"]})
    assert dm.references("test") == dm.references("val")
    assert len(dm.test_dataloader().dataset) == 40


def test_train_batches_are_deterministic_for_a_seed(tmp_path, files) -> None:
    def batches(seed: int) -> list[torch.Tensor]:
        return [b["src"] for b in build(tmp_path, files, seed=seed).train_dataloader()]

    first, again, other = batches(3), batches(3), batches(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(first, other, strict=True)
    )


def test_every_training_pair_appears_once_per_epoch(tmp_path, files) -> None:
    dm = build(tmp_path, files)
    loader = dm.train_dataloader()
    seen = [i for batch in loader.batch_sampler for i in batch]
    assert sorted(seen) == list(range(300)) and len(loader) == len(list(loader.batch_sampler))


def test_length_bucketing_reduces_padding_vs_random_batches(tmp_path, files) -> None:
    dm = build(tmp_path, files)
    dataset = dm.datasets["train"]
    lengths = dataset.lengths

    def padding(batches) -> int:
        return sum(int(lengths[b].max() * len(b) - lengths[b].sum()) for b in batches)

    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
    bucketed = BucketBatchSampler(sampler, 8, lengths=lengths, seed=0, bucket_batches=10)
    assert padding(bucketed) < 0.5 * padding(BatchSampler(sampler, 8, drop_last=False))


def test_bucket_sampler_reinstantiates_with_an_injected_sampler() -> None:
    # Lightning rebuilds batch samplers with a DistributedSampler passed as `sampler`.
    lengths = list(range(50))
    sampler = BucketBatchSampler(range(0, 50, 2), 4, drop_last=True, lengths=lengths, seed=1)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 6
    assert all(i % 2 == 0 for b in batches for i in b)


def test_second_build_hits_the_cache_and_max_len_change_rebuilds(tmp_path, files) -> None:
    assert build(tmp_path, files).cache_hit is False
    assert build(tmp_path, files).cache_hit is True
    assert build(tmp_path, files, max_len=5).cache_hit is False
    assert build(tmp_path, files, vocab_size=280).cache_hit is False


# -- bad input -------------------------------------------------------------------------------------


def test_parallel_files_of_different_length_raise_naming_both(tmp_path, files) -> None:
    src, _ = sentence_pairs(40, 1)
    write_lines(Path(files["val"]["src"]), src[:-3])
    with pytest.raises(DataError, match=r"val\.de has 37 lines but .*val\.en has 40"):
        build(tmp_path, files)


def test_missing_side_file_names_the_key(tmp_path, files) -> None:
    files["test"]["tgt"] = str(tmp_path / "missing.en")
    with pytest.raises(DataError, match=r"data\.files\.test\.tgt.*missing\.en"):
        build(tmp_path, files)


def test_missing_validation_files_raise(tmp_path, files) -> None:
    with pytest.raises(DataError, match=r"data\.files\.val is not set"):
        build(tmp_path, {"train": files["train"]})


def test_no_files_asks_for_files_or_hf(tmp_path) -> None:
    with pytest.raises(DataError, match=r"data\.files.*data\.hf\.name"):
        build(tmp_path, None)


def test_empty_file_raises(tmp_path, files) -> None:
    Path(files["val"]["src"]).write_text("")
    with pytest.raises(DataError, match=r"val\.de is empty"):
        build(tmp_path, files)


def test_non_utf8_file_raises_naming_it(tmp_path, files) -> None:
    Path(files["val"]["tgt"]).write_bytes("stra\xdfe\n".encode("latin-1") * 40)
    with pytest.raises(DataError, match=r"val\.en is not UTF-8"):
        build(tmp_path, files)


def test_hugging_face_translation_column_is_read(tmp_path, monkeypatch) -> None:
    import json

    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    folder = tmp_path / "hfdata"
    folder.mkdir()
    for split, n, seed in (("train", 50, 0), ("validation", 5, 1)):
        src, tgt = sentence_pairs(n, seed)
        rows = [{"translation": {"de": s, "en": t}} for s, t in zip(src, tgt, strict=True)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hf = {"name": str(folder), "src_lang": "de", "tgt_lang": "en"}
    dm = build(tmp_path, None, hf=hf)
    assert len(dm.datasets["train"]) == 50
    assert dm.references("test") == dm.references("val") == sentence_pairs(5, 1)[1]


def test_broken_gzip_file_raises_naming_it(tmp_path, files) -> None:
    Path(files["train"]["src"]).write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataError, match=r"data\.files\.train\.src: cannot read .*train\.de\.gz"):
        build(tmp_path, files)
