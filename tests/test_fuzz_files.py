"""Fuzzing every input file kind: random byte flips, truncations and appended garbage give
one error naming the file (a UserError, which the entry points print as one line with
exit code 2) or a correct result — never another exception, never a hang.

Each kind is read by the function attnlab reads it with, in this process, on a copy of
a valid file that Hypothesis damages: text and ``.gz`` corpora (``data=text``,
``data=translation``), TSV (``data=classification``), PNG images (``data=images``),
checkpoints (what ``ckpt_path=`` and ``attnlab-eval`` open: the weights-only reader and
the shape check against the run's model), ``summary.json`` (``attnlab-compare`` and
sweep resume) and ``.hydra/config.yaml`` (what eval and generate load). Each case is
bounded in time (a hang fails it).
"""

from __future__ import annotations

import gzip
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnlab.errors import UserError
from composed_runs import compose_run
from fuzzing import DEFAULT, MANY, captured, damage, damaged, time_limit

SMALL = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "data.batch_size=4"]
TEXT = "".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(40))


def build_data(overrides: list[str], tmp: Path, cache: bool = True) -> Any:
    from attnlab.cli import pipeline

    cached = [f"data.cache_dir={tmp / 'cache'}"] if cache else []
    cfg = compose_run([*SMALL, *overrides, *cached], tmp / "run")
    return pipeline.build_data(cfg)


# -- the file kinds: (make a valid file in a folder, read it back the way attnlab does) ------
def text_kind(folder: Path) -> tuple[Path, Callable[[], Any]]:
    path = folder / "corpus.txt"
    path.write_text(TEXT)
    return path, lambda: build_data(["model=decoder_only", "data=text", f"data.path={path}",
                                     "data.block_size=16"], folder)  # fmt: skip


def gz_kind(folder: Path) -> tuple[Path, Callable[[], Any]]:
    src, tgt = folder / "train.de.gz", folder / "train.en.gz"
    for path in (src, tgt):
        with gzip.open(path, "wt") as f:
            f.write(TEXT)
    files = [f"data.files.{split}.{side}={path}" for split in ("train", "val")
             for side, path in (("src", src), ("tgt", tgt))]  # fmt: skip
    return src, lambda: build_data(["data=translation", "data.tokenizer=char", *files], folder)


def tsv_kind(folder: Path) -> tuple[Path, Callable[[], Any]]:
    path = folder / "reviews.tsv"
    path.write_text("text\tlabel\n" + "".join(f"good film {i}\t{i % 2}\n" for i in range(30)))
    args = ["model=encoder_only", "data=classification", f"data.path={path}", "data.tokenizer=char"]
    return path, lambda: build_data(args, folder)


def image_kind(folder: Path) -> tuple[Path, Callable[[], Any]]:
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (folder / "images" / label).mkdir(parents=True, exist_ok=True)
        for i in range(6):
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / "images" / label / f"{i}.png")
    return folder / "images" / "cat" / "0.png", lambda: build_data(
        ["model=vit", "data=images", f"data.path={folder / 'images'}", "data.image_size=8",
         "data.patch_size=4"], folder, cache=False)  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from attnlab import train as attnlab_train
    from attnlab.cli.rundir import release_all

    run = tmp_path_factory.mktemp("finished") / "run"
    args = [*SMALL, "data=majority", "model=encoder_only", "data.train_size=16", "data.val_size=8",
            "data.test_size=8", "trainer.max_epochs=1", "trainer.enable_progress_bar=false",
            f"hydra.run.dir={run}"]  # fmt: skip
    try:
        assert attnlab_train.main(args) == 0
    finally:
        release_all()
    return run


def run_copy(finished_run: Path, folder: Path) -> Path:
    run = folder / "run"
    shutil.copytree(finished_run, run)
    return run


def checkpoint_kind(finished_run: Path) -> Callable[[Path], tuple[Path, Callable[[], Any]]]:
    def make(folder: Path) -> tuple[Path, Callable[[], Any]]:
        from attnlab.cli import pipeline
        from attnlab.cli.checkpoints import load_run_config

        run = run_copy(finished_run, folder)
        path = run / "checkpoints" / "last.ckpt"
        cfg = load_run_config(run, [])

        def read() -> Any:
            datamodule = pipeline.build_data(cfg)
            return pipeline.check_resumable(pipeline.build_task(cfg, datamodule), str(path))

        return path, read

    return make


def summary_kind(finished_run: Path) -> Callable[[Path], tuple[Path, Callable[[], Any]]]:
    def make(folder: Path) -> tuple[Path, Callable[[], Any]]:
        from attnlab.cli.resume_sweep import decide
        from attnlab.compare.runs import load_runs

        run = run_copy(finished_run, folder)
        return run / "summary.json", lambda: (load_runs([str(run)]), decide(run, False))

    return make


def config_kind(finished_run: Path) -> Callable[[Path], tuple[Path, Callable[[], Any]]]:
    def make(folder: Path) -> tuple[Path, Callable[[], Any]]:
        from attnlab.cli.checkpoints import load_run_config

        run = run_copy(finished_run, folder)
        return run / ".hydra" / "config.yaml", lambda: load_run_config(run, [])

    return make


KINDS = ["text", "gz", "tsv", "image", "checkpoint", "summary", "config"]


@pytest.fixture
def kinds(finished_run: Path) -> dict[str, Callable[[Path], tuple[Path, Callable[[], Any]]]]:
    return {"text": text_kind, "gz": gz_kind, "tsv": tsv_kind, "image": image_kind,
            "checkpoint": checkpoint_kind(finished_run), "summary": summary_kind(finished_run),
            "config": config_kind(finished_run)}  # fmt: skip


def judge(kind: str, make: Callable[[Path], tuple[Path, Callable[[], Any]]], tmp: Path,
          edits: list[tuple[str, int, int]] | None) -> None:  # fmt: skip
    """Damage the kind's file with ``edits`` (None: leave it intact) and read it back."""
    folder = tmp / f"{kind}_case"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    path, read = make(folder)
    if edits is not None:
        path.write_bytes(damaged(path.read_bytes(), edits))
    with time_limit(60):
        outcome, printed = captured(read)
    if isinstance(outcome, UserError):
        message = str(outcome)
        assert path.name in message or str(path.parent) in message, message
    else:
        assert not isinstance(outcome, BaseException), "".join(
            traceback.format_exception(outcome))  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_every_intact_file_kind_reads(kind: str, kinds: dict, tmp_path: Path) -> None:
    """The baseline of each target: the undamaged file gives a result, not an error."""
    folder = tmp_path / kind
    folder.mkdir()
    path, read = kinds[kind](folder)
    outcome, printed = captured(read)
    assert not isinstance(outcome, BaseException), printed[-2000:]


@pytest.mark.parametrize("kind", KINDS)
@DEFAULT
@given(data=st.data())
def test_a_damaged_file_is_named_in_one_error_or_read_correctly(
    kind: str, kinds: dict, tmp_path: Path, data: st.DataObject
) -> None:
    edits = data.draw(damage(4096))
    judge(kind, kinds[kind], tmp_path, edits)


# shrunk examples the fuzzer found, kept as regression cases: (kind, edits)
FOUND = [
    ("text", [("truncate", 1, 0)]),  # one byte left: the error named no file, said "< 0"
    ("tsv", [("truncate", 24, 0)]),  # one row: an empty validation split, RuntimeError
]


@pytest.mark.parametrize(("kind", "edits"), FOUND)
def test_files_the_fuzzer_found(kind: str, edits: list, kinds: dict, tmp_path: Path) -> None:
    judge(kind, kinds[kind], tmp_path, edits)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@MANY
@given(data=st.data())
def test_many_damaged_files(kind: str, kinds: dict, tmp_path: Path, data: st.DataObject) -> None:
    judge(kind, kinds[kind], tmp_path, data.draw(damage(4096)))
