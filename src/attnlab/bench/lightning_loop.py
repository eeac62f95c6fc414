"""What Lightning costs per step: ``Trainer.fit`` against the same steps in a bare loop.

Both loops train the same :class:`LanguageModelTask` on the same batches with
the same optimiser, schedule and gradient clipping (the ``trainer=default``
value, 1.0). Only steady-state steps are timed — the first ``warmup`` steps and
the Trainer's start-up and tear-down are not — so the ratio is the per-step
overhead a long run pays. Start-up is reported separately.
"""

from __future__ import annotations

import io
import logging
import statistics
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from attnlab.bench.contenders import FIRST_TOKEN, BenchSize
from attnlab.bench.timing import CLOCKS, synchronize
from attnlab.tasks import LanguageModelTask

CLIP = 1.0  # conf/trainer/default.yaml: gradient_clip_val


def _task(size: BenchSize, steps: int) -> LanguageModelTask:
    model = dict(
        name="decoder_only", vocab_size=size.vocab, d_model=size.d_model, n_heads=size.n_heads,
        n_layers=size.n_layers, dropout=0.0, norm="pre", ffn="gelu", pos="learned",
        max_len=size.block,
    )  # fmt: skip
    return LanguageModelTask(model=model, optim={"warmup_steps": 10, "decay_steps": steps})


def _batches(size: BenchSize, steps: int) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(FIRST_TOKEN, size.vocab, (steps * size.batch, size.block + 1),
                           generator=generator)  # fmt: skip
    return DataLoader([{"tokens": row} for row in tokens], batch_size=size.batch, shuffle=False)


class _StepClock(L.Callback):
    """Timestamps at the start of each training batch and at the end of the last one."""

    def __init__(self, now: Any, device: torch.device) -> None:
        self.now, self.device = now, device
        self.starts: list[float] = []
        self.end = 0.0

    def on_train_batch_start(self, *args: Any) -> None:
        synchronize(self.device)
        self.starts.append(self.now())

    def on_train_batch_end(self, *args: Any) -> None:
        synchronize(self.device)
        self.end = self.now()


def _normal_callbacks(run_dir: str) -> list[L.Callback]:
    """The callbacks of conf/callbacks/default.yaml, as a normal run builds them.

    Checkpoints go to ``run_dir`` (and only last.ckpt: no validation runs here);
    the progress bar renders as in a terminal, into a string rather than the screen.
    """
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from attnlab.cli.common import config_dir

    callbacks = []
    for node in OmegaConf.load(config_dir() / "callbacks" / "default.yaml").values():
        target, extra = str(node.get("_target_", "")), {}
        if "ModelCheckpoint" in target:
            node.update(dirpath=f"{run_dir}/checkpoints", monitor=None, save_top_k=0)
        if "ProgressBar" in target:
            extra["console_kwargs"] = {"file": io.StringIO(), "force_terminal": True}
        callbacks.append(instantiate(node, **extra))
    return callbacks


def lightning_fit(
    size: BenchSize, steps: int, warmup: int, normal: bool, device: torch.device, now: Any
) -> tuple[float, float]:
    """(seconds per steady-state step, seconds for Trainer set-up and the whole fit)."""
    task, clock = _task(size, steps), _StepClock(now, device)
    with tempfile.TemporaryDirectory() as run_dir, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = now()
        trainer = L.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, max_steps=steps,
            limit_val_batches=0, num_sanity_val_steps=0, gradient_clip_val=CLIP,
            log_every_n_steps=10, enable_model_summary=False, default_root_dir=run_dir,
            logger=CSVLogger(run_dir, name="", version="") if normal else False,
            enable_checkpointing=normal, enable_progress_bar=normal,
            callbacks=[clock, *(_normal_callbacks(run_dir) if normal else [])],
        )  # fmt: skip
        trainer.fit(task, train_dataloaders=_batches(size, steps))
        total = now() - started
    return (clock.end - clock.starts[warmup]) / (steps - warmup), total


def bare_loop(
    size: BenchSize, steps: int, warmup: int, device: torch.device, now: Any
) -> tuple[float, float]:
    """The same steps by hand: the loop a Trainer replaces."""
    started = now()
    task = _task(size, steps).to(device)
    task.train()
    optimizers = task.configure_optimizers()
    optimizer, schedule = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    batches: Iterator[dict[str, torch.Tensor]] = iter(_batches(size, steps))
    measured_from = 0.0
    for step in range(steps):
        tokens = next(batches)["tokens"].to(device)
        if step == warmup:
            synchronize(device)
            measured_from = now()
        inputs, labels = task.inputs_and_labels(tokens)
        loss = task.loss(task.model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(task.parameters(), CLIP)
        optimizer.step()
        schedule.step()
    synchronize(device)
    end = now()
    return (end - measured_from) / (steps - warmup), end - started


def compare_loops(
    size: BenchSize,
    steps: int,
    rounds: int,
    normal: bool,
    device: torch.device,
    clock: str = "wall",
) -> dict[str, Any]:
    """Fit and bare loop in turns, ``rounds`` times each; medians of seconds per step."""
    now, warmup = CLOCKS[clock], max(1, min(5, steps // 4))
    per_step: dict[str, list[float]] = {"lightning": [], "bare": []}
    whole: dict[str, list[float]] = {"lightning": [], "bare": []}
    quiet = logging.getLogger("lightning.pytorch")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for i in range(rounds):
            for name in ("lightning", "bare") if i % 2 == 0 else ("bare", "lightning"):
                if name == "lightning":
                    step_s, total_s = lightning_fit(size, steps, warmup, normal, device, now)
                else:
                    step_s, total_s = bare_loop(size, steps, warmup, device, now)
                per_step[name].append(step_s)
                whole[name].append(total_s)
    finally:
        quiet.setLevel(level)
    median = {name: statistics.median(times) for name, times in per_step.items()}
    median_whole = {name: statistics.median(times) for name, times in whole.items()}
    return {
        "ratio": median["lightning"] / median["bare"],
        "contenders": {
            name: {
                "median_s": median[name],
                "min_s": min(per_step[name]),
                "max_s": max(per_step[name]),
                "rounds": rounds,
            }
            for name in per_step
        },  # fmt: skip
        "steps": steps,
        "timed_steps": steps - warmup,
        "whole_run_s": median_whole,
        "whole_run_ratio": median_whole["lightning"] / median_whole["bare"],
    }
