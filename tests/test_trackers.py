"""MLflow and TensorBoard runs read back with each tool's own reader: the run named by the
overrides that vary, the flat config as params, the metrics' histories, the status."""

from __future__ import annotations

import csv
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


def test_a_folder_as_the_mlflow_store_is_one_line(tmp_path: Path) -> None:
    from attnlab.cli.mlflow_setup import tracking_uri

    cfg = compose_run([*TINY, "logger=mlflow"], tmp_path)
    with pytest.raises(ConfigError, match="is a folder, which MLflow ≥ 3.7 no longer accepts"):
        tracking_uri(cfg, str(tmp_path / "mlruns"))
    assert tracking_uri(cfg, "sqlite:///x.db") == "sqlite:///x.db"
