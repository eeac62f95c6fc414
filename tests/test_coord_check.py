"""attnlab-coordcheck's command line: every mistake is one ``error:`` line with exit code 2,
refused before any model trains; a disk that cannot take the results is one line too.

(What the check measures is tested with μP, in tests/test_mup.py.)
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from attnlab import coord_check
from disk_fault import DiskFault

QUICK = ["--widths", "32", "64", "--steps", "1", "--seeds", "1"]


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err, captured.err[-3000:]
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    def measure(check: object) -> None:
        raise AssertionError("measured before refusing")

    monkeypatch.setattr(coord_check, "measure", measure)


CASES = {
    "one_width_twice": (["--widths", "32", "32"], "two distinct widths"),
    "a_width_repeated": (["--widths", "32", "64", "32"], "--widths names 32 twice"),
    "a_negative_width": (["--widths", "-32", "64"], "--widths -32"),
    "not_a_width": (["--widths", "32", "abc"], "invalid int value: 'abc'"),
    "no_learning_rate": ([*QUICK, "--lr", "nan"], "--lr nan must be a positive number"),
    "another_architecture": ([*QUICK, "model.name=conv"], "model.name=conv"),
    "the_width_as_a_key": ([*QUICK, "model.d_model=abc"], "model.d_model is set by --widths"),
    "the_param_as_a_key": ([*QUICK, "model.param=sp"], "model.param is set by --param"),
    "a_wrong_type": ([*QUICK, "model.n_layers=abc"], "model.n_layers=abc must be an integer"),
    "a_wrong_bool": ([*QUICK, "model.embed_norm=abc"], "model.embed_norm=abc must be true or"),
    "an_unknown_key": ([*QUICK, "model.nosuch=1"], "model.nosuch is not a config key"),
    "a_table_too_short": ([*QUICK, "model.pos=learned", "model.max_len=10"],
                          "model.max_len=10 is shorter than the check's rows of 64"),
    "too_deep_for_memory": ([*QUICK, "model.n_layers=100000000000"], "G parameters"),
    "unreadable_value": ([*QUICK, "model.norm=[1"], "model.norm=[1 cannot be read"),
    "a_key_twice": ([*QUICK, "model.norm=post", "model.norm=pre"], "model.norm is given twice"),
    "not_a_model_key": (["norm=post", *QUICK], "norm=post: expected model.KEY=VALUE"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_command_line_is_one_error_line_before_any_measuring(
    case: str, capsys: pytest.CaptureFixture[str], no_measuring: None, tmp_path: Path
) -> None:
    argv, named = CASES[case]
    assert coord_check.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert named in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_text_shorter_than_a_row_is_one_error_line(
    capsys: pytest.CaptureFixture[str], no_measuring: None, tmp_path: Path
) -> None:
    short = tmp_path / "short.txt"
    short.write_text("to be or not to be")
    assert coord_check.main([*QUICK, "--text", str(short), "--out", str(tmp_path / "out")]) == 2
    assert "has 18 characters; the check reads rows of 65" in one_error_line(capsys)


def test_a_read_only_out_folder_is_refused_before_measuring(
    capsys: pytest.CaptureFixture[str], no_measuring: None, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    DiskFault(tmp_path, errno.EROFS, at=0).install(monkeypatch)
    assert coord_check.main([*QUICK, "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "Read-only file system" in line and str(tmp_path / "out") in line
    assert not (tmp_path / "out").exists()  # the folder it made to try is gone


def test_a_full_disk_when_the_results_are_written_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    DiskFault(tmp_path, errno.ENOSPC, at=1).install(monkeypatch)  # the results, not the probe
    assert coord_check.main([*QUICK, "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "No space left on device" in line and "choose a writable --out folder" in line


def test_overrides_may_follow_the_widths(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:  # fmt: skip
    argv = [*QUICK[3:], "--param", "mup", "--widths", "32", "64", "model.norm=post",
            "--out", str(tmp_path)]  # fmt: skip
    assert coord_check.main(argv) == 0
    assert "| mup |" in capsys.readouterr().out
    assert (tmp_path / "coord_check.json").is_file()
