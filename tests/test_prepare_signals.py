"""attnlab-prepare under real signals: Ctrl-C twice ends the run at once, the tokenizing
processes die with their parent, and the same command then finishes with the same bytes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_runs import finish, group_ends, run, start
from token_folders import shard_sums


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """The arguments, and the shards' checksums of an uninterrupted run."""
    from token_folders import signal_setting

    root = tmp_path_factory.mktemp("prepare_signals")
    args = signal_setting(root)
    done = run("prepare", *args, "--workers", "2", "--out", str(root / "whole"))
    assert done.returncode == 0, done.stderr[-2000:]
    return args, shard_sums(root / "whole")


def tokenizing(proc: subprocess.Popen, out: Path, timeout: float = 60) -> None:
    """Wait until the run has saved its first state (it is tokenizing then)."""
    deadline = time.monotonic() + timeout
    while not (out / ".prepare-state.json").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.01)


def test_ctrl_c_twice_ends_the_run_at_once_and_the_same_command_finishes(
    setting: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    args, whole = setting
    out = ["--workers", "2", "--out", str(tmp_path / "out")]
    proc = start("prepare", *args, *out, new_session=True)  # a terminal's process group
    try:
        tokenizing(proc, tmp_path / "out")
        time.sleep(0.3)
        for _ in range(2):  # Ctrl-C, Ctrl-C: the terminal signals every process of the group
            with contextlib.suppress(ProcessLookupError):  # the first may have ended it
                os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.05)
        done = finish(proc, timeout=15)
        assert group_ends(proc.pid), "a tokenizing process outlived the run"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 130 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("attnlab-prepare: stopped by SIGINT") and (
        "run the same command again to continue" in lines[0])
    rerun = run("prepare", *args, *out)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert shard_sums(tmp_path / "out") == whole


def test_the_tokenizing_processes_die_with_their_parent(
    setting: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    args, _ = setting
    proc = start("prepare", *args, "--workers", "2", "--out", str(tmp_path / "out"),
                 new_session=True)  # fmt: skip
    try:
        tokenizing(proc, tmp_path / "out")
        time.sleep(0.3)
        proc.kill()  # the parent alone, outright
        proc.wait(10)
        assert group_ends(proc.pid), "a tokenizing process outlived its parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_while_the_command_loads_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import sys

    from attnlab.cli import prepare_entry

    class CtrlCWhileLoading:  # an import finder: Ctrl-C comes as attnlab.prepare loads
        def find_spec(self, name: str, *args: object) -> None:
            if name == "attnlab.prepare":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "attnlab.prepare", raising=False)
    monkeypatch.setattr(sys, "meta_path", [CtrlCWhileLoading(), *sys.meta_path])
    assert prepare_entry.main(["in.txt", "--out", "x"]) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["attnlab-prepare: stopped by SIGINT before it began; nothing was written"]
