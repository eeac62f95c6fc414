"""attnlab-prepare: corpus files → token shards, held out by document, resumable, exact."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from attnlab import prepare as prep
from attnlab.data.shards import open_split, read_index
from attnlab.data.tokenizers import load_tokenizer
from attnlab.special_tokens import EOS, NUM_SPECIAL
from cli_runs import run
from token_folders import shard_sums

POEM = "the cat sat on the mat\nand the dog sat on the log\n"


def corpus(folder: Path, n_files: int = 3, paragraphs: int = 40) -> list[Path]:
    """Files of blank-line-separated paragraphs, each distinct (a numbered sentence)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(n_files):
        text = "\n\n".join(f"file {f} paragraph {p}: {POEM * (1 + p % 3)}".strip()
                           for p in range(paragraphs))  # fmt: skip
        path = folder / f"part{f}.txt"
        path.write_text(text + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def prepare(*argv: str) -> dict:
    return prep.prepare(prep.parse(list(argv)), list(argv))


def test_paragraphs_become_documents_ending_in_eos_and_val_is_held_out_by_document(
    tmp_path: Path,
) -> None:
    files = corpus(tmp_path / "in")
    out = tmp_path / "out"
    index = prepare(*map(str, files), "--out", str(out), "--tokenizer", "char",
                    "--val-fraction", "0.1", "--shard-tokens", "2048",
                    "--workers", "0")  # fmt: skip
    splits = index["splits"]
    assert splits["train"]["documents"] + splits["val"]["documents"] == 3 * 40
    assert 0 < splits["val"]["documents"] < 40  # about one in ten
    shards = splits["train"]["shards"]
    assert all(s["tokens"] == 2048 for s in shards[:-1]) and len(shards) > 2
    tokenizer = load_tokenizer(out / "tokenizer.json")
    for split in ("train", "val"):
        tokens = open_split(out, split)[:].numpy()
        assert (tokens == EOS).sum() == splits[split]["documents"]
        documents = [tokenizer.decode(d.tolist()) for d in np.split(tokens, np.flatnonzero(
            tokens == EOS) + 1) if len(d)]  # fmt: skip
        # whole paragraphs, not a cut through the stream
        assert all(d.startswith("file ") and d.endswith("the log") for d in documents)
    # the .docs files say where each document starts, shard by shard
    starts = []
    for s in shards:
        local = np.fromfile(out / s["docs"], dtype=np.int64)
        assert len(local) == s["documents"]
        starts += (local + 2048 * shards.index(s)).tolist()
    tokens = open_split(out, "train")[:].numpy()
    assert starts == [0, *(np.flatnonzero(tokens == EOS)[:-1] + 1).tolist()]


def test_the_same_inputs_give_the_same_shards_with_any_worker_count(tmp_path: Path) -> None:
    files = [str(p) for p in corpus(tmp_path / "in")]
    common = ["--vocab-size", "300", "--val-fraction", "0.2", "--shard-tokens", "1024"]
    prepare(*files, "--out", str(tmp_path / "a"), "--workers", "0", *common)
    prepare(*files, "--out", str(tmp_path / "b"), "--workers", "2", *common)
    assert shard_sums(tmp_path / "a") == shard_sums(tmp_path / "b")
    for shard in read_index(tmp_path / "a")["splits"]["train"]["shards"]:
        assert prep.sha256_file(tmp_path / "a" / shard["file"]) == shard["sha256"]


@pytest.mark.parametrize("kill_at", [0, 5], ids=["before the first shard", "at the sixth"])
def test_a_killed_preparation_continues_where_it_stopped_and_writes_the_same_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_at: int
) -> None:
    files = [str(p) for p in corpus(tmp_path / "in", paragraphs=80)]
    common = ["--tokenizer", "char", "--val-fraction", "0.1", "--shard-tokens", "1024",
              "--workers", "0"]  # fmt: skip
    prepare(*files, "--out", str(tmp_path / "whole"), *common)
    real = prep.SplitWriter._write_shard
    written = []

    def die_at_the_sixth(self):  # noqa: ANN001, ANN202
        if len(written) == kill_at:
            raise KeyboardInterrupt  # as a kill between two shards
        written.append(self.pending)
        return real(self)

    monkeypatch.setattr(prep.SplitWriter, "_write_shard", die_at_the_sixth)
    out = tmp_path / "parts"
    with pytest.raises(KeyboardInterrupt):
        prepare(*files, "--out", str(out), *common)
    state = json.loads((out / prep.STATE).read_text())
    assert (0 < state["documents_done"] < 240 if kill_at else state["documents_done"] == 0)
    assert not (out / "index.json").exists()
    for shard in out.glob("[!.]*.bin"):  # no half-written shard is ever visible
        assert shard.stat().st_size == 1024 * 2
    monkeypatch.setattr(prep.SplitWriter, "_write_shard", real)
    prepare(*files, "--out", str(out), *common)
    assert shard_sums(out) == shard_sums(tmp_path / "whole")
    assert not list(out.glob(".pending-*")) and not (out / prep.STATE).exists()
    # run again: nothing to do, nothing rewritten
    mtimes = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    prepare(*files, "--out", str(out), *common)
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.iterdir()}


def test_json_lines_parquet_gzip_and_saved_datasets_are_read_as_documents(tmp_path: Path) -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"record {i}: {POEM}" for i in range(30)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n"
                                              for i, t in enumerate(texts[:10])))  # fmt: skip
    pq.write_table(pa.table({"text": texts[10:20]}), tmp_path / "b.parquet")
    with gzip.open(tmp_path / "c.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(t.replace("\n", " ") for t in texts[20:25]) + "\n")
    datasets.Dataset.from_dict({"text": texts[25:]}).save_to_disk(str(tmp_path / "saved"))
    index = prepare(str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet"),
                    str(tmp_path / "c.txt.gz"), str(tmp_path / "saved"), "--unit", "line",
                    "--out", str(tmp_path / "out"), "--tokenizer", "char", "--val",
                    str(tmp_path / "a.jsonl"), "--workers", "0")  # fmt: skip
    assert index["splits"]["train"]["documents"] == 30
    assert index["splits"]["val"]["documents"] == 10
    tokenizer = load_tokenizer(tmp_path / "out" / "tokenizer.json")
    text = tokenizer.decode(open_split(tmp_path / "out", "train")[:].tolist())
    assert all(f"record {i}:" in text for i in range(30))


def test_a_tokenizer_file_without_attnlab_specials_has_its_ids_moved_up(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    foreign = Tokenizer(models.BPE())
    foreign.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    foreign.decoder = decoders.ByteLevel()  # as GPT-2's tokenizer.json
    foreign.train_from_iterator([POEM] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    path = tmp_path / "gpt2-like.json"
    foreign.save(str(path))
    (tmp_path / "in.txt").write_text(POEM * 10)
    index = prepare(str(tmp_path / "in.txt"), "--unit", "line", "--tokenizer", str(path),
                    "--out", str(tmp_path / "out"), "--val-fraction", "0.3")  # fmt: skip
    assert index["vocab_size"] == foreign.get_vocab_size() + NUM_SPECIAL
    tokens = open_split(tmp_path / "out", "train")[:].tolist()
    first = tokens[: tokens.index(EOS)]
    assert [t - NUM_SPECIAL for t in first] == foreign.encode("the cat sat on the mat").ids
    restored = load_tokenizer(tmp_path / "out" / "tokenizer.json")
    assert restored.decode(first) == "the cat sat on the mat"


@pytest.mark.parametrize("case", ["latin1", "bom", "surrogate", "empty", "dtype", "other shards",
                                  "no val"])
def test_bad_input_is_one_line_with_exit_2_and_nothing_on_disk_is_touched(
    tmp_path: Path, case: str
) -> None:
    good = tmp_path / "good.txt"
    good.write_text(POEM * 50)
    out = tmp_path / "out"
    args = [str(good), "--out", str(out), "--tokenizer", "char", "--unit", "line",
            "--val-fraction", "0.2"]
    expect = {"latin1": "bad byte at offset 11", "bom": "bad byte at offset 7",
              "surrogate": "line 2 holds a lone surrogate", "empty": "holds no document",
              "dtype": "use --dtype uint32", "other shards": "already holds prepared shards",
              "no val": "raise --val-fraction"}[case]  # fmt: skip
    if case == "latin1":
        bad = tmp_path / "bad.txt"
        bad.write_bytes("the cat\ncaf\u00e9\n".encode("latin-1"))
        args[0] = str(bad)
    elif case == "bom":
        bad = tmp_path / "bom.txt"
        bad.write_bytes(b"\xef\xbb\xbfcafe\xe9\n")  # the offset counts the BOM's 3 bytes
        args[0] = str(bad)
    elif case == "surrogate":
        bad = tmp_path / "records.jsonl"
        bad.write_text('{"text": "fine"}\n{"text": "\\ud800 alone"}\n')
        args[0] = str(bad)
        args.remove("--unit")  # records are documents: --unit does not apply (and is refused)
        args.remove("line")
    elif case == "empty":
        (tmp_path / "blank.txt").write_text("\n\n  \n")
        args[0] = str(tmp_path / "blank.txt")
    elif case == "dtype":
        from tokenizers import Tokenizer, models

        vocab = {f"w{i}": i for i in range(70_000)}
        Tokenizer(models.WordLevel(vocab, unk_token="w0")).save(str(tmp_path / "big.json"))
        args[3:5] = ["--tokenizer", str(tmp_path / "big.json")]
        args += ["--dtype", "uint16"]
    elif case == "other shards":
        assert run("prepare", *args).returncode == 0
        args += ["--seed", "7"]
    else:
        args += ["--unit", "file", "--val-fraction", "0.01"]
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) if out.exists() else []
    done = run("prepare", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], lines
    if case == "latin1":
        assert "bad.txt" in lines[0]
    after = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) if out.exists() else []
    assert after == before


def test_a_hugging_face_dataset_streams_from_local_files(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "part.jsonl").write_text("".join(json.dumps({"text": f"record {i}: {POEM}"}) + "\n"
                                               for i in range(40)))  # fmt: skip
    index = prepare(f"hf:{folder}", "--streaming", "--out", str(tmp_path / "out"),
                    "--tokenizer", "char", "--val-fraction", "0.2", "--workers", "0")  # fmt: skip
    splits = index["splits"]
    assert splits["train"]["documents"] + splits["val"]["documents"] == 40
    assert index["settings"]["streaming"] is True


def foreign_tokenizer_file(path: Path) -> Path:
    """A GPT-2-like byte-level BPE file: no attnlab specials, <|endoftext|> added."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    foreign = Tokenizer(models.BPE())
    foreign.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    foreign.decoder = decoders.ByteLevel()
    foreign.train_from_iterator([POEM, "é ü 日本 🎉 <eos>"] * 20, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    foreign.save(str(path))
    return path


@pytest.mark.parametrize("tokenizer", ["bpe", "foreign"])
def test_tiktoken_and_tokenizers_write_the_same_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer: str
) -> None:
    files = [str(p) for p in corpus(tmp_path / "in")]
    (tmp_path / "in" / "odd.txt").write_text("  spaces   and\ttabs é ü 日本 🎉 <eos> <|endoftext|>")
    files.append(str(tmp_path / "in" / "odd.txt"))
    kind = ["--vocab-size", "300"] if tokenizer == "bpe" else [
        "--tokenizer", str(foreign_tokenizer_file(tmp_path / "gpt2-like.json"))]  # fmt: skip
    common = [*files, *kind, "--val-fraction", "0.2", "--shard-tokens", "1024"]
    fast = prepare(*common, "--out", str(tmp_path / "tiktoken"), "--workers", "2")
    used = []

    def tokenizers_only(tokenizer):  # noqa: ANN001, ANN202
        used.append(tokenizer)
        return tokenizer, "tokenizers"

    monkeypatch.setattr(prep, "encoder_for", tokenizers_only)
    prepare(*common, "--out", str(tmp_path / "tokenizers"), "--workers", "0")
    assert used and shard_sums(tmp_path / "tiktoken") == shard_sums(tmp_path / "tokenizers")
    assert fast["tokenizer"]["kind"] == ("bpe" if tokenizer == "bpe" else "offset")


def test_a_tiktoken_file_prepares_with_its_ids_moved_up_by_6(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import hashlib

    from tokenizers import Tokenizer

    from attnlab.data import tiktoken_bpe

    hf = Tokenizer.from_file(str(foreign_tokenizer_file(tmp_path / "gpt2-like.json")))
    bpe, _ = tiktoken_bpe.from_hf_json(hf.to_str())
    path = tmp_path / "r50k-like.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in bpe.ranks.items()))
    known = ("r50k-like", bpe.pattern, bpe.specials)
    monkeypatch.setitem(tiktoken_bpe.KNOWN_FILES, hashlib.sha256(path.read_bytes()).hexdigest(),
                        known)  # fmt: skip
    (tmp_path / "in.txt").write_text(POEM * 10)
    index = prepare(str(tmp_path / "in.txt"), "--unit", "line", "--tokenizer", str(path),
                    "--out", str(tmp_path / "out"), "--val-fraction", "0.3")  # fmt: skip
    assert index["vocab_size"] == hf.get_vocab_size() + NUM_SPECIAL
    tokens = open_split(tmp_path / "out", "train")[:].tolist()
    first = tokens[: tokens.index(EOS)]
    assert [t - NUM_SPECIAL for t in first] == hf.encode("the cat sat on the mat").ids
    assert load_tokenizer(tmp_path / "out" / "tokenizer.json").decode(first) == (
        "the cat sat on the mat")


DAMAGE = ["missing", "cut short", "a changed byte", "missing .docs", "the last shard missing"]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_finished_folder_that_lost_a_shard_gets_it_rebuilt_by_the_same_command(
    tmp_path: Path, capsys: pytest.CaptureFixture, damage: str
) -> None:
    files = [str(p) for p in corpus(tmp_path / "in", paragraphs=60)]
    args = [*files, "--out", str(tmp_path / "out"), "--tokenizer", "char", "--val-fraction",
            "0.1", "--shard-tokens", "1024", "--workers", "0"]  # fmt: skip
    prepare(*args)
    whole = shard_sums(tmp_path / "out")
    shards = read_index(tmp_path / "out")["splits"]["train"]["shards"]
    hurt = tmp_path / "out" / shards[-1 if damage == "the last shard missing" else 2]["file"]
    if damage == "cut short":
        hurt.write_bytes(hurt.read_bytes()[:-2])
    elif damage == "a changed byte":
        data = bytearray(hurt.read_bytes())
        data[7] ^= 1
        hurt.write_bytes(bytes(data))
    elif damage == "missing .docs":
        hurt = hurt.with_suffix(".docs")
        hurt.unlink()
    else:
        hurt.unlink()
    capsys.readouterr()
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()
              if p.stem != hurt.stem}  # fmt: skip
    prepare(*args)
    assert "tokenizing the corpus again to rebuild it" in capsys.readouterr().out
    assert shard_sums(tmp_path / "out") == whole
    for shard in read_index(tmp_path / "out")["splits"]["train"]["shards"]:
        assert prep.sha256_file(tmp_path / "out" / shard["file"]) == shard["sha256"]
    assert before == {p: p.stat().st_mtime_ns for p in before}  # nothing else rewritten


def test_an_unfinished_folder_that_lost_a_shard_starts_over_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    files = [str(p) for p in corpus(tmp_path / "in", paragraphs=80)]
    common = ["--tokenizer", "char", "--val-fraction", "0.1", "--shard-tokens", "1024",
              "--workers", "0"]  # fmt: skip
    prepare(*files, "--out", str(tmp_path / "whole"), *common)
    real = prep.SplitWriter._write_shard

    def die_at_the_fourth(self):  # noqa: ANN001, ANN202
        if len(self.shards) == 3:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(prep.SplitWriter, "_write_shard", die_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        prepare(*files, "--out", str(tmp_path / "parts"), *common)
    monkeypatch.setattr(prep.SplitWriter, "_write_shard", real)
    (tmp_path / "parts" / "train_000001.bin").unlink()
    capsys.readouterr()
    prepare(*files, "--out", str(tmp_path / "parts"), *common)
    assert "starting it over from the first document" in capsys.readouterr().out
    assert shard_sums(tmp_path / "parts") == shard_sums(tmp_path / "whole")


def test_a_stop_signal_keeps_the_tokens_of_an_unfinished_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import os
    import signal

    from attnlab.data import preparation

    files = [str(p) for p in corpus(tmp_path / "in", paragraphs=200)]
    common = ["--tokenizer", "char", "--val-fraction", "0.1", "--workers", "0"]  # one shard
    prepare(*files, "--out", str(tmp_path / "whole"), *common)
    real = prep.SplitWriter.add
    calls = []

    def ctrl_c_at_the_tenth(self, ids, starts):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 10:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: the handler asks to stop
        return real(self, ids, starts)

    monkeypatch.setattr(prep.SplitWriter, "add", ctrl_c_at_the_tenth)
    small = preparation.tasks  # tasks of a few documents, so that the stop comes early

    monkeypatch.setattr(preparation, "tasks", lambda pieces: small(pieces, max_chars=2000))
    with pytest.raises(prep.Stopped) as stopped:
        prepare(*files, "--out", str(tmp_path / "parts"), *common)
    assert 0 < stopped.value.saved < 600 and not list((tmp_path / "parts").glob("[!.]*.bin"))
    monkeypatch.setattr(prep.SplitWriter, "add", real)
    capsys.readouterr()
    prepare(*files, "--out", str(tmp_path / "parts"), *common)
    assert f"after {stopped.value.saved:,} documents" in capsys.readouterr().out
    assert shard_sums(tmp_path / "parts") == shard_sums(tmp_path / "whole")


def test_workers_default_to_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:  # fmt: skip
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(96)), raising=False)
    assert prep.parse(["in.txt", "--out", "x"]).workers == 96


def test_a_shard_is_written_from_its_buffer_without_a_copy(tmp_path: Path) -> None:
    import tracemalloc

    from attnlab.data.shards import write_atomic

    tokens = np.arange(1 << 24, dtype=np.uint16)  # 32 MiB
    tracemalloc.start()
    try:
        write_atomic(tmp_path / "shard.bin", tokens[: 1 << 23])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert np.array_equal(np.fromfile(tmp_path / "shard.bin", np.uint16), tokens[: 1 << 23])


@pytest.mark.parametrize("case", ["full disk", "unavailable hf dataset"])
def test_errors_name_the_options_of_attnlab_prepare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, case: str
) -> None:
    import errno

    import datasets

    (tmp_path / "in.txt").write_text(POEM * 20)
    source = str(tmp_path / "in.txt")
    if case == "full disk":
        def full(*args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(prep, "write_json_atomic", full)
        monkeypatch.setattr("attnlab.data.preparation.write_json_atomic", full)
    else:
        def offline(*args: object, **kwargs: object) -> None:
            raise ConnectionError("offline")

        monkeypatch.setattr(datasets, "load_dataset", offline)
        source = "hf:someone/no_such_dataset"
    unit = ["--unit", "line"] if case == "full disk" else []  # a text file's option
    code = prep.main([source, "--out", str(tmp_path / "out"), "--tokenizer", "char", *unit,
                      "--val-fraction", "0.2", "--workers", "0"])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "ckpt_path" not in lines[0] and "data.hf" not in lines[0] and "paths." not in lines[0]
    expect = {"full disk": "run the same attnlab-prepare command again to continue",
              "unavailable hf dataset": "error: input: "}[case]  # fmt: skip
    assert expect in lines[0]


@pytest.mark.parametrize("state", ["killed between a shard and the next save",
                                   "saved by an earlier attnlab"])  # fmt: skip
def test_an_unfinished_folder_continues_from_its_saved_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, state: str
) -> None:
    files = [str(p) for p in corpus(tmp_path / "in", paragraphs=80)]
    common = ["--tokenizer", "char", "--val-fraction", "0.1", "--shard-tokens", "1024",
              "--workers", "0"]  # fmt: skip
    prepare(*files, "--out", str(tmp_path / "whole"), *common)
    real = prep.SplitWriter._write_shard
    after = state.startswith("killed")

    def die_at_the_fourth(self):  # noqa: ANN001, ANN202
        if self.split == "train" and len(self.shards) == 3:
            if after:
                real(self)  # the shard is renamed into place, the state still names it pending
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(prep.SplitWriter, "_write_shard", die_at_the_fourth)
    out = tmp_path / "parts"
    with pytest.raises(KeyboardInterrupt):
        prepare(*files, "--out", str(out), *common)
    monkeypatch.setattr(prep.SplitWriter, "_write_shard", real)
    saved = json.loads((out / prep.STATE).read_text())
    if not after:  # an earlier attnlab: pending files named by the save, counted whole
        for split, entry in saved["splits"].items():
            for ext, count, size in ((".bin", entry.pop("pending_tokens"), 2),
                                     (".docs", entry.pop("pending_starts"), 8)):  # fmt: skip
                old = out / f"{entry['pending']}{ext}"
                data = old.read_bytes()[: count * size] if old.exists() else b""
                old.unlink(missing_ok=True)
                (out / f".pending-{split}-7{ext}").write_bytes(data)
            entry["pending"] = f".pending-{split}-7"
        (out / prep.STATE).write_text(json.dumps(saved))
    capsys.readouterr()
    prepare(*files, "--out", str(out), *common)
    assert f"after {saved['documents_done']:,} documents" in capsys.readouterr().out
    assert shard_sums(out) == shard_sums(tmp_path / "whole")
    assert not list(out.glob(".pending-*")) and not (out / prep.STATE).exists()


@pytest.mark.parametrize(("option", "expect"), [
    (["--tokenizer-sample-mb", "nan"], "--tokenizer-sample-mb must be"),
    (["--tokenizer-sample-mb", "inf"], "--tokenizer-sample-mb must be"),
    (["--tokenizer-sample-mb", "1e-9"], "--tokenizer-sample-mb must be"),  # a sample of no byte
    (["--shard-tokens", str(2**64)], "--shard-tokens must lie between"),
    (["--tokenizer", "bpe", "--vocab-size", str(2**64)], "--vocab-size must"),
    (["--tokenizer", "bpe", "--vocab-size", str(2**31)], "--vocab-size must"),  # aborted
    (["--out", "FILE/out"], "is a file, so the folder"),
    (["--out", "DEEP"], "already holds prepared shards made from other inputs"),
])  # fmt: skip
def test_an_option_value_out_of_range_or_a_bad_out_is_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], expect: str
) -> None:
    good = tmp_path / "good.txt"
    good.write_text(POEM * 50)
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "index.json").write_text("[" * 100_000)  # nested beyond recursion
    option = [o.replace("FILE", str(good)).replace("DEEP", str(tmp_path / "deep"))
              for o in option]  # fmt: skip
    assert prep.main([str(good), "--out", str(tmp_path / "out"), "--tokenizer", "char",
                      "--val-fraction", "0.2", "--workers", "0", *option]) == 2  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], lines
    assert not (tmp_path / "out").exists()
    assert good.read_text() == POEM * 50


def test_an_unavailable_hugging_face_dataset_is_named_as_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error names attnlab-prepare's own argument and fix, not data=text's keys."""
    assert prep.main(["hf:no_such_dataset_anywhere", "--out", str(tmp_path / "out"),
                      "--val-fraction", "0.2"]) == 2  # fmt: skip
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: input: ") and "pass local files" in line, line
    assert "data." not in line


@pytest.mark.parametrize(("option", "expect"), [
    (["--tokenizer", "char", "--vocab-size", "300"], "--vocab-size sizes a tokenizer"),
    (["--tokenizer", "TOKENIZER", "--tokenizer-sample-mb", "1"], "--tokenizer-sample-mb is"),
    (["--val", "TEXT", "--val-fraction", "0.1"], "--val-fraction draws validation documents"),
    (["--test", "TEXT", "--test-fraction", "0.1"], "--test-fraction draws test documents"),
    (["--streaming"], "--streaming applies to hf:<name> inputs"),
    (["--text-field", "body"], "--text-field applies to JSON-lines"),
    (["--hf-split", "validation"], "--hf-split applies to Hugging Face datasets"),
    (["JSONL", "--unit", "line"], "--unit applies to text files"),
])  # fmt: skip
def test_an_option_that_does_not_apply_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], expect: str
) -> None:
    text, records, tokenizer = tmp_path / "in.txt", tmp_path / "in.jsonl", tmp_path / "t.json"
    text.write_text("\n\n".join([POEM] * 50))  # 50 documents: prepared, were it not refused
    records.write_text("".join(json.dumps({"text": f"{i}: {POEM}"}) + "\n" for i in range(50)))
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")).save(str(tokenizer))
    names = {"TEXT": str(text), "JSONL": str(records), "TOKENIZER": str(tokenizer)}
    option = [names.get(o, o) for o in option]
    inputs = [option.pop(0)] if option[0] == str(records) else [str(text)]
    assert prep.main([*inputs, "--out", str(tmp_path / "out"), "--val-fraction", "0.2",
                      "--workers", "0", *option]) == 2  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], lines
    assert not (tmp_path / "out").exists()
