"""Fuzzing the command lines of attnlab-export, attnlab-coordcheck and attnlab-compare --fit:
any arguments give exit code 0, or 2 with exactly one ``error:`` line — never a traceback,
never a hang — and nothing already on disk is lost.

Each command runs in this process through its ``main``, on tiny inputs built once per
module: a trained language-model run and a seq2seq run (export), a synthetic size sweep
(compare). The default suite runs a few fixed examples of each; ``-m slow`` draws a few
hundred.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from attnlab import coord_check
from attnlab import export as attnlab_export
from attnlab.compare import cli as compare_cli
from attnlab.model_config import every_key
from fuzzing import FEW, SOME, one_line_or_success, train_tiny, values_for, with_faults
from test_compare_scaling import synthetic, write_run
from test_fuzz_files import damage, damaged

TEXT = "".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(40))
LM = ["model=decoder_only", "model.pos=learned", "model.max_len=64", "data=text",
      "data.block_size=16", "data.eval_blocks=2"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz_runs")
    (root / "text.txt").write_text(TEXT)
    lm = [*LM, f"data.path={root / 'text.txt'}", f"data.cache_dir={root / 'cache'}"]
    reverse = ["data=reverse", "data.train_size=16", "data.val_size=8", "data.test_size=8"]
    return {"lm": train_tiny(root / "lm", lm), "seq2seq": train_tiny(root / "seq2seq", reverse)}


@contextlib.contextmanager
def fresh_folder() -> Iterator[Path]:
    """A folder of its own for each example (Hypothesis calls a test many times per
    fixture)."""
    folder = Path(tempfile.mkdtemp(prefix="fuzz_cmd_"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -- attnlab-export ----------------------------------------------------------------------
def export_folder(runs: dict[str, Path], tmp: Path, first: str) -> Path:
    """``tmp`` with copies of the runs (an export may write into its run): ``run`` (the run
    named ``first``) and ``other``; a file, a taken folder and an empty one."""
    shutil.copytree(runs[first], tmp / "run")
    shutil.copytree(runs["seq2seq" if first == "lm" else "lm"], tmp / "other")
    (tmp / "file.txt").write_text("not a run")
    (tmp / "taken").mkdir()
    (tmp / "taken" / "keep.txt").write_text("mine")
    (tmp / "empty").mkdir()
    return tmp


def export_argv(data: st.DataObject, runs: dict[str, Path], tmp: Path) -> list[str]:
    """A copy of a run, a checkpoint, a format, an out folder; up to two of them missing or
    wrong (another path, another run's or a damaged checkpoint, a taken folder), and maybe
    a stray argument."""
    export_folder(runs, tmp, data.draw(st.sampled_from(["lm", "seq2seq"]), label="run"))
    run, other = tmp / "run", tmp / "other"
    last = run / "checkpoints" / "last.ckpt"
    damaged_ckpt = tmp / "damaged.ckpt"
    damaged_ckpt.write_bytes(damaged(last.read_bytes(), data.draw(damage(4096))))
    parts = data.draw(with_faults({
        "run_dir": ([run], [tmp / "nowhere", tmp / "file.txt", tmp / "taken", other, None]),
        "ckpt_path": ([None, last], [damaged_ckpt, other / "checkpoints" / "last.ckpt",
                                     tmp / "file.txt", tmp / "nowhere.ckpt"]),
        "format": (["hf", "native"], ["onnx", "", None]),
        "out": ([tmp / "out", tmp / "empty", None], [tmp / "taken", tmp / "file.txt",
                                                     tmp / "file.txt" / "out"]),
    }))  # fmt: skip
    argv = [f"{key}={value}" for key, value in parts.items() if value is not None]
    stray = ["model.pos=rope", "split=val", "+x=1", "novalue", "=x", "format=hf"]
    return argv + data.draw(st.lists(st.sampled_from(stray), max_size=1), label="stray")


def judge_export(argv: list[str], tmp: Path) -> int:
    kept = [tmp / "taken", tmp / "run" / "checkpoints", tmp / "other" / "checkpoints"]
    before = [snapshot(folder) for folder in kept]
    code, _ = one_line_or_success(attnlab_export.main, argv)
    assert [snapshot(folder) for folder in kept] == before
    assert not list(tmp.rglob(".*.partial-*"))  # no staging folder is left behind
    exported = [p.parent for p in tmp.rglob("model.safetensors")]
    assert len(exported) == (1 if code == 0 else 0), exported
    assert code != 0 or (exported[0] / "README.md").is_file()
    return code


@FEW
@given(data=st.data())
def test_any_export_command_line_is_exported_or_refused_in_one_line(
    runs: dict[str, Path], data: st.DataObject
) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge_export(export_argv(data, runs, tmp), tmp)}")


# shrunk examples the fuzzer found, kept as regression cases ({tmp}: the example's folder)
FOUND_EXPORT = [
    # out under a file: NotADirectoryError from the staging folder's mkdir, a traceback
    ["run_dir={tmp}/run", "format=hf", "out={tmp}/file.txt/out"],
]


@pytest.mark.parametrize("template", FOUND_EXPORT)
def test_export_command_lines_the_fuzzer_found(runs: dict[str, Path], template: list[str]) -> None:
    with fresh_folder() as tmp:
        export_folder(runs, tmp, "lm")
        judge_export([a.format(tmp=tmp) for a in template], tmp)


@pytest.mark.slow
@SOME
@given(data=st.data())
def test_many_export_command_lines(runs: dict[str, Path], data: st.DataObject) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge_export(export_argv(data, runs, tmp), tmp)}")


# -- attnlab-coordcheck ------------------------------------------------------------------
# small sizes or absurd ones: both decide in seconds (a valid large model only takes long)
SIZES = st.one_of(st.integers(-3, 300), st.integers(10**11, 10**12), st.integers(-(10**12), -1))
MODEL_KEYS = sorted(every_key()) + ["nosuch", ""]


@st.composite
def coordcheck_argv(draw: st.DrawFn, tmp: Path) -> list[str]:
    """Small widths, few steps and seeds (a valid command measures in about a second); up
    to two options wrong, and up to two model.* settings of any value."""
    (tmp / "file").write_text("a file")
    text = tmp / "text.txt"
    text.write_text(draw(st.text(max_size=200)) + TEXT, encoding="utf-8")
    short = tmp / "short.txt"
    short.write_text(draw(st.text(max_size=60)), encoding="utf-8")
    parts = draw(with_faults({
        "--widths": ([["8", "16"], ["16", "32"], ["32", "8", "24"]],
                     [[], ["16"], ["16", "16"], ["-8", "16"], ["0", "16"], ["30", "16"],
                      ["x", "16"]]),
        "--steps": ([[], ["1"], ["2"]], [["-1"], ["0"], ["x"]]),
        "--seeds": ([["1"]], [["0"], ["x"]]),
        "--lr": ([[], ["0.01"], ["1e3"]], [["-1"], ["0"], ["nan"], ["inf"], ["x"]]),
        "--param": ([[], ["sp"], ["mup"], ["sp", "mup"]], [["sp", "sp"], ["x"]]),
        "--text": ([[], [str(text)]], [[str(short)], [str(tmp / "missing")], [str(tmp)]]),
        "--out": ([[str(tmp / "out")]], [[str(tmp / "file")], [str(tmp / "file" / "x")]]),
    }))  # fmt: skip
    argv = [a for option, values in parts.items()
            for a in ([option, *values] if values or option == "--widths" else [])]  # fmt: skip
    for key in draw(st.lists(st.sampled_from(MODEL_KEYS), max_size=2, unique=True)):
        argv.append(f"model.{key}={draw(values_for(f'model.{key}', SIZES))}")
    return argv


def judge_coordcheck(argv: list[str], tmp: Path) -> int:
    code, _ = one_line_or_success(coord_check.main, argv, seconds=180)
    assert (tmp / "file").read_text() == "a file"
    if code == 0:
        out = Path(argv[argv.index("--out") + 1])
        assert {p.name for p in out.iterdir()} >= {"coord_check.json", "coord_check.png"}
    return code


@FEW
@given(data=st.data())
def test_any_coordcheck_command_line_measures_or_is_refused_in_one_line(
    data: st.DataObject,
) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge_coordcheck(data.draw(coordcheck_argv(tmp)), tmp)}")


# shrunk examples the fuzzer found, kept as regression cases ({tmp}: the example's folder)
FOUND_COORDCHECK = [
    # μP's base model at width 10^11 was allocated: the allocator's RuntimeError
    ["--widths", "8", "16", "--seeds", "1", "--out", "{tmp}/out",
     "model.mup_base_width=100000000000"],
]


@pytest.mark.parametrize("template", FOUND_COORDCHECK)
def test_coordcheck_command_lines_the_fuzzer_found(template: list[str]) -> None:
    with fresh_folder() as tmp:
        (tmp / "file").write_text("a file")
        judge_coordcheck([a.format(tmp=tmp) for a in template], tmp)


@pytest.mark.slow
@SOME
@given(data=st.data())
def test_many_coordcheck_command_lines(data: st.DataObject) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge_coordcheck(data.draw(coordcheck_argv(tmp)), tmp)}")


# -- attnlab-compare --fit ---------------------------------------------------------------
@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two variants × four sizes × one seed, with curves against FLOPs (a frontier fits);
    beside them, ``odd/``: one size only, and a run without a parameter count."""
    root = synthetic(tmp_path_factory.mktemp("fuzz_sweep") / "sweep", seeds=1, shift_b=2.0)
    write_run(root.parent / "odd", "only", "a", 1, 0)
    write_run(root.parent / "odd", "no_params", "b", 2, 0)
    summary = root.parent / "odd" / "no_params" / "summary.json"
    summary.write_text(summary.read_text().replace('"params"', '"not_params"'))
    return root


@st.composite
def compare_argv(draw: st.DrawFn, sweep: Path, tmp: Path) -> list[str]:
    """A frontier or N-D fit of the sweep grouped by variant, a multiplier, a plot; up to
    two parts wrong (another folder, options that do not combine, values out of range)."""
    (tmp / "dir").mkdir(exist_ok=True)
    odd = sweep.parent / "odd"
    parts = draw(with_faults({
        "paths": ([[sweep]], [[sweep / "a_0_0"], [odd], [sweep, odd], [tmp / "dir"],
                              [tmp / "none"]]),
        "--fit": ([["--fit"], ["--fit", "frontier"]], [["--fit", "nd"], ["--fit", "x"], []]),
        "--by": ([["--by", "model.ffn"]], [[], ["--by", "seed"], ["--by", "nosuch"]]),
        "--metric": ([[], ["--metric", "val/loss"]], [["--metric", "test/loss"],
                                                      ["--metric", "nosuch"]]),
        "--multiplier": ([[], ["--multiplier", "a", "b"], ["--multiplier", "b", "a"]],
                         [["--multiplier", "a", "a"], ["--multiplier", "a", "nosuch"],
                          ["--multiplier", "model.ffn", "a"], ["--multiplier", "a"]]),
        "--target-loss": ([[], ["--target-loss", "1.9"]],
                          [["--target-loss", x] for x in ("0.5", "-1", "nan", "inf", "x")]),
        "--at": ([[]], [["--at", "flops=1e12"], ["--at", "tokens=-1"], ["--at", "x"]]),
        "--select": ([[], ["--select", "final"]], [["--select", "best"], ["--select", "x"]]),
        "--plot": ([[], ["--plot", str(tmp / "fit.png")]],
                   [["--plot", str(tmp / "dir")], ["--plot", str(tmp / "fit.xyz")],
                    ["--plot", str(tmp / "none" / "fit.png")]]),
        "--format": ([[], ["--format", "csv"], ["--format", "json"], ["--format", "latex"]],
                     [["--format", "x"]]),
    }))  # fmt: skip
    return [str(a) for values in parts.values() for a in values]


def judge_compare(argv: list[str], sweep: Path) -> int:
    before = snapshot(sweep.parent)
    code, _ = one_line_or_success(compare_cli.main, argv)
    assert snapshot(sweep.parent) == before
    return code


@settings(FEW, max_examples=2)  # a fit bootstraps for seconds
@given(data=st.data())
def test_any_compare_fit_command_line_fits_or_is_refused_in_one_line(
    sweep: Path, data: st.DataObject
) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge_compare(data.draw(compare_argv(sweep, tmp)), sweep)}")


# shrunk examples the fuzzer found, kept as regression cases ({sweep}: the sweep's folder)
FOUND_COMPARE = [
    # an infinite target loss needs no compute from either group: ZeroDivisionError
    ["{sweep}", "--fit", "--by", "model.ffn", "--multiplier", "a", "b", "--target-loss", "inf"],
]


@pytest.mark.parametrize("template", FOUND_COMPARE)
def test_compare_command_lines_the_fuzzer_found(sweep: Path, template: list[str]) -> None:
    assert judge_compare([a.format(sweep=sweep) for a in template], sweep) == 2


@pytest.mark.slow
@SOME
@given(data=st.data())
def test_many_compare_fit_command_lines(sweep: Path, data: st.DataObject) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge_compare(data.draw(compare_argv(sweep, tmp)), sweep)}")
