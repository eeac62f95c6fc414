"""attnlab-data: the real data sets fetched into the layout the presets read, from a local
mirror (no test touches the network): published files against their SHA-256, Hugging Face
datasets through the real ``datasets`` code from a folder that copies the Hub repository."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import attnlab.data  # noqa: F401  (registers ${attnlab_data_root:})
from attnlab.data import fetch as fetching
from attnlab.data.paths import DATA_ROOT_ENV
from attnlab.data.shards import sha256_file
from attnlab.data.sources import SETS, HubSplit
from attnlab.errors import DataError
from attnlab.fetch import main
from cli_runs import cli_env

REPO = Path(__file__).resolve().parents[1]
PRESETS = {"shakespeare_char": "shakespeare", "multi30k": "multi30k", "sst2": "sst2"}


def fetch(*argv: str | Path) -> int:
    return main([str(a) for a in argv])


def error_line(capsys: pytest.CaptureFixture) -> str:
    """The one error line (after datasets' progress bars, if it loaded one)."""
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("error: ") and err.count("error: ") == 1, err
    assert "Traceback" not in err, err
    return last


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def preset(name: str, root: Path) -> OmegaConf:
    """The data preset as the main config composes it, reading the data folder ``root``."""
    os.environ[DATA_ROOT_ENV] = str(root)  # (each test's monkeypatch restores it)
    return OmegaConf.create({
        "seed": 0, "data": OmegaConf.load(REPO / "conf/data" / f"{name}.yaml"),
        "paths": OmegaConf.load(REPO / "conf/paths/default.yaml"),
    }).data  # fmt: skip


def preset_files(name: str, root: Path) -> list[Path]:
    """Every file path the preset reads (data.path, data.files.*)."""
    data = OmegaConf.to_container(preset(name, root), resolve=True)
    leaves = [data["path"]] if data.get("path") else []
    stack = [data.get("files") or {}]
    while stack:
        for value in stack.pop().values():
            stack.append(value) if isinstance(value, dict) else leaves.append(value)
    return [Path(p) for p in leaves if p]


def hub_mirror(mirror: Path, repo: str, config: str, splits: dict[str, dict[str, list]]) -> Path:
    """A folder copying a Hugging Face dataset repository: parquet files per split and the
    README's ``configs`` that name them, as the Hub holds them."""
    folder = mirror / repo
    (folder / config).mkdir(parents=True)
    card = ["---", "configs:", f"- config_name: {config}", "  data_files:"]
    for split, columns in splits.items():
        pq.write_table(pa.table(columns), folder / config / f"{split}-00000-of-00001.parquet")
        card += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (folder / "README.md").write_text("\n".join([*card, "---", ""]))
    return mirror


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test in its own folder, whose ``data`` is the default data folder (never the
    shared mirror the other tests read); the environment restored after it; datasets'
    cache in the test's folder."""
    import datasets

    monkeypatch.setenv(DATA_ROOT_ENV, "")  # restored after the test, even when it was unset
    monkeypatch.delenv(DATA_ROOT_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")


def sst2_rows(n: int) -> dict[str, list]:
    return {"sentence": [f"sentence {i} , with a trailing space " for i in range(n)],
            "label": [i % 2 for i in range(n)], "idx": list(range(n))}  # fmt: skip


# -- the catalogue ---------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "data_set"), PRESETS.items())
def test_each_real_data_preset_reads_files_its_data_set_writes(name, data_set, tmp_path) -> None:
    written = {tmp_path / p for p in SETS[data_set].paths()}
    assert set(preset_files(name, tmp_path)) <= written


@pytest.mark.parametrize(("name", "data_set"), PRESETS.items())
def test_a_missing_preset_file_names_the_command_that_fetches_it(name, data_set, tmp_path) -> None:
    data = preset(name, tmp_path / "data")
    with pytest.raises(DataError, match=rf"not found: .*; fetch it with: attnlab-data {data_set} "
                       rf"\(or set {DATA_ROOT_ENV} to the folder that holds it"):  # fmt: skip
        dm = instantiate(data, cache_dir=str(tmp_path / "cache"))
        dm.prepare_data()
        dm.setup("fit")


# -- published files -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["shakespeare", "multi30k"])
def test_published_files_are_fetched_verified_in_the_presets_layout(
    name, shared_data, tmp_path, capsys
) -> None:  # fmt: skip
    assert fetch(name, "--root", tmp_path / "data", "--mirror", shared_data) == 0
    assert "SHA-256 verified" in capsys.readouterr().out
    for published in SETS[name].files:
        path = tmp_path / "data" / published.path
        assert path.stat().st_size == published.size and sha256_file(path) == published.sha256
    written = sorted(tmp_path / "data" / p for p in SETS[name].paths())
    assert files_under(tmp_path / "data") == written


def test_fetched_shakespeare_builds_its_preset(shared_data, tmp_path) -> None:
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", shared_data) == 0
    dm = instantiate(preset("shakespeare_char", tmp_path / "data"), cache_dir=str(tmp_path / "c"))
    dm.prepare_data()
    dm.setup("fit")
    assert dm.vocab_size == 65 + 6
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 1_115_394


def test_a_second_run_finds_the_files_verified_and_fetches_nothing(
    shared_data, tmp_path, capsys
) -> None:  # fmt: skip
    root = tmp_path / "data"
    assert fetch("multi30k", "--root", root, "--mirror", shared_data) == 0
    before = {p: p.stat().st_mtime_ns for p in files_under(root)}
    capsys.readouterr()
    assert fetch("multi30k", "--root", root, "--mirror", tmp_path / "no_such_mirror") == 0
    assert "already in" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in files_under(root)} == before


def test_a_corrupted_download_is_refused_and_leaves_nothing(tmp_path, capsys) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "tinyshakespeare").mkdir(parents=True)
    (mirror / "tinyshakespeare" / "input.txt").write_text("First Citizen:\nnot quite\n")
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", mirror) == 2
    err = error_line(capsys)
    assert "input.txt gave a file whose SHA-256 is" in err and "nothing was written" in err
    assert files_under(tmp_path / "data") == []


def test_an_existing_different_file_is_kept_and_named(tmp_path, capsys) -> None:
    mine = tmp_path / "data" / "tinyshakespeare" / "input.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own Shakespeare\n")
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", tmp_path / "none") == 2
    err = error_line(capsys)
    assert f"{mine} exists and is not the published file" in err
    assert "it was kept: move or delete it, then run `attnlab-data shakespeare` again" in err
    assert mine.read_text() == "my own Shakespeare\n" and files_under(tmp_path / "data") == [mine]


@pytest.mark.parametrize("blocking", ["data", "data/tinyshakespeare"])
def test_a_file_where_a_folder_goes_is_one_error_line_and_kept(blocking, tmp_path, capsys) -> None:
    mine = tmp_path / blocking
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("my notes\n")
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", tmp_path / "none") == 2
    folder = tmp_path / "data" / "tinyshakespeare"
    assert f"cannot make the folder {folder}: {mine} is not a folder" in error_line(capsys)
    assert mine.read_text() == "my notes\n" and files_under(tmp_path) == [mine]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_unwritable_data_folder_is_one_error_line(tmp_path, capsys) -> None:
    (tmp_path / "data").mkdir(mode=0o555)
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", tmp_path / "none") == 2
    assert f"cannot write into {tmp_path / 'data'} (permission denied)" in error_line(capsys)


@pytest.mark.parametrize("mirror", ["http://127.0.0.1:9", "file:///no/such/folder"])
def test_a_failed_download_names_the_url_and_the_fix(mirror, tmp_path, capsys) -> None:
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", mirror) == 2
    err = error_line(capsys)
    assert "cannot download " in err and "tinyshakespeare/input.txt" in err
    assert "check your connection" in err and "download the file by hand to" in err
    assert files_under(tmp_path / "data") == []


def test_an_interrupted_download_leaves_no_partial_file(
    shared_data, tmp_path, monkeypatch, capsys
) -> None:  # fmt: skip
    opened = urllib.request.urlopen

    def interrupted_after_a_block(url, timeout):  # noqa: ANN202
        response = opened(url, timeout=timeout)
        reads = iter([response.read, lambda _n: (_ for _ in ()).throw(KeyboardInterrupt)])
        response.read = lambda n: next(reads)(n)
        return response

    monkeypatch.setattr(fetching, "CHUNK", 4096)
    monkeypatch.setattr(urllib.request, "urlopen", interrupted_after_a_block)
    assert fetch("shakespeare", "--root", tmp_path / "data", "--mirror", shared_data) == 130
    assert "interrupted" in capsys.readouterr().err
    assert files_under(tmp_path / "data") == []


@pytest.mark.parametrize(("argv", "says"), [
    (["nope"], "unknown data set 'nope'; choose from shakespeare, multi30k"),
    ([], "name a data set to fetch"),
    (["--list", "sst2"], "--list takes only --root"),
    (["shakespeare", "--documents", "5"], "--documents applies to fineweb-edu only"),
    (["fineweb-edu", "--documents", "0"], "--documents must be 1 or more"),
    (["sst2", "--mirror", "https://example.org/data"], "for a Hugging Face Hub mirror set HF_"),
    (["shakespeare", "--bogus"], "unrecognized arguments: --bogus"),
])  # fmt: skip
def test_a_bad_name_or_option_is_one_error_line(argv, says, tmp_path, capsys) -> None:
    assert fetch(*argv, "--root", tmp_path / "data") == 2
    assert says in error_line(capsys)
    assert not (tmp_path / "data").exists()


def test_list_shows_each_set_its_source_size_and_presence(shared_data, tmp_path, capsys) -> None:
    assert fetch("shakespeare", "--root", tmp_path, "--mirror", shared_data) == 0
    (tmp_path / "multi30k").mkdir()
    (tmp_path / "multi30k" / "train.de.gz").write_bytes(b"")
    capsys.readouterr()
    assert fetch("--list", "--root", tmp_path) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert list(lines) == list(SETS)
    assert "karpathy/char-rnn" in lines["shakespeare"] and "1.1 MB" in lines["shakespeare"]
    assert lines["shakespeare"].endswith("present")
    assert lines["multi30k"].endswith("incomplete (1 of 6 files)")
    assert lines["sst2"].endswith("missing") and "nyu-mll/glue" in lines["sst2"]


# -- Hugging Face datasets -------------------------------------------------------------------
def test_sst2_is_written_from_the_hub_dataset_as_its_preset_reads_it(tmp_path, capsys) -> None:
    mirror = hub_mirror(tmp_path / "mirror", "nyu-mll/glue", "sst2",
                        {"train": sst2_rows(67_349), "validation": sst2_rows(872),
                         "test": {**sst2_rows(3), "label": [-1] * 3}})  # fmt: skip
    assert fetch("sst2", "--root", tmp_path / "data", "--mirror", mirror) == 0
    assert "rows counted: 67,349, 872" in capsys.readouterr().out
    dev = (tmp_path / "data" / "sst2" / "dev.tsv").read_text().splitlines()
    assert dev[:3] == ["label\tsentence", "0\tsentence 0 , with a trailing space",
                       "1\tsentence 1 , with a trailing space"]  # fmt: skip
    dm = instantiate(preset("sst2", tmp_path / "data"), cache_dir=str(tmp_path / "cache"),
                     tokenizer="word", vocab_size=100)  # fmt: skip
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_classes == 2
    assert len(dm.datasets["train"]) == 67_349 and len(dm.datasets["val"]) == 872
    capsys.readouterr()
    assert fetch("sst2", "--root", tmp_path / "data", "--mirror", tmp_path / "gone") == 0
    assert "sst2: already in" in capsys.readouterr().out


def test_a_hub_split_of_another_size_is_refused_and_nothing_written(tmp_path, capsys) -> None:
    mirror = hub_mirror(tmp_path / "mirror", "nyu-mll/glue", "sst2",
                        {"train": sst2_rows(10), "validation": sst2_rows(872)})  # fmt: skip
    assert fetch("sst2", "--root", tmp_path / "data", "--mirror", mirror) == 2
    assert "has 10 train rows, not the published 67,349; nothing was written" in error_line(capsys)
    assert files_under(tmp_path / "data") == []


def test_a_dataset_that_cannot_be_loaded_names_it_and_the_fix(tmp_path, capsys) -> None:
    assert fetch("sst2", "--root", tmp_path / "data", "--mirror", tmp_path / "empty") == 2
    err = error_line(capsys)
    assert f"cannot load {tmp_path / 'empty' / 'nyu-mll/glue'} (sst2) with datasets" in err
    assert "is a copy of the dataset's repository" in err


def wikitext_rows(n: int) -> dict[str, list]:
    return {"text": ["", " = Heading = \n", "", " A paragraph , with @-@ tokens .\n"] * (n // 4)}


@pytest.fixture
def small_wikitext(monkeypatch: pytest.MonkeyPatch) -> None:
    """WikiText-103's catalogue entry with row counts a small mirror can hold."""
    wiki = SETS["wikitext103"]
    splits = tuple(HubSplit(s.split, s.path, 8) for s in wiki.hub.splits)
    monkeypatch.setitem(SETS, "wikitext103", dataclasses.replace(
        wiki, hub=dataclasses.replace(wiki.hub, splits=splits)))  # fmt: skip


def test_wikitext103_rows_become_lines_and_the_prepare_command_is_shown(
    small_wikitext, tmp_path, capsys, monkeypatch
) -> None:  # fmt: skip
    mirror = hub_mirror(tmp_path / "mirror", "Salesforce/wikitext", "wikitext-103-raw-v1",
                        {s: wikitext_rows(8) for s in ("train", "validation", "test")})
    monkeypatch.chdir(tmp_path)
    assert fetch("wikitext103", "--root", "data", "--mirror", mirror) == 0
    out = capsys.readouterr().out
    text = (tmp_path / "data" / "wikitext103" / "train.txt").read_text()
    assert text == "\n = Heading = \n\n A paragraph , with @-@ tokens .\n" * 2
    assert ("attnlab-prepare data/wikitext103/train.txt --val data/wikitext103/validation.txt "
            "--test data/wikitext103/test.txt --out data/wikitext103-tokens") in out
    assert "attnlab-train model=decoder_only data=tokens data.path=data/wikitext103-tokens" in out


def fineweb_mirror(tmp_path: Path, documents: int) -> Path:
    texts = [f"Document {i}.\n\nIt says \"{i}\" twice: {i}." for i in range(documents)]
    return hub_mirror(tmp_path / "mirror", "HuggingFaceFW/fineweb-edu", "sample-10BT",
                      {"train": {"text": texts, "id": [f"<urn:{i}>" for i in range(documents)],
                                 "score": [3.0] * documents}})  # fmt: skip


def test_fineweb_edu_streams_the_first_documents_as_json_lines(tmp_path, capsys) -> None:
    mirror = fineweb_mirror(tmp_path, 20)
    assert fetch("fineweb-edu", "--documents", "7", "--root", tmp_path, "--mirror", mirror) == 0
    lines = (tmp_path / "fineweb-edu" / "sample-10BT-7.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": f"<urn:{i}>", "text": f"Document {i}.\n\nIt says \"{i}\" twice: {i}."}
        for i in range(7)]  # fmt: skip
    assert "attnlab-prepare " in capsys.readouterr().out


def test_a_sample_larger_than_the_dataset_is_refused(tmp_path, capsys) -> None:
    mirror = fineweb_mirror(tmp_path, 5)
    assert fetch("fineweb-edu", "--documents", "9", "--root", tmp_path, "--mirror", mirror) == 2
    assert "gave 5 train rows, expected 9; nothing was written" in error_line(capsys)
    assert not (tmp_path / "fineweb-edu" / "sample-10BT-9.jsonl").exists()
    assert list((tmp_path / "fineweb-edu").iterdir()) == []


# -- whole commands --------------------------------------------------------------------------
@pytest.mark.slow
def test_the_printed_prepare_command_makes_token_shards(tmp_path, capsys, monkeypatch) -> None:
    from attnlab.prepare import main as prepare

    monkeypatch.chdir(tmp_path)
    mirror = fineweb_mirror(tmp_path, 2000)  # enough for --val-fraction 0.005 to draw some
    assert fetch("fineweb-edu", "--documents", "2000", "--mirror", mirror) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "attnlab-prepare" in x)
    argv = shlex.split(line.split(": ", 1)[1])[1:]
    assert prepare([*argv, "--workers", "0"]) == 0
    assert json.loads((tmp_path / "data/fineweb-edu-tokens/index.json").read_text())["splits"]


@pytest.mark.slow
def test_a_user_fetches_shakespeare_then_trains_on_it_in_an_empty_folder(
    shared_data, tmp_path
) -> None:  # fmt: skip
    env = cli_env()
    env.pop(DATA_ROOT_ENV, None)

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", *argv], cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=600)  # fmt: skip

    fetched = run("attnlab.fetch", "shakespeare", "--mirror", str(shared_data))
    assert fetched.returncode == 0, fetched.stderr
    trained = run("attnlab.train", "model=decoder_only", "data=shakespeare_char",
                  "trainer.max_steps=2", "trainer.enable_progress_bar=false", "test=false")
    assert trained.returncode == 0, trained.stderr[-2000:]
    (summary,) = tmp_path.glob("logs/train/runs/*/summary.json")
    config = json.loads(summary.read_text())["config"]
    assert config["data"]["path"] == str(tmp_path / "data" / "tinyshakespeare" / "input.txt")
