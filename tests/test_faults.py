"""Faults during a run: Ctrl-C and preemption signals, a second run into a busy or finished
directory, a diverged run's exit code, a full or unwritable disk, file permissions."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from attnlab import train as attnlab_train
from attnlab.errors import ConfigError
from cli_runs import TINY, finish, start, summary
from composed_runs import TINY_MODEL

ONE_EPOCH = [
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "data.batch_size=8",
    "data=majority",
    "data.train_size=16",
    "data.val_size=8",
    "data.test_size=8",
]


def train_code(args: list[str]) -> int:
    try:
        return attnlab_train.main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def error_lines(capfd: pytest.CaptureFixture[str]) -> list[str]:
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]
    return [line for line in err.splitlines() if line.startswith("error:")]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")
            if p.is_file() and p.name != ".attnlab.lock"}  # fmt: skip


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    assert train_code([*TINY_MODEL, *ONE_EPOCH, f"hydra.run.dir={run_dir}"]) == 0
    return run_dir


def test_a_new_run_into_a_finished_run_directory_is_refused_and_changes_nothing(
    finished: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(finished)
    capfd.readouterr()
    assert train_code([*TINY_MODEL, *ONE_EPOCH, "seed=3", f"hydra.run.dir={finished}"]) == 2
    (line,) = error_lines(capfd)
    assert "already holds a run" in line and "ckpt_path=last" in line and "overwrite=true" in line
    assert snapshot(finished) == before


def test_overwrite_true_replaces_a_finished_run(finished: Path) -> None:
    args = [*TINY_MODEL, *ONE_EPOCH, "seed=3", "overwrite=true", f"hydra.run.dir={finished}"]
    assert train_code(args) == 0
    assert summary(finished)["config"]["seed"] == 3
    assert len(list((finished / "checkpoints").glob("best*"))) == 1


def test_a_sweep_into_a_sweep_directory_with_results_is_refused(
    finished: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "summary.json").write_text('{"status": "completed"}')
    capfd.readouterr()
    code = train_code(["-m", *TINY_MODEL, *ONE_EPOCH, "seed=1,2", f"hydra.sweep.dir={sweep}"])
    assert code == 2
    assert "hydra.sweep.dir" in error_lines(capfd)[0]
    assert json.loads((sweep / "0" / "summary.json").read_text()) == {"status": "completed"}


def test_a_diverged_single_run_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.tasks.base import Task

    real_loss = Task.loss
    monkeypatch.setattr(Task, "loss", lambda self, *a, **k: real_loss(self, *a, **k) * float("nan"))
    run_dir = tmp_path / "run"
    assert train_code([*TINY_MODEL, *ONE_EPOCH, f"hydra.run.dir={run_dir}"]) == 1
    assert summary(run_dir)["status"] == "diverged"


def test_an_unwritable_log_dir_is_refused_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert train_code([*TINY, f"paths.log_dir={blocker / 'logs'}"]) == 2
    (line,) = error_lines(capfd)
    assert "paths.log_dir" in line and "not a writable directory" in line


def test_a_full_disk_while_checkpointing_ends_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.callbacks import resume

    def no_space(obj: object, f: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x.ckpt"))

    monkeypatch.setattr(resume.torch, "save", no_space)
    run_dir = tmp_path / "run"
    assert train_code([*TINY_MODEL, *ONE_EPOCH, f"hydra.run.dir={run_dir}"]) == 2
    (line,) = error_lines(capfd)
    assert "No space left on device" in line and "ckpt_path=last" in line
    assert summary(run_dir)["status"] == "failed"


def test_checkpoints_and_run_files_respect_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run_dir = tmp_path / "run"
        assert train_code([*TINY_MODEL, *ONE_EPOCH, f"hydra.run.dir={run_dir}"]) == 0
    finally:
        os.umask(old)
    for path in [*run_dir.glob("checkpoints/*.ckpt"), run_dir / "summary.json"]:
        assert path.stat().st_mode & 0o777 == 0o644, path


LONG = [*TINY_MODEL, "trainer.max_steps=100000", "trainer.max_epochs=-1",
        "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1",
        "+logger.csv.flush_logs_every_n_steps=1", "data=majority", "data.train_size=64",
        "data.batch_size=8", "test=false"]  # fmt: skip


def wait_for_steps(run_dir: Path, proc: object, timeout: float = 120) -> None:
    metrics = run_dir / "metrics.csv"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, finish(proc).stderr[-3000:]  # type: ignore[attr-defined]
        if metrics.is_file() and len(metrics.read_text().splitlines()) > 3:
            return
        time.sleep(0.2)
    raise AssertionError("training did not start")


@pytest.mark.parametrize(("signum", "status", "code"), [
    (signal.SIGINT, "interrupted", 130), (signal.SIGUSR1, "preempted", 143),
    (signal.SIGTERM, "preempted", 143),  # SLURM's and torchrun's stop, Lightning's own handler
])  # fmt: skip
def test_a_signal_stops_at_a_step_with_a_usable_last_checkpoint_and_a_second_run_is_refused(
    signum: int, status: str, code: int, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    proc = start("train", *LONG, f"hydra.run.dir={run_dir}")
    try:
        wait_for_steps(run_dir, proc)
        capfd.readouterr()
        assert train_code([*LONG, f"hydra.run.dir={run_dir}"]) == 2  # a second run, meanwhile
        (line,) = error_lines(capfd)
        assert "is being written by another run" in line and str(proc.pid) in line
        proc.send_signal(signum)
        result = finish(proc, timeout=120)
    finally:
        proc.kill()
    assert result.returncode == code, result.stderr[-3000:]
    record = summary(run_dir)
    assert record["status"] == status and "ckpt_path=last" in record["error"]
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    step = checkpoint["global_step"]
    assert step == record["stopped_at_step"] > 0
    resumed = [a for a in LONG if not a.startswith("trainer.max_steps")]
    args = [*resumed, f"trainer.max_steps={step + 2}", "ckpt_path=last", f"hydra.run.dir={run_dir}"]
    assert train_code(args) == 0
    assert summary(run_dir)["status"] == "completed"
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)[
        "global_step"] == step + 2  # fmt: skip


@pytest.mark.parametrize("stopped", ["killed", "by a signal in set-up"])
def test_ckpt_path_last_into_a_run_stopped_before_its_first_checkpoint_starts_it_anew(
    finished: Path, capfd: pytest.CaptureFixture[str], stopped: str
) -> None:
    """A job killed (or requeued) before it wrote a checkpoint: the cluster's resume command
    (``ckpt_path=last``) trains from the first step instead of being refused. A signal in
    set-up leaves the summary of a stopped run, which the new run replaces."""
    import json
    import shutil

    shutil.rmtree(finished / "checkpoints")
    if stopped == "killed":
        (finished / "summary.json").unlink()
    else:
        record = json.loads((finished / "summary.json").read_text())
        record["status"] = "interrupted"
        (finished / "summary.json").write_text(json.dumps(record))
    capfd.readouterr()
    assert train_code([*TINY_MODEL, *ONE_EPOCH, "ckpt_path=last",
                       f"hydra.run.dir={finished}"]) == 0  # fmt: skip
    assert "has no checkpoint yet; training from the first step" in capfd.readouterr().err
    assert summary(finished)["status"] == "completed"


def test_a_cluster_handler_is_called_after_the_checkpoint_so_the_requeued_job_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submitit installs a SIGUSR2 handler that requeues the job and exits; it must run
    only once last.ckpt holds the step the signal arrived at."""
    from attnlab.tasks.classification import ClassificationTask as Task

    run_dir, seen = tmp_path / "run", {}

    def requeue(signum: int, frame: object) -> None:  # what submitit's handler does
        last = run_dir / "checkpoints" / "last.ckpt"
        seen["step"] = torch.load(last, weights_only=True)["global_step"]
        raise SystemExit(-1)

    real_step = Task.training_step

    def signal_at_step_2(self, batch, batch_idx):  # noqa: ANN001, ANN202
        if self.global_step == 2 and "sent" not in seen:
            seen["sent"] = True
            os.kill(os.getpid(), signal.SIGUSR2)
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(Task, "training_step", signal_at_step_2)
    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        assert train_code([*TINY_MODEL, *ONE_EPOCH, "trainer.max_epochs=3",
                           f"hydra.run.dir={run_dir}"]) == -1  # fmt: skip
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert seen["step"] == 3  # the step during which the signal came, completed and saved
    record = summary(run_dir)
    assert record["status"] == "preempted" and "requeued" in record["error"]


@pytest.mark.parametrize(("signum", "status", "code"), [
    (signal.SIGTERM, "preempted", 143), (signal.SIGINT, "interrupted", 130),
])  # fmt: skip
def test_a_signal_while_the_run_sets_up_ends_it_at_once_with_its_status(
    signum: int, status: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set-up (tokenizer training, caching, building) has no step to finish: a scheduler's
    signal there ends the run at once, and summary.json says how."""
    from attnlab.cli import pipeline

    run_dir, built = tmp_path / "run", []
    real_build = pipeline.build_data

    def signalled_while_building(cfg):  # noqa: ANN001, ANN202
        os.kill(os.getpid(), signum)  # arrives during the build, before any training step
        built.append("went on")  # the handler raises before this line
        return real_build(cfg)

    monkeypatch.setattr(pipeline, "build_data", signalled_while_building)
    assert train_code([*TINY_MODEL, *ONE_EPOCH, f"hydra.run.dir={run_dir}"]) == code
    assert built == []
    record = summary(run_dir)
    assert record["status"] == status and "ckpt_path=last" in record["error"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers were put back


def test_a_signal_during_set_up_is_handed_to_the_cluster_handler_after_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.cli import pipeline

    run_dir, seen = tmp_path / "run", {}

    def requeue(signum: int, frame: object) -> None:  # what submitit's handler does
        seen["status"] = summary(run_dir)["status"]
        raise SystemExit(-1)

    real_build = pipeline.build_data
    monkeypatch.setattr(pipeline, "build_data", lambda cfg: (
        os.kill(os.getpid(), signal.SIGUSR2), real_build(cfg))[1])  # fmt: skip
    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        assert train_code([*TINY_MODEL, *ONE_EPOCH, f"hydra.run.dir={run_dir}"]) == -1
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert seen["status"] == "preempted"


def test_a_second_signal_mid_step_stops_at_once_keeping_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step longer than the cluster's grace period is not waited for: the second signal
    ends the run where it stands; the checkpoint of the last validation stays as it was."""
    from attnlab.tasks.classification import ClassificationTask as Task

    run_dir, sent = tmp_path / "run", []
    real_step = Task.training_step

    def two_signals_at_step_3(self, batch, batch_idx):  # noqa: ANN001, ANN202
        if self.global_step == 3 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)  # recorded: stop at the end of this step
            os.kill(os.getpid(), signal.SIGTERM)  # the second: at once
        return real_step(self, batch, batch_idx)

    monkeypatch.setattr(Task, "training_step", two_signals_at_step_3)
    args = [*TINY_MODEL, *ONE_EPOCH, "trainer.max_epochs=3", f"hydra.run.dir={run_dir}"]
    assert train_code(args) == 143
    record = summary(run_dir)
    assert record["status"] == "preempted" and "second signal" in record["error"]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2  # the end of epoch 1's validation, not step 3 half-done


def test_a_signal_stops_without_validating_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning validates once more when a run stops early; a translation's BLEU decoding
    can take minutes that a preempted job does not have."""
    from attnlab.tasks.classification import ClassificationTask as Task

    run_dir, validated = tmp_path / "run", []
    real_step, real_val = Task.training_step, Task.validation_step

    def signal_at_step_3(self, batch, batch_idx):  # noqa: ANN001, ANN202
        if self.global_step == 3 and not validated.count("signal"):
            validated.append("signal")
            os.kill(os.getpid(), signal.SIGUSR1)
        return real_step(self, batch, batch_idx)

    def counted(self, batch, batch_idx):  # noqa: ANN001, ANN202
        validated.append(self.global_step)
        return real_val(self, batch, batch_idx)

    monkeypatch.setattr(Task, "training_step", signal_at_step_3)
    monkeypatch.setattr(Task, "validation_step", counted)
    args = [*TINY_MODEL, *ONE_EPOCH, "trainer.max_epochs=3", f"hydra.run.dir={run_dir}"]
    assert train_code(args) == 143
    assert summary(run_dir)["stopped_at_step"] == 4
    assert validated == [2, "signal"]  # epoch 1's validation only


@pytest.mark.parametrize("name", ["ENOLCK", "ENOSYS", "EOPNOTSUPP"])
def test_a_file_system_without_locks_runs_with_a_warning_not_a_refusal(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """flock's 'no locks here' (Lustre without flock, NFS without a lock daemon) is not
    'locked by another run'."""
    import fcntl

    from attnlab.cli.rundir import LOCK_FILE, claim, release_all

    code = getattr(errno, name)

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    try:
        claim(tmp_path / "run", resuming=False, overwrite=False, what="hydra.run.dir")
    finally:
        release_all()
    warning = capsys.readouterr().err
    assert warning.startswith("warning: hydra.run.dir=") and "without file locks" in warning
    assert errno.errorcode[code] in warning  # EOPNOTSUPP is ENOTSUP on Linux
    assert (tmp_path / "run" / LOCK_FILE).read_text() == str(os.getpid())


def test_a_directory_locked_by_another_process_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    from attnlab.cli.rundir import LOCK_FILE, claim

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).write_text("4242")

    def locked(fd: int, operation: int) -> None:
        raise BlockingIOError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK))

    monkeypatch.setattr(fcntl, "flock", locked)
    with pytest.raises(ConfigError, match="is being written by another run \\(pid 4242\\)"):
        claim(tmp_path / "run", resuming=False, overwrite=False, what="hydra.run.dir")


def test_a_fit_that_fails_before_its_first_step_leaves_the_signal_handlers_as_they_were(
    tmp_path: Path,
) -> None:
    """Lightning refuses this interval once its fit counts the batches, after it recorded
    the run's own handlers to re-install when it ends: those of before the run come back."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    args = [*TINY_MODEL, *ONE_EPOCH, "optim.decay_steps=10", "trainer.val_check_interval=50",
            f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    assert train_code(args) == 2
    assert {signum: signal.getsignal(signum) for signum in before} == before
