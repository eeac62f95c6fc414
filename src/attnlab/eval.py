"""``attnlab-eval``: evaluate a checkpoint with the config of the run that wrote it.

    attnlab-eval run_dir=logs/train/runs/<run>                  # best checkpoint, test split
    attnlab-eval ckpt_path=<run>/checkpoints/last.ckpt split=val
    attnlab-eval run_dir=<run> decode.strategy=beam data.batch_size=8 trainer.accelerator=cpu

The run's ``.hydra/config.yaml`` is reused; ``key=value`` overrides go on top.
The checkpoint is the run's best one (else ``last.ckpt``) unless ``ckpt_path``
names one. ``split=test`` (default) runs Lightning's test loop, ``split=val``
its validation loop; metrics are printed and written to a new
``<run_dir>/eval/<timestamp>_<split>.json``. Only data, task and a plain
Trainer are built (no loggers, no callbacks): nothing else in the run changes
but its W&B run (below).

``by_length=true`` (translation, test split) adds corpus BLEU per source-length
bucket — 1–10, 11–15, 16–20, 21–25, 26+ words, or the upper edges given, e.g.
``by_length=[10,20,30]`` — with the sentence count of each (Bahdanau et al. 2015,
Fig. 2, plots BLEU against sentence length).

A run trained with ``logger=wandb`` (its directory holds ``wandb_id.txt``) also gets
the metrics in its own W&B run, as ``eval/test/loss`` …; offline without credentials
(``wandb sync`` uploads them later). ``wandb=false`` leaves W&B alone; ``wandb=true``
insists (an error for a run without W&B).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from attnlab.cli.common import run_key_value_command
from attnlab.errors import ConfigError

OPTIONS = {"run_dir": None, "ckpt_path": None, "split": "test", "by_length": "false",
           "wandb": "auto"}  # fmt: skip
DEFAULT_BUCKETS = [10, 15, 20, 25]  # source words: 1–10, 11–15, 16–20, 21–25, 26+
SPLITS = ("val", "test")


def build_trainer(cfg: Any, overrides: list[tuple[str, Any]], split: str) -> Any:
    """A Trainer with the run's accelerator and precision, on one device by default.

    One device keeps every example counted once (a distributed sampler pads the
    last batch); ``trainer.devices=N`` on the command line asks for more.
    """
    import lightning as L

    trainer_cfg = cfg.get("trainer") or {}
    asked = {key.lstrip("+") for key, _ in overrides}
    options = {
        "accelerator": trainer_cfg.get("accelerator", "auto"),
        "devices": trainer_cfg.get("devices", 1) if "trainer.devices" in asked else 1,
        "precision": trainer_cfg.get("precision", "32-true"),
    }
    limit = f"limit_{split}_batches"
    try:
        return L.Trainer(
            **options,
            **({limit: trainer_cfg[limit]} if trainer_cfg.get(limit) is not None else {}),
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
    except Exception as exc:  # MisconfigurationException, ValueError: no such device/precision
        settings = " ".join(f"trainer.{k}={v}" for k, v in options.items())
        raise ConfigError(
            f"{settings} cannot run here ({' '.join(str(exc).split())}); "
            "override them, e.g. trainer.accelerator=cpu trainer.precision=32-true"
        ) from None


def length_buckets(value: Any) -> list[int] | None:
    """``by_length``: false/true or a list of increasing positive upper edges."""
    text = str(value).strip().lower()
    if text in ("false", "0", "no", "none", "null", ""):
        return None
    if text in ("true", "1", "yes"):
        return DEFAULT_BUCKETS
    try:
        edges = [int(v) for v in text.strip("[]").split(",")]
    except ValueError:
        edges = []
    if not edges or edges != sorted(set(edges)) or edges[0] < 1:
        raise ConfigError(
            f"by_length={value} is not valid; use by_length=true or increasing source lengths "
            "in words, e.g. by_length=[10,20,30]"
        )
    return edges


def evaluate(
    cfg: Any, ckpt: Path, split: str, overrides: list[tuple[str, Any]],
    buckets: list[int] | None = None,
) -> dict[str, float]:  # fmt: skip
    """Load the checkpoint into the run's task and run the ``split`` loop; return its metrics."""
    import lightning as L

    from attnlab.cli import pipeline
    from attnlab.cli.checkpoints import load_weights, read_checkpoint

    checkpoint = read_checkpoint(ckpt)  # a broken file or device fails before data loads
    trainer = build_trainer(cfg, overrides, split)
    model_cfg = pipeline.check_config(cfg)
    L.seed_everything(int(cfg.seed), verbose=False)
    datamodule = pipeline.build_data(cfg)
    task = pipeline.build_task(cfg, datamodule, model_cfg)
    saved = (checkpoint.get("hyper_parameters") or {}).get("model")
    load_weights(task, checkpoint["state_dict"], ckpt, saved, dict(task.hparams.model))
    if buckets is not None:
        if not getattr(task, "bleu_enabled", None) and not hasattr(datamodule, "references"):
            raise ConfigError("by_length=… needs a translation run (BLEU); remove it")
        task.length_buckets = buckets
    run = trainer.validate if split == "val" else trainer.test
    run(task, datamodule=datamodule, verbose=False)
    metrics = pipeline.scalar_metrics(trainer.callback_metrics)
    return {k: v for k, v in sorted(metrics.items()) if k.startswith(f"{split}/")}


def wants_wandb(value: Any, run_dir: Path) -> bool:
    """``wandb=auto|true|false``: log to the run's W&B run (auto: when it has one)."""
    import importlib.util

    text = str(value).strip().lower()
    if text not in ("auto", "true", "false"):
        raise ConfigError(f"wandb={value} is not valid; use wandb=auto, wandb=true or wandb=false")
    if text == "false":
        return False
    has_run = (run_dir / "wandb_id.txt").is_file()
    installed = importlib.util.find_spec("wandb") is not None
    if text == "true" and not has_run:
        raise ConfigError(
            f"wandb=true logs to the run's W&B run, but {run_dir} has no wandb_id.txt (it was "
            "not trained with logger=wandb); drop wandb=true"
        )
    if text == "true" and not installed:
        raise ConfigError("wandb=true needs the wandb package; pip install wandb, or drop it")
    return has_run and installed


def write_result(run_dir: Path, record: dict[str, Any], split: str) -> Path:
    """A new ``<run_dir>/eval/<timestamp>_<split>.json``; an existing file is never replaced."""
    folder = run_dir / "eval"
    folder.mkdir(exist_ok=True)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    for n in range(1, 1000):
        path = folder / (f"{stamp}_{split}.json" if n == 1 else f"{stamp}-{n}_{split}.json")
        try:
            with path.open("x", encoding="utf-8") as f:
                json.dump(record, f, indent=2)
                f.write("\n")
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: too many evaluations within one second")


def run(argv: list[str]) -> int:
    from attnlab.cli.checkpoints import (
        config_overrides,
        load_run_config,
        locate_run,
        parse_arguments,
    )

    options, overrides = parse_arguments(argv, OPTIONS)
    split = str(options["split"])
    if split not in SPLITS:
        raise ConfigError(f"split={split} is not valid; use split=val or split=test")
    buckets = length_buckets(options["by_length"])
    if buckets is not None and split != "test":
        raise ConfigError("by_length=… reports test BLEU; use it with split=test (the default)")
    run_dir, ckpt = locate_run(options["run_dir"], options["ckpt_path"])
    to_wandb = wants_wandb(options["wandb"], run_dir)
    cfg = load_run_config(run_dir, config_overrides(argv, OPTIONS))
    print(f"checkpoint: {ckpt}", flush=True)
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)  # no device banners
    try:
        metrics = evaluate(cfg, ckpt, split, overrides, buckets)
    finally:
        lightning_log.setLevel(level)
    record = {
        "run_dir": str(run_dir), "checkpoint": str(ckpt), "split": split,
        "overrides": [f"{k}={v}" for k, v in overrides], "metrics": metrics,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }  # fmt: skip
    from attnlab.tasks.seq2seq import bleu_signature, reports_bleu

    if reports_bleu(metrics):
        record["bleu_signature"] = bleu_signature()
    path = write_result(run_dir, record, split)
    width = max((len(k) for k in metrics), default=0)
    for key, value in metrics.items():
        print(f"{key:<{width}}  {value:.6g}")
    if "bleu_signature" in record:
        print(f"BLEU:       sacreBLEU {record['bleu_signature']}")
    print(f"results:    {path}")
    if to_wandb:
        from attnlab.cli.wandb_setup import log_evaluation

        try:
            run_id = log_evaluation(run_dir, cfg, metrics, ckpt)
        except Exception as exc:  # no network, a revoked key: the results file is written
            print(f"warning: not logged to W&B ({' '.join(str(exc).split())}); "
                  f"{path} holds the results", file=sys.stderr)  # fmt: skip
            return 0
        if run_id and os.environ.get("WANDB_MODE") == "offline":  # training's file, then this one
            print(f"W&B (offline): eval/… in run {run_id}; "
                  f"wandb sync {run_dir}/wandb/offline-run-*")  # fmt: skip
        elif run_id:
            print(f"W&B:        eval/… in run {run_id}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the process exit code."""
    return run_key_value_command(run, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
