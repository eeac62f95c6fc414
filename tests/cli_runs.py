"""Helpers for tests that train through the real configs: the CLI in a subprocess, or
``attnlab.train.train`` in this process, and a reader for offline W&B run files."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

# A run that takes seconds on a CPU: one small layer, a few batches, no test phase.
TINY = [
    "data.train_size=64",
    "data.val_size=16",
    "data.test_size=16",
    "data.batch_size=32",
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_layers=1",
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    "test=false",
]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: the package importable, W&B offline, quiet."""
    env = dict(os.environ)
    src = str(REPO_ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.setdefault("WANDB_MODE", "offline")
    env.update(WANDB_SILENT="true", TOKENIZERS_PARALLELISM="false", HYDRA_FULL_ERROR="0")
    env.update(extra)
    return env


def start(
    module: str, *args: str, cwd: Path | None = None, new_session: bool = False, **env: str
) -> subprocess.Popen:
    """``python -m attnlab.<module> args…`` started in the background (text output);
    ``new_session``: in its own process group, so that ``os.killpg`` reaches its workers."""
    return subprocess.Popen(
        [sys.executable, "-m", f"attnlab.{module}", *args],
        cwd=cwd or REPO_ROOT, env=cli_env(**env), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=new_session,
    )  # fmt: skip


def finish(proc: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(module: str, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return finish(start(module, *args, **env), timeout)


def only_dir(parent: Path, pattern: str = "*") -> Path:
    """The single directory matching ``pattern`` under ``parent``."""
    found = [p for p in parent.glob(pattern) if p.is_dir()]
    assert len(found) == 1, f"expected one {pattern} under {parent}, found {found}"
    return found[0]


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def compose_run(overrides: list[str], run_dir: Path) -> Any:
    """The task config Hydra would give a single run in ``run_dir`` (HydraConfig set)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from attnlab.cli.common import config_dir, register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


# -- offline W&B run files ----------------------------------------------------------------
# A .wandb file is a LevelDB-style log (wandb 0.31 ships no Python reader for it): a 7-byte
# header ":W&B" + magic + version, then 32 KiB blocks of chunks, each with a 7-byte header
# (crc32c, length, type: 1 full, 2 first, 3 middle, 4 last) around a protobuf Record.
_BLOCK, _HEADER = 32768, 7


def wandb_records(path: Path) -> Iterator[Any]:
    """The protobuf records (``wandb_internal_pb2.Record``) of an offline run file."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, parts = _HEADER, []
    while pos + _HEADER <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _HEADER:  # block trailer padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0:  # zero padding to the end of the block
            pos += room
            continue
        parts.append(data[pos + _HEADER : pos + _HEADER + length])
        pos += _HEADER + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


def wandb_run_contents(path: Path) -> dict[str, Any]:
    """Name, group, job type, tags, config, summary and history of an offline run file."""
    out: dict[str, Any] = {"config": {}, "summary": {}, "history": []}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            out.update(id=run.run_id, name=run.display_name, group=run.run_group,
                       job_type=run.job_type, tags=list(run.tags))  # fmt: skip
            out["config"].update(_items(run.config.update))
        elif kind == "config":
            out["config"].update(_items(record.config.update))
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
        elif kind == "history":
            out["history"].append(dict(_items(record.history.item)))
    return out


def _items(items: Any) -> Iterator[tuple[str, Any]]:
    for item in items:
        key = item.key or "/".join(item.nested_key)
        yield key, json.loads(item.value_json)


def wandb_api_run(run_file: Path, entity: str = "team", project: str = "attnlab") -> Any:
    """A real ``wandb.apis.public.Run`` holding what the offline ``run_file`` recorded, in
    the form the W&B API returns it (config values as ``{"value": …}``, summary metrics);
    its ``history()`` serves the file's history rows as W&B's sampled history does (the
    rows that have every requested key). Built from attrs, it never touches the network."""
    from wandb.apis.public import Run

    contents = wandb_run_contents(run_file)
    config = {key: value if isinstance(value, dict) and "value" in value
              else {"value": value, "desc": None}
              for key, value in contents["config"].items()}  # fmt: skip
    attrs = {"id": contents["id"], "name": contents["id"], "displayName": contents["name"],
             "group": contents["group"], "jobType": contents["job_type"],
             "tags": contents["tags"], "state": "finished", "config": json.dumps(config),
             "summaryMetrics": json.dumps(contents["summary"])}  # fmt: skip
    run = Run(None, entity, project, contents["id"], attrs=attrs)
    rows = contents["history"]

    def history(keys: list[str] | None = None, samples: int = 500, pandas: bool = True,
                **_: Any) -> list[dict[str, Any]]:  # fmt: skip
        assert not pandas, "attnlab reads history rows as dicts"
        wanted = [k for k in keys or [] if k != "_step"]
        return [{"_step": row["_step"], **{k: row[k] for k in wanted}}
                for row in rows if all(k in row for k in wanted)][:samples]  # fmt: skip

    run.history = history
    return run


def group_ends(pgid: int, timeout: float = 5.0) -> bool:
    """Whether every process of the group ``pgid`` is gone within ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
