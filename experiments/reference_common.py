"""What the gates' reference scripts share (``reference_translation.py``,
``reference_classification.py``): reading the run's settings from attnlab's configuration and
refusing what a reference does not implement, the device, AdamW and its schedule, the training
loop with its checkpoint choice, and the ``summary.json`` / ``metrics.csv`` that
``attnlab-compare`` reads. Nothing of attnlab's model, task, optimiser, schedule or decoding
code is used here: only its configuration (to fill in its defaults) and its data.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.optim.registry import optim_config

# keys whose other values no reference implements: the values at which it behaves as attnlab
# does (a no-op, or the one behaviour it has; the first is named when another is refused)
NO_OPS = {"trainer.accumulate_grad_batches": (1,), "trainer.limit_train_batches": (None, 1.0),
          "trainer.limit_test_batches": (None, 1.0), "trainer.check_val_every_n_epoch": (None,),
          "trainer.overfit_batches": (0.0, 0), "trainer.fast_dev_run": (False,),
          "trainer.gradient_clip_algorithm": (None, "norm"), "test": (True,),
          "callbacks.divergence_guard.max_ratio": (None,), "task.z_loss": (0.0,)}  # fmt: skip
# what every reference reads besides its task's own keys, the model and the optimiser
COMMON = ("seed", "trainer.max_steps", "trainer.val_check_interval",
          "trainer.gradient_clip_val", "task.label_smoothing")  # fmt: skip
COUNTS = ("trainer.max_steps", "trainer.val_check_interval", "trainer.limit_val_batches")


def refuse(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def entry(main: Callable[[list[str]], None]) -> None:
    """Run a reference's ``main`` on the command line's arguments; a configuration or data
    error attnlab reports (what ``attnlab-train`` would refuse too) is one line, exit 2."""
    try:
        main(sys.argv[1:])
    except UserError as error:
        refuse(str(error))


def arguments(argv: list[str], script: str, inits: tuple[str, ...]) -> tuple[str, Path, list[str]]:
    """``[--init=NAME] OUT [attnlab-train overrides…]`` -> (init, OUT, overrides); ``torch``
    when no ``--init`` is given. An OUT that already holds a summary is refused."""
    init = "torch"
    if argv[:1] and argv[0] in {f"--init={name}" for name in inits}:
        init, argv = argv[0].removeprefix("--init="), argv[1:]
    if len(argv) < 1 or argv[0].startswith("-"):
        options = "|".join(f"--init={name}" for name in inits)
        refuse(f"usage: {script} {f'[{options}] ' if inits else ''}OUT "
               "[attnlab-train overrides…]")  # fmt: skip
    out = Path(argv[0])
    if (out / "summary.json").exists():
        refuse(f"{out}/summary.json exists; choose another OUT or delete it")
    return init, out, argv[1:]


def settings_of(cfg: Any, keys: tuple[str, ...], validates: tuple[str, ...],
                optional: tuple[str, ...] = (),
                weight_decay: bool = True) -> dict[str, Any]:  # fmt: skip
    """Each of ``keys`` (refused when unset: a reference does not guess attnlab's defaults) and
    of ``optional`` (unset: the trainer's default, e.g. every validation batch), the
    optimiser's keys as ``optim.<key>`` with attnlab's defaults filled in by its registry, and
    the checkpoint's monitor and mode (:func:`checkpoint`; one of the metrics the reference
    ``validates``). What the reference cannot do is refused in one line."""
    values = {key: OmegaConf.select(cfg, key) for key in (*keys, *optional)}
    for key in keys:
        if values[key] is None:
            refuse(f"{key} is unset, and the reference does not guess attnlab's default: set it")
    for key in COUNTS:
        value = values.get(key)
        if key in values and value is not None and (isinstance(value, float) or int(value) < 1):
            refuse(f"{key}={value}: the reference reads it as a count of steps or batches")
    for key, no_ops in NO_OPS.items():
        value = OmegaConf.select(cfg, key)
        if value not in no_ops:
            refuse(f"{key}={value}: the reference implements {key}={no_ops[0]} only")
    optim = optim_config(OmegaConf.to_container(cfg.optim))
    if optim.name != "adamw" or optim.schedule not in ("cosine", "constant"):
        refuse(f"optim.name={optim.name} optim.schedule={optim.schedule}: the reference trains "
               "with adamw and a cosine or constant schedule only")  # fmt: skip
    if optim.decay_steps is not None:
        refuse("optim.decay_steps: the reference's cosine decays over the run's steps only")
    if optim.weight_decay and not weight_decay:
        refuse(
            f"optim.weight_decay={optim.weight_decay}: the reference trains without weight decay"
        )
    read = ("lr", "betas", "eps", "weight_decay", "warmup_steps", "schedule", "min_lr")
    values.update({f"optim.{key}": getattr(optim, key) for key in read})
    return {**values, **checkpoint(cfg, validates)}


def checkpoint(cfg: Any, validates: tuple[str, ...]) -> dict[str, str]:
    """The ``callbacks.model_checkpoint`` monitor and mode the test's checkpoint is chosen by,
    as attnlab chooses it, by their keys; refused when unset or not one of the metrics the
    reference ``validates``. In the summary's config as in attnlab's, so that attnlab-compare
    reads val/* at the checkpoint they chose."""
    monitor = OmegaConf.select(cfg, "callbacks.model_checkpoint.monitor")
    mode = OmegaConf.select(cfg, "callbacks.model_checkpoint.mode") or "min"
    if monitor is None:
        refuse("callbacks.model_checkpoint.monitor is unset; the reference tests the best "
               f"checkpoint by one of {', '.join(validates)}: set it")  # fmt: skip
    if monitor not in validates or mode not in ("min", "max"):
        refuse(f"callbacks.model_checkpoint.monitor={monitor} mode={mode}: the reference "
               f"chooses its checkpoint by {' or '.join(validates)}, min or max, only")  # fmt: skip
    return {"callbacks.model_checkpoint.monitor": str(monitor),
            "callbacks.model_checkpoint.mode": str(mode)}  # fmt: skip


def check_model(resolved: Any, implements: dict[str, Any]) -> None:
    """Refuse every model key whose value the reference does not implement (``implements``:
    key -> the value, or a tuple of the values it does) and a norm placement other than
    Pre-LN or Post-LN."""
    for key, value in implements.items():
        allowed = value if isinstance(value, tuple) else (value,)
        got = getattr(resolved, key, allowed[0])
        if got not in allowed:
            shown = " or ".join(f"{key}={v}" for v in allowed)
            refuse(f"model.{key}={got}: the reference implements {shown} only")
    if resolved.norm not in ("pre", "post"):
        refuse(f"model.norm={resolved.norm}: the reference has pre and post only")


def device_of(trainer: Any) -> tuple[torch.device, torch.dtype | None]:
    """The device and autocast dtype ``trainer.accelerator``/``precision`` ask for; what the
    reference cannot honour is refused."""
    accelerator, precision = str(trainer.accelerator), str(trainer.precision)
    if int(trainer.get("devices") or 1) != 1 and str(trainer.get("devices")) != "auto":
        refuse(f"trainer.devices={trainer.devices}: the reference trains on one device")
    if precision not in ("32", "32-true", "bf16-mixed"):
        refuse(f"trainer.precision={precision}: the reference trains in 32 or bf16-mixed")
    cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        refuse(f"trainer.accelerator={accelerator} but torch sees no CUDA device")
    if not cuda and accelerator not in ("cpu", "auto"):
        refuse(f"trainer.accelerator={accelerator}: the reference trains on cpu or gpu")
    return torch.device("cuda" if cuda else "cpu"), (
        torch.bfloat16 if precision == "bf16-mixed" else None
    )


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager[Any]:
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def learning_rate(step: int, peak: float, warmup: int, total: int, floor: float,
                  schedule: str) -> float:  # fmt: skip
    """At optimiser step ``step`` (0-based, so the n-th update is n = step + 1): a linear
    warm-up n/warmup, then flat (constant) or a cosine from ``peak`` to ``floor`` at ``total``."""
    n = step + 1
    if n <= warmup:
        return peak * n / warmup
    if schedule == "constant":
        return peak
    progress = min(1.0, (n - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def adamw(model: nn.Module, setting: dict[str, Any]) -> torch.optim.AdamW:
    """AdamW with the run's β, ε and decoupled weight decay on the weight matrices of the
    linear maps only: biases, norm gains and the embedding tables are not decayed (BERT's
    and nanoGPT's convention; the rule attnlab's ``optim.weight_decay`` documents)."""
    decayed, kept = [], []
    for name, param in model.named_parameters():
        table = isinstance(model.get_submodule(name.rpartition(".")[0]), nn.Embedding)
        (decayed if param.dim() >= 2 and not table else kept).append(param)
    groups = [{"params": decayed, "weight_decay": float(setting["optim.weight_decay"])},
              {"params": kept, "weight_decay": 0.0}]  # fmt: skip
    return torch.optim.AdamW(groups, lr=float(setting["optim.lr"]),
                             betas=tuple(setting["optim.betas"]),
                             eps=float(setting["optim.eps"]))  # fmt: skip


@dataclass
class Fit:
    """What :func:`fit` ends with: ``completed`` or ``diverged``, each validation's metrics by
    Lightning's step count, and the checkpoint the test reads (None: nothing to test)."""

    status: str = "completed"
    curve: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    best: float = math.nan
    best_state: dict[str, Tensor] | None = None


def fit(model: nn.Module, data: Any, setting: dict[str, Any], cfg: Any,
        loss_of: Callable[[dict[str, Tensor]], Tensor],
        validate: Callable[[], dict[str, float]]) -> Fit:  # fmt: skip
    """Train ``trainer.max_steps`` steps on ``data``'s training batches (its sampler told each
    epoch, as Lightning does), validating every ``trainer.val_check_interval`` steps counted
    across epochs and at the last step, and keeping the state with the best value of the
    checkpoint's monitor (min or max; the first on a tie, as Lightning's ModelCheckpoint). A
    non-finite training loss ends the run as ``diverged``, untested, as attnlab's guard does;
    so does a run with no finite validation to choose a checkpoint by."""
    steps, every = int(setting["trainer.max_steps"]), int(setting["trainer.val_check_interval"])
    monitor = setting["callbacks.model_checkpoint.monitor"]
    mode = setting["callbacks.model_checkpoint.mode"]
    clip = float(setting["trainer.gradient_clip_val"])
    peak = float(setting["optim.lr"])
    schedule = (int(setting["optim.warmup_steps"]), steps, float(setting["optim.min_lr"] or 0),
                setting["optim.schedule"])  # fmt: skip
    loader = data.train_dataloader()
    epochs = OmegaConf.select(cfg, "trainer.max_epochs")
    if epochs is not None and 0 <= epochs * len(loader) < steps:  # Lightning: the first to end
        refuse(f"trainer.max_epochs={epochs} ends the run before trainer.max_steps={steps}; the "
               "reference trains max_steps: set trainer.max_epochs=-1")  # fmt: skip
    optimiser = adamw(model, setting)
    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
    result, step, epoch = Fit(best=math.inf if mode == "min" else -math.inf), 0, 0
    model.train()
    while step < steps and result.status == "completed":
        for sampler in (loader.batch_sampler, getattr(loader.batch_sampler, "sampler", None)):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
        for batch in loader:
            for group in optimiser.param_groups:
                group["lr"] = learning_rate(step, peak, *schedule)
            loss = loss_of(batch)
            if not torch.isfinite(loss):  # as attnlab's divergence guard: stop, test nothing
                result.status = "diverged"
                break
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimiser.step()
            step += 1
            # as Lightning's val_check_interval, counted across epochs, and at the last step
            # (attnlab stops the run there, and Lightning validates when it stops)
            if step % every == 0 or step == steps:
                model.eval()
                with torch.no_grad():
                    values = validate()
                model.train()
                result.curve.append((step - 1, values))  # Lightning's step at that validation
                if math.isfinite(values[monitor]) and better(values[monitor], result.best):
                    result.best, result.best_state = (
                        values[monitor],
                        copy.deepcopy(model.state_dict()),
                    )
            if step == steps:
                break
        epoch += 1
    if result.best_state is None:  # no finite validation to choose a checkpoint by
        result.status = "diverged"
    return result


def nested(setting: dict[str, Any]) -> dict[str, Any]:
    """``{"optim.lr": …}`` -> ``{"optim": {"lr": …}}``, as attnlab's config, for --by."""
    config: dict[str, Any] = {}
    for key, value in setting.items():
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = list(value) if isinstance(value, tuple) else value
    return config


def write_summary(out: Path, name: str, writer: str, model: dict[str, Any],
                  setting: dict[str, Any], overrides: list[str], result: Fit,
                  metrics: dict[str, float], start: float,
                  extra: Iterable[tuple[str, Any]] = ()) -> None:  # fmt: skip
    """``OUT/summary.json`` and ``OUT/metrics.csv`` in the form attnlab-compare reads; prints
    one line and exits 1 when the run did not complete."""
    if result.curve:  # the last validation, as attnlab's summary
        metrics = {**metrics, **result.curve[-1][1]}
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "status": result.status,
        "writer": writer,
        "config": {"experiment_name": name, "model": model, **nested(setting)},
        "overrides": overrides,
        "metrics": metrics,
        "wall_s": time.time() - start,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),  # as attnlab's summary names it
        **dict(extra),
    }
    names = list(result.curve[0][1]) if result.curve else []
    rows = "".join(f"{step}," + ",".join(str(v[k]) for k in names) + "\n"
                   for step, v in result.curve)  # fmt: skip
    (out / "metrics.csv").write_text(",".join(["step", *names]) + "\n" + rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    shown = " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
    print(
        f"{name} seed={setting['seed']} lr={setting['optim.lr']:g}: {result.status} {shown} "
        f"(best {result.best:.4f}) in {summary['wall_s']:.0f} s -> {out}/summary.json"
    )
    if result.status != "completed":
        raise SystemExit(1)
