"""Fuzzing ``attnlab-prepare``'s arguments and input files: bad paths, globs, folders, empty
and damaged inputs (text, ``.gz``, JSON lines, parquet, tokenizer files), an ``--out``
that is a file or holds other things, and odd option values (wrong types, negative,
huge, NaN, unknown choices, missing values, unknown options).

The answer is ``attnlab-prepare``'s, run in this process: exit 0 with a folder that
``data=tokens`` opens (its index checked and its shards verified), or exit 2 with one
``error:`` line — never a traceback, never a hang; the inputs, and an ``--out`` that held
something, are as they were. (Interrupting a preparation is not fuzzed here.)
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from attnlab import prepare as prep
from attnlab.data.shard_verification import verify_shards
from attnlab.data.shards import open_split, read_index
from fuzzing import DEFAULT, MANY, captured, damage, damaged, one_error_line, time_limit

POEM = "the cat sat on the mat\nand the dog sat on the log\n\n"
TEXT = "".join(f"paragraph {i}: {POEM}" for i in range(60))


def inputs(folder: Path) -> dict[str, Path]:
    """Inputs of every kind, each valid (damage comes from the draws)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"text": folder / "poem.txt", "gz": folder / "poem.txt.gz",
             "jsonl": folder / "records.jsonl", "parquet": folder / "records.parquet",
             "empty": folder / "empty.txt", "tokenizer": folder / "tokenizer.json",
             "folder": folder / "sub", "file as out": folder / "a_file"}  # fmt: skip
    files["text"].write_text(TEXT)
    files["gz"].write_bytes(gzip.compress(TEXT.encode()))
    records = [{"text": f"record {i}: {POEM}"} for i in range(60)]
    files["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in records))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [r["text"] for r in records]}), files["parquet"])
    files["empty"].write_text("")
    from tokenizers import Tokenizer, models

    vocab = {w: i for i, w in enumerate(["[UNK]", *sorted(set(TEXT.split()))])}
    Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")).save(str(files["tokenizer"]))
    files["folder"].mkdir(exist_ok=True)
    (files["folder"] / "notes.txt").write_text(TEXT)
    files["file as out"].write_text("keep me\n")
    return files


KINDS = ["text", "gz", "jsonl", "parquet", "empty", "folder", "missing", "glob", "no match",
         "hf:", ""]  # fmt: skip
ODD = st.sampled_from(["0", "-1", "1e3", "nan", "inf", "-inf", "x", "", "1.5", str(2**64),
                       "-0", "0x10", "1_000"])  # fmt: skip
OPTIONS = {
    "--tokenizer": st.sampled_from(["char", "bpe", "TOKENIZER", "nope", "", "GARBLED", "FOLDER"]),
    "--vocab-size": st.one_of(st.integers(250, 2000).map(str), st.integers(-3, 300).map(str), ODD),
    "--tokenizer-sample-mb": st.one_of(st.sampled_from(["1", "0.0001", "1e-9", "64"]), ODD),
    "--unit": st.sampled_from(["file", "paragraph", "line", "word", ""]),
    "--text-field": st.sampled_from(["text", "body", "", "ß"]),
    "--hf-split": st.sampled_from(["train", "validation", ""]),
    "--val-fraction": st.one_of(st.floats(-0.5, 1.5).map(repr), ODD),
    "--test-fraction": st.one_of(st.floats(-0.5, 1.5).map(repr), ODD),
    "--shard-tokens": st.one_of(st.sampled_from(["1023", "1024", "4096", str(2**31),
                                                 str(2**31 + 1)]), ODD),
    "--dtype": st.sampled_from(["auto", "uint16", "uint32", "uint8", ""]),
    "--workers": st.sampled_from(["0", "1", "-1", "x", "1.5", ""]),
    "--seed": st.one_of(st.integers(-(2**70), 2**70).map(str), ODD),
}  # fmt: skip
OUTS = ["nested new", "file", "folder", "under a file", "", "missing value", "an input"]
CHANGE = st.one_of(
    st.tuples(st.just("inputs"), st.lists(st.sampled_from(KINDS), max_size=3)),
    st.tuples(st.just("damage"), st.sampled_from(["text", "gz", "jsonl", "parquet", "tokenizer"]),
              damage(2048)),
    st.tuples(st.just("out"), st.sampled_from(OUTS)),
    st.sampled_from(sorted(OPTIONS)).flatmap(lambda o: st.tuples(st.just("option"), st.just(o),
                                                                 OPTIONS[o])),
    st.tuples(st.just("drop"), st.sampled_from(["--tokenizer", "--val-fraction", "--workers"])),
    st.tuples(st.just("flag"), st.sampled_from(["--streaming", "--bogus", "--val", "--test",
                                                "--out"]), st.lists(st.sampled_from(KINDS),
                                                                    max_size=2)),
)  # fmt: skip
# a valid invocation, with one of TOKENIZERS, that the draws change in one to three ways
BASE = {"inputs": ["text"], "out": "new",
        "options": {"--tokenizer": "char", "--val-fraction": "0.2", "--workers": "0"}}
TOKENIZERS = st.sampled_from(["char", "bpe", "TOKENIZER"])


def invocation(changes: list[tuple], tokenizer: str = "char") -> dict:
    """BASE with ``tokenizer`` and ``changes``: inputs, a damaged file, --out, options set or
    dropped, flags."""
    case = {**BASE, "options": {**BASE["options"], "--tokenizer": tokenizer}, "damage": [],
            "flags": []}  # fmt: skip
    for change in changes:
        kind, *rest = change
        if kind in ("inputs", "out"):
            case[kind] = rest[0]
        elif kind == "damage":
            case["damage"].append(rest)
        elif kind == "option":
            case["options"][rest[0]] = rest[1]
        elif kind == "drop":
            case["options"].pop(rest[0], None)
        else:
            case["flags"].append(rest)
    return case


def argv_of(case: dict, files: dict[str, Path], work: Path) -> list[str]:
    """The command line of ``case``, with its files in place under ``work``."""
    special = {"missing": str(work / "nowhere.txt"), "glob": str(work / "in" / "*.txt"),
               "no match": str(work / "in" / "*.nothing"), "hf:": "hf:no_such_dataset",
               "": ""}  # fmt: skip

    def spec(kind: str) -> str:
        return special[kind] if kind in special else str(files[kind])

    out = {"new": work / "out", "nested new": work / "out" / "a" / "b",
           "file": files["file as out"], "folder": files["folder"], "an input": files["text"],
           "under a file": files["file as out"] / "out", "": "", "missing value": None
           }[case["out"]]  # fmt: skip
    argv = [spec(k) for k in case["inputs"]]
    for option, value in case["options"].items():
        value = {"TOKENIZER": str(files["tokenizer"]), "GARBLED": str(files["text"]),
                 "FOLDER": str(files["folder"])}.get(value, value)  # fmt: skip
        argv += [option, value]
    for flag, kinds in case["flags"]:
        argv += [flag] if flag in ("--streaming", "--bogus", "--out") else [
            flag, *map(spec, kinds)]  # fmt: skip
    return [*argv, "--out", str(out)] if out is not None else [*argv, "--out"]


def snapshot(root: Path, skip: Path) -> dict[str, bytes]:
    """Every file under ``root`` but those under ``skip`` (where a new folder may go)."""
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and skip not in p.parents}  # fmt: skip


def judge(case: dict, tmp: Path) -> str:
    """Run attnlab-prepare on ``case``: exit 0 with a folder that opens, or exit 2 with one
    error line; every file that was there before is as it was. Returns the outcome, for the
    statistics (``--hypothesis-show-statistics``)."""
    work = tmp / "case"
    shutil.rmtree(work, ignore_errors=True)
    files = inputs(work / "in")
    for kind, edits in case["damage"]:
        files[kind].write_bytes(damaged(files[kind].read_bytes(), edits))
    argv = argv_of(case, files, work)
    before = snapshot(work, work / "out")
    with time_limit(120):
        outcome, printed = captured(lambda: prep.main(argv))
    assert isinstance(outcome, int), (argv, printed[-3000:])
    after = snapshot(work, work / "out")
    assert {p: b for p, b in after.items() if p in before} == before, argv
    if outcome == 0:
        assert "Traceback" not in printed, printed[-3000:]
        out = Path(argv[argv.index("--out") + 1])
        index = read_index(out)  # checked
        for split in index["splits"]:
            open_split(out, split)  # the shards' sizes checked
        verify_shards(out, index, list(index["splits"]))  # their SHA-256 and ids
        return "prepared"
    assert outcome == 2, (argv, printed[-3000:])
    line = one_error_line(printed).replace(str(work), "W")
    return "refused: " + re.sub(r"\d+", "N", line.split(";")[0])[:90]


# shrunk examples the fuzzer found, kept as regression cases
FOUND: list[tuple[str, list[tuple]]] = [
    ("char", [("out", "under a file")]),  # NotADirectoryError from mkdir
    ("char", [("option", "--shard-tokens", str(2**64))]),  # ValueError allocating a shard
    ("char", [("option", "--tokenizer-sample-mb", "nan")]),  # ValueError: NaN to an integer
    ("bpe", [("option", "--vocab-size", str(2**64))]),  # OverflowError in the BPE trainer
    ("bpe", [("option", "--vocab-size", str(2**31))]),  # the BPE trainer aborts the process
    # a sample of no byte: a char vocabulary of the specials alone, which data=tokens refused
    ("char", [("option", "--tokenizer-sample-mb", "1e-9")]),
]


@pytest.mark.parametrize("kind", ["text", "gz", "jsonl", "parquet", "folder"])
def test_every_input_kind_prepares(kind: str, tmp_path: Path) -> None:
    """The baseline: an intact input of each kind gives a folder (exit 0)."""
    case = invocation([("inputs", [kind] if kind != "folder" else ["glob"])])
    assert judge(case, tmp_path) == "prepared"


@settings(DEFAULT, max_examples=12)
@given(tokenizer=TOKENIZERS, changes=st.lists(CHANGE, min_size=1, max_size=3))
def test_any_invocation_prepares_or_is_refused_in_one_line(tokenizer: str, changes: list[tuple],
                                                           tmp_path: Path) -> None:  # fmt: skip
    event(judge(invocation(changes, tokenizer), tmp_path))


@pytest.mark.parametrize(("tokenizer", "changes"), FOUND)
def test_invocations_the_fuzzer_found(tokenizer: str, changes: list[tuple],
                                      tmp_path: Path) -> None:  # fmt: skip
    judge(invocation(changes, tokenizer), tmp_path)


@pytest.mark.slow
@MANY
@given(tokenizer=TOKENIZERS, changes=st.lists(CHANGE, min_size=1, max_size=3))
def test_many_invocations(tokenizer: str, changes: list[tuple], tmp_path: Path) -> None:
    event(judge(invocation(changes, tokenizer), tmp_path))
