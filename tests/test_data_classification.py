"""ClassificationDataModule: TSV/CSV columns, integer labels, splits, cache, bad data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnlab.data.base import PAD
from attnlab.data.classification import (
    ClassificationDataModule,
    evenly_spaced_split,
    sentence_split,
)
from attnlab.errors import ConfigError, DataError

GOOD = ["a gripping , moving film", "wonderful acting", "the best of the year"]
BAD = ["a dull , lifeless mess", "boring", "one long string of cliches ."]


def write_tsv(path: Path, header: str, n: int, offset: int = 0) -> Path:
    rows = [f"{i % 2}\t{(GOOD if i % 2 else BAD)[i % 3]} #{i}" for i in range(offset, offset + n)]
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def sst_like(tmp_path: Path) -> dict[str, str]:
    """Train and dev with the differing headers of the published SST-2 files."""
    train = write_tsv(tmp_path / "train.tsv", "label\tsentence", 120)
    dev = write_tsv(tmp_path / "dev.tsv", "label\tcontent", 20, offset=1000)
    return {"train": str(train), "val": str(dev), "test": str(dev)}


def build(tmp_path: Path, **kwargs) -> ClassificationDataModule:
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("vocab_size", 300)
    kwargs.setdefault("batch_size", 8)
    dm = ClassificationDataModule(**kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_batches_are_padded_input_ids_and_labels(tmp_path, sst_like) -> None:
    dm = build(tmp_path, files=sst_like, text_column=["sentence", "content"])
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        batch = next(iter(loader))
        assert set(batch) == {"input_ids", "labels"}
        assert batch["input_ids"].dtype == batch["labels"].dtype == torch.long
        assert batch["input_ids"].shape[0] == 8 and batch["labels"].shape == (8,)
        lengths = (batch["input_ids"] != PAD).sum(1)
        assert lengths.max() == batch["input_ids"].shape[1]  # right-padded to the longest


def test_alternative_column_names_read_train_and_dev(tmp_path, sst_like) -> None:
    dm = build(tmp_path, files=sst_like, text_column=["sentence", "content"])
    assert len(dm.datasets["train"]) == 120 and len(dm.datasets["val"]) == 20
    first = dm.val_dataloader().dataset[0]
    assert dm.decode(first[0].tolist()) == "boring #1000"
    assert dm.task == "classification"


def test_num_classes_is_the_largest_label_plus_one(tmp_path) -> None:
    rows = "\n".join(f"{i % 5},text number {i}" for i in range(40))
    (tmp_path / "data.csv").write_text("label,text\n" + rows + "\n")
    dm = build(tmp_path, path=tmp_path / "data.csv")
    assert dm.num_classes == 5


def test_csv_quoted_fields_and_explicit_delimiter(tmp_path) -> None:
    (tmp_path / "a.csv").write_text("text,label\n" + '"good, really",1\n"bad ""very""",0\n' * 10)
    (tmp_path / "b.txt").write_text("text;label\n" + "good, really;1\nbad;0\n" * 10)
    dm = build(tmp_path, files={"train": tmp_path / "a.csv", "val": tmp_path / "a.csv"})
    assert dm.decode(dm.datasets["val"][1][0].tolist()) == 'bad "very"'
    dm = build(tmp_path, path=tmp_path / "b.txt", delimiter=";", val_fraction=0.5)
    train = dm.datasets["train"]
    assert {dm.decode(train[i][0].tolist()) for i in range(len(train))} == {"good, really", "bad"}


def test_single_file_split_is_evenly_spaced_and_deterministic() -> None:
    train, val = evenly_spaced_split(100, 0.1)
    assert len(val) == 10 and val[0] == 0 and val[-1] == 99
    assert sorted(train + val) == list(range(100))
    assert evenly_spaced_split(100, 0.1) == (train, val)


# SST-2's train file: each sentence of the treebank and its phrases, each a row
TREEBANK = ["a gripping , moving film", "gripping , moving", "moving film", "film",  # 0-3
            "A dull mess .", "a dull mess", "dull",  # 4-6: one sentence (case, full stop)
            "wonderful acting", "acting", "wonderful",  # 7-9
            "one long string of cliches", "long string", "cliches",  # 10-12
            "the best of the year", "the year"]  # fmt: skip  # 13-14


def test_a_sentence_holdout_validates_whole_sentences_and_trains_none_of_their_phrases() -> None:
    # sentences (no row is a proper span of another): 0, 4, 7, 10, 13; 0.6 of them, evenly
    # spaced, validate: 0, 7 and 13 (linspace over 5 sentences, 3 picks: 0, 2, 4)
    train, val = sentence_split(TREEBANK, 0.6)
    assert val == [0, 7, 13]
    # out of training: their phrases (1, 2, 3; 8, 9; 14); "dull", a phrase of 4, trains
    assert train == [4, 5, 6, 10, 11, 12]
    assert sentence_split(TREEBANK, 0.6) == (train, val)  # deterministic


def test_the_holdout_key_chooses_the_split_and_refuses_other_values(tmp_path) -> None:
    rows = [f"{i % 2}\t{text}" for i, text in enumerate(TREEBANK)]
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(["label\tsentence", *rows]) + "\n", encoding="utf-8")
    # rows: 6 of the 15 rows validate; sentences: 0.4 of the 5 sentences, 0 and 13, validate
    # and their phrases 1-3 and 14 leave training (the same cache folder: the key separates)
    for holdout, sizes in (("rows", (6, 9)), ("sentences", (2, 9))):  # (val, train)
        dm = build(tmp_path, path=str(path), text_column="sentence", val_fraction=0.4,
                   holdout=holdout, tokenizer="word")  # fmt: skip
        assert (len(dm.datasets["val"]), len(dm.datasets["train"])) == sizes, holdout
    with pytest.raises(ConfigError, match="data.holdout=phrases is not one of rows, sentences"):
        ClassificationDataModule(path=str(path), holdout="phrases")
    with pytest.raises(ConfigError, match="a validation set is given; set data.files.val=null"):
        build(tmp_path, files={"train": str(path), "val": str(path)}, text_column="sentence",
              holdout="sentences")  # fmt: skip


def test_path_gives_train_val_and_test_from_one_file(tmp_path, sst_like) -> None:
    dm = build(tmp_path, path=sst_like["train"], text_column="sentence", val_fraction=0.25)
    assert len(dm.datasets["train"]) == 90 and len(dm.datasets["val"]) == 30
    assert dm.datasets["test"] is dm.datasets["val"]


def test_train_batches_are_deterministic_for_a_seed(tmp_path, sst_like) -> None:
    def labels(seed: int) -> torch.Tensor:
        dm = build(tmp_path, files=sst_like, text_column=["sentence", "content"], seed=seed)
        return torch.cat([b["labels"] for b in dm.train_dataloader()])

    assert torch.equal(labels(0), labels(0)) and not torch.equal(labels(0), labels(1))


def test_max_len_truncates_long_texts(tmp_path, sst_like) -> None:
    dm = build(tmp_path, files=sst_like, text_column=["sentence", "content"], max_len=3)
    assert int(dm.datasets["train"].ids.lengths.max()) == 3


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_every_tokenizer_kind_builds_batches(tmp_path, sst_like, kind) -> None:
    dm = build(tmp_path, files=sst_like, text_column=["sentence", "content"], tokenizer=kind)
    assert next(iter(dm.train_dataloader()))["input_ids"].max() < dm.vocab_size


def test_second_build_hits_the_cache_and_column_change_rebuilds(tmp_path, sst_like) -> None:
    cols = ["sentence", "content"]
    assert build(tmp_path, files=sst_like, text_column=cols).cache_hit is False
    assert build(tmp_path, files=sst_like, text_column=cols).cache_hit is True
    assert build(tmp_path, files=sst_like, text_column=cols[::-1]).cache_hit is False
    assert build(tmp_path, files=sst_like, text_column=cols, max_len=4).cache_hit is False


# -- bad input -------------------------------------------------------------------------------------


def test_missing_text_column_lists_the_columns_present(tmp_path, sst_like) -> None:
    with pytest.raises(DataError, match=r"data\.text_column.*dev\.tsv.*\['label', 'content'\]"):
        build(tmp_path, files=sst_like, text_column="sentence")


def test_missing_label_column_lists_the_columns_present(tmp_path, sst_like) -> None:
    with pytest.raises(DataError, match=r"data\.label_column.*'stars'.*\['label', 'sentence'\]"):
        build(tmp_path, files=sst_like, text_column=["sentence", "content"], label_column="stars")


def test_non_integer_label_names_file_line_and_column(tmp_path) -> None:
    (tmp_path / "d.tsv").write_text("label\ttext\n1\tfine\npositive\tgreat\n")
    with pytest.raises(DataError, match=r"d\.tsv line 3, column 'label'.*'positive'"):
        build(tmp_path, path=tmp_path / "d.tsv")


def test_negative_label_raises(tmp_path) -> None:
    (tmp_path / "d.tsv").write_text("label\ttext\n1\tfine\n-1\tgreat\n")
    with pytest.raises(DataError, match="not an integer 0..K-1"):
        build(tmp_path, path=tmp_path / "d.tsv")


def test_row_with_too_few_fields_suggests_the_delimiter(tmp_path) -> None:
    (tmp_path / "d.tsv").write_text("label\ttext\n1 fine\n")
    with pytest.raises(DataError, match=r"line 2 has 1 fields.*data\.delimiter"):
        build(tmp_path, path=tmp_path / "d.tsv")


def test_header_without_rows_raises(tmp_path) -> None:
    (tmp_path / "d.tsv").write_text("label\ttext\n")
    with pytest.raises(DataError, match="no data rows"):
        build(tmp_path, path=tmp_path / "d.tsv")


def test_empty_file_raises(tmp_path) -> None:
    (tmp_path / "d.tsv").write_text("")
    with pytest.raises(DataError, match=r"d\.tsv is empty"):
        build(tmp_path, path=tmp_path / "d.tsv")


def test_non_utf8_file_raises_naming_it(tmp_path) -> None:
    (tmp_path / "d.tsv").write_bytes("label\ttext\n1\tvery na\xefve\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"d\.tsv is not UTF-8"):
        build(tmp_path, path=tmp_path / "d.tsv")


def test_missing_file_names_key_and_file(tmp_path, sst_like) -> None:
    sst_like["val"] = str(tmp_path / "nope.tsv")
    with pytest.raises(DataError, match=r"data\.files\.val.*nope\.tsv"):
        build(tmp_path, files=sst_like)


def test_no_source_asks_for_path_files_or_hf(tmp_path) -> None:
    with pytest.raises(DataError, match=r"data\.path.*data\.files.*data\.hf\.name"):
        build(tmp_path)


def test_hugging_face_local_dataset_folder_is_read(tmp_path, monkeypatch) -> None:
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    folder = tmp_path / "hfdata"
    folder.mkdir()
    rows = "".join(f"{i % 3},review {i}\n" for i in range(30))
    (folder / "train.csv").write_text("label,sentence\n" + rows, encoding="utf-8")
    (folder / "validation.csv").write_text("label,sentence\n2,fine\n0,poor\n", encoding="utf-8")
    dm = build(tmp_path, hf={"name": str(folder)}, text_column="sentence")
    assert dm.num_classes == 3 and len(dm.datasets["val"]) == 2
    assert dm.decode(dm.datasets["test"][0][0].tolist()) == "fine"
