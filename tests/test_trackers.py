"""MLflow and TensorBoard runs read back with each tool's own reader: the run named by the
overrides that vary, the flat config as params, the metrics' histories, the status."""

from __future__ import annotations

import csv
import os
import socket
import time
from pathlib import Path

import pytest

from attnlab.errors import ConfigError
from cli_runs import TINY, compose_run, only_dir, run

mlflow = pytest.importorskip("mlflow", reason="logger=mlflow needs the mlflow extra")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("trackers")
    result = run("train", "-m", *TINY, "data=majority", "model=decoder_only",
                 "logger=[csv,tensorboard,mlflow]", "model.norm=pre,post",
                 "trainer.log_every_n_steps=1", f"paths.log_dir={logs}",
                 "tags=[tiny]", MLFLOW_TRACKING_URI="")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return logs


def _jobs(logs: Path) -> list[Path]:
    sweep_dir = only_dir(logs / "train" / "multiruns")
    return sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").is_file())


def _csv_series(job: Path, metric: str) -> list[tuple[int, float]]:
    with (job / "metrics.csv").open() as handle:
        return [(int(r["step"]), float(r[metric])) for r in csv.DictReader(handle) if r[metric]]


def _same(logged: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    steps, values = zip(*logged, strict=True) if logged else ((), ())
    return (bool(logged) and list(steps) == [s for s, _ in expected]
            and list(values) == pytest.approx([v for _, v in expected], rel=1e-6))  # fmt: skip


def test_an_mlflow_run_reads_back_with_mlflows_client(sweep: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{sweep / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("train")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"model.norm=pre", "model.norm=post"}
    for job in _jobs(sweep):
        run_id = (job / "mlflow_id.txt").read_text().strip()
        found = client.get_run(run_id)
        norm = found.data.params["model.norm"]
        assert found.info.run_name == f"model.norm={norm}" and found.info.status == "FINISHED"
        assert found.data.params["data.batch_size"] == "32"  # the config beyond the model's
        assert int(found.data.params["params"]) > 0
        tags = found.data.tags
        assert tags["status"] == "completed" and tags["group"] == f"model.norm={norm}"
        assert tags["run_dir"] == str(job) and tags["tag.tiny"] == "true"
        assert "model.norm=" in tags["command"] and tags["command"].startswith("attnlab-train")
        history = [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")]
        assert _same(history, _csv_series(job, "train/loss")), history
        assert "val/loss" in found.data.metrics


def test_a_tensorboard_run_reads_back_with_tensorboards_reader(sweep: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for job in _jobs(sweep):
        events = EventAccumulator(str(job / "tensorboard"))
        events.Reload()
        assert "val/loss" in events.Tags()["scalars"]
        logged = [(e.step, e.value) for e in events.Scalars("train/loss")]
        assert _same(logged, _csv_series(job, "train/loss")), logged


def test_the_mlflow_store_defaults_to_the_given_uri_then_the_log_dirs_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.cli.mlflow_setup import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = compose_run([*TINY, "logger=mlflow", f"paths.log_dir={tmp_path}"], tmp_path)
    assert tracking_uri(cfg, "sqlite:///x.db") == "sqlite:///x.db"
    assert tracking_uri(cfg, None) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


STORE_CASES = {  # tracking_uri (TMP: the test's folder) -> what the error line says
    "no_server": ("http://127.0.0.1:9", "no MLflow server answered there"),
    "unknown_scheme": ("foo://bar", "MLflow has no store for scheme 'foo'"),
    "not_a_database": ("sqlite:///TMP/notes.txt", "(file is not a database)"),
    "folder": ("TMP/mlruns", "is a folder, which MLflow refuses as a store unless "
                             "MLFLOW_ALLOW_FILE_STORE=true"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STORE_CASES))
def test_an_mlflow_store_that_cannot_be_opened_is_one_line_within_seconds(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """MLflow's own client opens the store before the run starts; its default retries would
    wait minutes for a server that is not there."""
    from attnlab import train as attnlab_train

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    uri, says = STORE_CASES[case]
    uri = uri.replace("TMP", str(tmp_path))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        attnlab_train.main([*TINY, "logger=mlflow", f"logger.mlflow.tracking_uri={uri}",
                            f"paths.log_dir={tmp_path / 'logs'}"])  # fmt: skip
    assert time.monotonic() - started < 60
    assert exit_info.value.code == 2
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"logger.mlflow.tracking_uri={uri}" in errors[0], err[-3000:]
    assert says in errors[0]
    assert notes.read_text() == "not a database\n" and not (tmp_path / "mlruns").exists()


def test_a_server_that_never_answers_is_given_up_after_the_probes_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A socket that takes the connection and never answers: MLflow's HTTP client waits the
    probe's timeout (its MLFLOW_HTTP_REQUEST_TIMEOUT) for each of two tries, not 120 s × 8."""
    from attnlab.cli import mlflow_setup

    for name in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(mlflow_setup, "PROBE_TIMEOUT_S", 1)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(ConfigError, match=f"tracking_uri={uri}: no MLflow server answered"):
            mlflow_setup.check_store(uri)
        assert time.monotonic() - started < 10
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ  # the probe's setting only


def test_a_folder_store_is_opened_where_mlflow_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.cli.mlflow_setup import check_store

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_store(str(tmp_path / "mlruns"))
    assert (tmp_path / "mlruns").is_dir()
