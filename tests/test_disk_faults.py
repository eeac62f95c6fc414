"""A full or read-only disk at any write of a run: one ``error:`` line naming the path, exit
code 2, no traceback, and what the run directory held before is still usable.

Faults are injected in this process: every open for writing below the run directory is
counted, and from the ``at``-th on it fails — read-only (``EROFS``, at the open) or full
(``ENOSPC``: the open succeeds, and every write or flush through it fails, as on a real
full disk, with no file name in the error: the file object is ``/dev/full``'s). The
points swept are the writes of a fresh run and of a resume (``ckpt_path=last``): the
lock, Hydra's ``.hydra/*.yaml``, ``train.log``, the tokenizer, ``metrics.csv``,
checkpoints, ``summary.json``.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
import torch

from attnlab import train as attnlab_train
from attnlab.cli.rundir import release_all
from composed_runs import TINY_MODEL
from disk_fault import DiskFault

RUN = [*TINY_MODEL, "trainer.enable_progress_bar=false", "data=majority", "data.train_size=16",
       "data.val_size=8", "data.test_size=8", "data.batch_size=8",
       "trainer.max_epochs=1"]  # fmt: skip
RESUME = ["trainer.max_epochs=2", "ckpt_path=last"]
def train_code(args: list[str]) -> int:
    try:
        return attnlab_train.main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        release_all()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed one-epoch run, to resume from."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    assert train_code([*RUN, f"hydra.run.dir={run_dir}"]) == 0
    return run_dir


def test_the_swept_points_are_writes_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault points above fall on real writes: the lock, Hydra's config, train.log,
    metrics.csv, a checkpoint and summary.json are all among them."""
    names = {Path(p).name for p in write_points(tmp_path / "run", RUN, monkeypatch)}
    assert {".attnlab.lock", "config.yaml", "train.log", "metrics.csv", "summary.json.tmp"} <= names
    assert any(n.endswith(".tmp") and ".ckpt" in n for n in names), names


def write_points(run_dir: Path, args: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The opens for writing that a fault-free run with ``args`` makes below ``run_dir``."""
    counter = DiskFault(run_dir, errno.ENOSPC, at=None)
    with monkeypatch.context() as patch:
        counter.install(patch)
        assert train_code([*args, f"hydra.run.dir={run_dir}"]) == 0
    return counter.paths


def usable(run_dir: Path, before: dict[str, bytes]) -> None:
    """Every checkpoint and summary.json the directory held is still there and loads."""
    for name in before:
        path = run_dir / name
        assert path.is_file(), f"{name} was lost"
        if name.endswith(".ckpt"):
            torch.load(path, weights_only=True)
        if name == "summary.json":
            json.loads(path.read_text())


def one_disk_line(capfd: pytest.CaptureFixture[str], run_dir: Path) -> str:
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    line = errors[0]
    assert ("No space left on device" in line or "Read-only file system" in line), line
    assert str(run_dir) in line, line  # names the path that could not be written
    return line


def check_fault(run_dir: Path, args: list[str], code: int, at: int, monkeypatch: pytest.MonkeyPatch,
                capfd: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    before = {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*")
              if p.is_file() and (p.suffix == ".ckpt" or p.name == "summary.json")}  # fmt: skip
    fault = DiskFault(run_dir, code, at)
    capfd.readouterr()
    with monkeypatch.context() as patch:
        fault.install(patch)
        exit_code = train_code([*args, f"hydra.run.dir={run_dir}"])
    assert exit_code == 2, (fault.paths, capfd.readouterr().err[-3000:])
    one_disk_line(capfd, run_dir)
    usable(run_dir, before)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
@pytest.mark.parametrize("at", [2, 3, 6, 8, 12, 15])  # lock, Hydra, log, CSV, ckpt, summary
def test_a_full_or_read_only_disk_when_a_resume_starts_ends_in_one_line(
    at: int, code: int, finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    check_fault(run_dir, [*RUN, *RESUME], code, at, monkeypatch, capfd)
    assert train_code([*RUN, *RESUME, f"hydra.run.dir={run_dir}"]) == 0  # continues afterwards


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
@pytest.mark.parametrize("at", [0, 7, 9, 11])  # the directory, tokenizer, CSV, ckpt
def test_a_full_or_read_only_disk_during_a_fresh_run_ends_in_one_line(
    at: int, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    check_fault(tmp_path / "run", RUN, code, at, monkeypatch, capfd)


@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
def test_every_write_point_of_a_run_and_a_resume_fails_in_one_line(
    code: int, finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    fresh = write_points(tmp_path / "count_fresh", RUN, monkeypatch)
    copy = tmp_path / "count_resume"
    shutil.copytree(finished, copy)
    resumed = write_points(copy, [*RUN, *RESUME], monkeypatch)
    print(f"write points: {len(fresh)} fresh, {len(resumed)} resumed")
    for at in range(len(fresh)):
        check_fault(tmp_path / f"fresh{at}", RUN, code, at, monkeypatch, capfd)
    for at in range(len(resumed)):
        run_dir = tmp_path / f"resume{at}"
        shutil.copytree(finished, run_dir)
        check_fault(run_dir, [*RUN, *RESUME], code, at, monkeypatch, capfd)
