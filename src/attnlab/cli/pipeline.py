"""Config -> data, task, callbacks, loggers, trainer -> fit and test.

The only module that turns a composed config into objects; the entry points
(train, eval) call it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import lightning as L
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.loggers import CSVLogger, Logger
from omegaconf import DictConfig, OmegaConf

from attnlab.callbacks.divergence import DivergenceGuard
from attnlab.callbacks.outcome import Outcome
from attnlab.callbacks.progress import ValidateAtMaxSteps
from attnlab.callbacks.resume import (
    AtomicCheckpointIO,
    ContinuedCSVLogger,
    LoaderPosition,
    RngState,
)
from attnlab.callbacks.stop import GracefulStop
from attnlab.cli.components import component_class, needs_of, supplied
from attnlab.cli.preflight import check_trains_here, sharded, strategy_name
from attnlab.data.base import AttnlabDataModule
from attnlab.errors import CheckpointError, ConfigError, UserError
from attnlab.model_config import ARCHITECTURES, ModelConfig
from attnlab.tasks import Task, check_compatible, task_class


def build(node: Any, what: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` with user errors surfaced as such."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        while cause is not None and not isinstance(cause, UserError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise ConfigError(f"{what} could not be built: {' '.join(str(exc).split())}") from exc


def container(node: Any) -> dict[str, Any]:
    return OmegaConf.to_container(node, resolve=True) if node is not None else {}  # type: ignore[return-value]


def check_config(cfg: DictConfig, source: str = "the config", strict: bool = True
                 ) -> ModelConfig:  # fmt: skip
    """Allowlisted ``_target_`` values, then every key's type and range, before any data
    loads; the checked ModelConfig, for :func:`build_task` to fill in from the data.
    ``strict=False``: a model key the model does not read is dropped (a sweep's job, whose
    sweep checked that some job reads it)."""
    from attnlab.cli.schema import check_run_config

    return check_run_config(cfg, source, strict)


def build_data(cfg: DictConfig) -> AttnlabDataModule:
    datamodule = build(cfg.data, "data")
    if not isinstance(datamodule, AttnlabDataModule):
        raise ConfigError("data._target_ must name an AttnlabDataModule subclass")
    check_compatible(str(cfg.model.name), datamodule.task, cfg.model.get("prefix_lm") is True)
    if getattr(datamodule, "given_labels", False):
        if ARCHITECTURES.get(str(cfg.model.name)).feeding.lm != "causal":
            raise ConfigError(
                f"model={cfg.model.name} is a masked LM, and this data scores chosen positions "
                "of a causal language model; use model=decoder_only or model=rnn"
            )
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


# fp32 weights, their gradients and AdamW's two moments: bytes per parameter in training
TRAINING_BYTES_PER_PARAM = 16


def available_memory(accelerator: str) -> tuple[int, str] | None:
    """(bytes available, where) on the device the run trains on, when it can be known."""
    import torch

    if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        # this process's own GPU: a bare mem_get_info() would open a context on GPU 0 in
        # every rank, before Lightning sets each rank's device
        device = torch.device("cuda", local_rank() % max(torch.cuda.device_count(), 1))
        return torch.cuda.mem_get_info(device)[0], f"free on GPU {device.index}"
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024, "available in memory"
    except (OSError, KeyError, ValueError):
        return None


def local_rank() -> int:
    """This process's index on its node (torchrun, Lightning's launcher, SLURM), else 0."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def shards(trainer: Any) -> int:
    """Over how many processes a sharded strategy (FSDP, DeepSpeed) splits the training
    state; 1 for the others, which keep a whole copy on each."""
    import torch

    if not sharded(trainer):
        return 1
    devices = trainer.get("devices", 1)
    if OmegaConf.is_list(devices) or isinstance(devices, list):
        count = len(devices)
    elif str(devices).lstrip("-").isdigit() and int(devices) > 0:
        count = int(devices)
    else:  # -1 or "auto": every visible GPU
        count = torch.cuda.device_count() or 1
    return max(count, 1) * max(int(trainer.get("num_nodes", 1) or 1), 1)


def check_memory(model: dict[str, Any] | ModelConfig, accelerator: str, task: str | None = None,
                 sharded_over: int = 1) -> None:  # fmt: skip
    """Refuse, with the numbers, a model whose training state cannot fit before allocating it.

    The parameters are counted exactly (:func:`parameter_count`); activations come on top
    of this lower bound. A sharded strategy keeps ``1 / sharded_over`` of the state on each
    device.
    """
    cfg = model if isinstance(model, ModelConfig) else ModelConfig.from_dict(model)
    params = parameter_count(cfg, task)
    need = params * TRAINING_BYTES_PER_PARAM / max(sharded_over, 1)
    have = available_memory(accelerator)
    if have is not None and need > have[0]:
        gib = 2**30
        share = f", sharded over {sharded_over} devices" if sharded_over > 1 else ""
        raise ConfigError(
            f"model.d_model={cfg.d_model}, model.n_layers={cfg.n_layers} give "
            f"{params / 1e9:.2f} G parameters, which need at least {need / gib:.1f} GiB for "
            f"weights, gradients and AdamW state ({TRAINING_BYTES_PER_PARAM} bytes each"
            f"{share}), but {have[0] / gib:.1f} GiB is {have[1]}; choose a smaller "
            "model.d_model or n_layers"
        )
    if have is not None and cfg.get("param") == "mup":
        from attnlab.models.parametrization import base_config

        # μP builds the model once more at its base width, to scale each weight from it
        base = parameter_count(base_config(cfg), task)
        if (params + base) * 4 > have[0]:  # both in float32 while the model is built
            raise ConfigError(
                f"model.mup_base_width={cfg.mup_base_width}: μP builds the model at its base "
                f"width too, {base / 1e9:.2f} G parameters, which with the model's need "
                f"{(params + base) * 4 / 2**30:.1f} GiB, but {have[0] / 2**30:.1f} GiB is "
                f"{have[1]}; choose a smaller model.mup_base_width (the width the learning "
                "rate was tuned at)"
            )


def parameter_count(cfg: ModelConfig, task: str | None) -> int:
    """The parameters of the model ``cfg`` describes, counted on the ``meta`` device (shapes,
    no storage, no random numbers drawn) at one layer and at two per depth key: the count is
    affine in each, so a model of any depth is counted in milliseconds. μP changes no shape,
    so the SP architecture is what is built."""
    import warnings

    import torch

    from attnlab.components.feeding import TASK_KINDS

    architecture = cfg.architecture
    task = task or next(t for t in TASK_KINDS if architecture.feeding.serves(t))
    depths = {key: getattr(cfg, name) for key, name in (("n_layers", "n_layers"),
              ("n_encoder_layers", "encoder_layers"), ("n_decoder_layers", "decoder_layers"))
              if key in cfg}  # fmt: skip
    sp = {"param": "sp"} if "param" in cfg else {}

    def count(**deeper: int) -> int:
        shallow = cfg.replace(**sp, **{**dict.fromkeys(depths, 1), **deeper})
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's "dropout needs num_layers > 1"
            return int(architecture.build(shallow, task).num_params())

    try:
        base = count()
        return base + sum((count(**{k: 2}) - base) * (n - 1) for k, n in depths.items())
    except RuntimeError as exc:  # a weight of 2^63 elements or more: torch cannot size it
        if "overflow" not in str(exc):
            raise
        return 2**63


def build_model_within_memory(model_cfg: ModelConfig, task: str, accelerator: str,
                              sharded_over: int = 1) -> Any:  # fmt: skip
    """The run's model, built once its parameters (and μP's base model's) are counted and
    refused in :func:`check_memory`'s words when they cannot fit: a model too large is never
    allocated (one weight too large would fail in the allocator, a deep stack would take
    minutes to build)."""
    from attnlab.models import build_model

    check_memory(model_cfg, accelerator, task, sharded_over)
    return build_model(model_cfg, task)


def last_logged(trainer: L.Trainer) -> dict[str, float]:
    """The last value of every metric in the run's metrics.csv but the test ones: what a
    resumed run had logged before (its last validation), for a summary that keeps every
    metric when the resumed fit has no step left to log anew."""
    from lightning.pytorch.loggers import CSVLogger

    from attnlab.compare.runs import CsvCurves

    logger = next((lg for lg in trainer.loggers if isinstance(lg, CSVLogger)), None)
    if logger is None:
        return {}
    logger.save()
    curves = CsvCurves(Path(logger.log_dir) / "metrics.csv")
    last = {name: float(curves.curve(name)[1][-1]) for name in curves.names()}
    return {k: v for k, v in last.items() if not k.startswith("test/") and math.isfinite(v)}


def data_values(datamodule: AttnlabDataModule) -> dict[str, Any]:
    """The model keys only the data knows: the vocabulary size, and an image data module's
    ``model_inputs`` (image size, channels, patch size)."""
    return {"vocab_size": datamodule.vocab_size, **(getattr(datamodule, "model_inputs", None)
                                                     or {})}  # fmt: skip


def build_task(
    cfg: DictConfig, datamodule: AttnlabDataModule, checked: ModelConfig | None = None
) -> Task:
    """The task and its model. ``checked``: the ModelConfig :func:`check_config` returned,
    which only the data's values are added to (else the settings are checked here)."""
    base = checked if checked is not None else ModelConfig.from_dict(container(cfg.model))
    model_cfg = base.with_data({k: v for k, v in data_values(datamodule).items() if k in base})
    model = model_cfg.to_dict()  # what the checkpoint keeps: the resolved keys
    accelerator = str(cfg.trainer.get("accelerator", "cpu"))
    if getattr(datamodule, "document_mask", False):
        check_document_mask(model_cfg)
    task_cls = task_class(datamodule.task)
    longest = datamodule.longest()
    if longest:
        model_cfg.architecture.check_lengths(model_cfg, max(longest.values()))
    architecture = build_model_within_memory(model_cfg, task_cls.kind, accelerator,
                                             shards(cfg.trainer))  # fmt: skip
    if cfg.get("train", True):
        check_trains_here(model, accelerator)
    task = task_cls(
        model=model,
        optim=container(cfg.optim),
        task=container(cfg.get("task")),
        decode=container(cfg.get("decode")),
        num_classes=datamodule.num_classes,
        seed=int(cfg.seed),
        model_config=model_cfg,
        architecture=architecture,
    )
    check_positions(task, datamodule)
    if data_parallel(cfg.trainer) and datamodule.task == "classification":
        freeze_unreached(task)
    return task


def check_document_mask(model_cfg: ModelConfig) -> None:
    """``data.document_mask=true`` needs a Transformer whose attention takes a dense mask."""

    name = model_cfg.name
    if not model_cfg.architecture.takes_documents:
        raise ConfigError(
            f"data.document_mask=true masks attention between documents, and model={name} "
            "takes no such mask; use model=decoder_only or model=encoder_only, or set "
            "data.document_mask=false"
        )
    if model_cfg.attention != "full" or model_cfg.attn_impl == "flex":
        what = (f"model.attention={model_cfg.attention}" if model_cfg.attention != "full"
                else "model.attn_impl=flex")  # fmt: skip
        raise ConfigError(
            f"data.document_mask=true adds a dense mask, which {what} does not take; use "
            "model.attention=full with model.attn_impl=sdpa or math, or set "
            "data.document_mask=false"
        )


def data_parallel(trainer: Any) -> bool:
    """Whether the strategy is DDP that expects every parameter to get a gradient
    (``find_unused_parameters=False``, Lightning's default for ``ddp``)."""
    name = strategy_name(trainer).lower()
    if name.endswith("ddpstrategy"):
        return not trainer.strategy.get("find_unused_parameters")
    return name.startswith("ddp") and "find_unused_parameters_true" not in name


def freeze_unreached(task: Task) -> list[str]:
    """Freeze the parameters no classification loss reaches, and return their names.

    A classifier can hold parameters its loss never uses: an encoder-decoder pooling the
    encoder by mean leaves its decoder idle, and an untied output projection is only for
    language modelling. DDP with ``find_unused_parameters=False`` waits for their
    gradients and fails at the second step; frozen, DDP skips them. AdamW already skipped
    them (no gradient), so training is unchanged. Found by one backward pass on a
    two-token input, under a forked random state.
    """
    import torch

    params = [(n, p) for n, p in task.named_parameters() if p.requires_grad]
    example = torch.full((1, 2), 6, dtype=torch.long)
    with torch.random.fork_rng(), torch.enable_grad():
        out = task(example).float().sum()
        grads = torch.autograd.grad(out, [p for _, p in params], allow_unused=True)
    frozen = []
    for (name, param), grad in zip(params, grads, strict=True):
        if grad is None:
            param.requires_grad_(False)
            frozen.append(name)
    return frozen


def check_positions(task: Task, datamodule: AttnlabDataModule) -> None:
    """A position table (``model.pos=learned``) reaches every position the data feeds.

    The data module's longest sequences are laid out as the task feeds the model (BOS +
    target, ``source SEP target EOS``, a block of ``block_size`` tokens), so a run that
    would stop mid-step at its longest batch is refused before it starts.
    """
    import torch

    from attnlab.inference.generation import has_position_table

    cfg = task.model_cfg
    if not has_position_table(task.model):
        return  # no positions (model=rnn), or no table to run past
    longest = datamodule.longest()
    if not longest:
        return
    shapes = {key: torch.zeros(1, n, dtype=torch.long) for key, n in longest.items()}
    needed = max(task.sequence_lengths(shapes))
    if needed > cfg.max_len:
        lengths = ", ".join(f"{key} {n}" for key, n in longest.items())
        raise ConfigError(
            f"model.max_len={cfg.max_len} is shorter than the {needed} positions the data's "
            f"longest sequence takes (longest {lengths} tokens) with model.pos={cfg.pos}; set "
            f"model.max_len>={needed}, shorten the data, or use a scheme without a table "
            "(model.pos=rope, alibi, sinusoidal)"
        )


def build_callbacks(cfg: DictConfig, outcome: Outcome | None = None) -> list[L.Callback]:
    """The configured callbacks, plus the ones every run needs whatever is configured:
    random states and the loader's position in checkpoints (exact resume), a stop on a
    NaN/inf loss, and a clean stop with a checkpoint on Ctrl-C or a cluster's preemption
    signal. ``outcome``: where the callbacks that can end the run early report it
    (``run_inputs``)."""
    run = {"outcome": outcome if outcome is not None else Outcome()}
    nodes = cfg.get("callbacks") or {}
    bar = cfg.trainer.get("enable_progress_bar", True) and not cfg.trainer.get("fast_dev_run")
    callbacks = []
    for name, node in nodes.items():
        if not node or "_target_" not in node:
            continue
        needs = needs_of(component_class(node))
        if needs.with_progress_bar and not bar:
            continue
        callbacks.append(build(node, f"callbacks.{name}", **supplied(needs, run)))
    for required in (RngState, LoaderPosition, DivergenceGuard, GracefulStop,
                     ValidateAtMaxSteps):  # fmt: skip
        if not any(isinstance(c, required) for c in callbacks):
            callbacks.append(required(**supplied(needs_of(required), run)))
    return callbacks


def build_loggers(cfg: DictConfig, run_dir: Path, resume_step: int | None = None) -> list[Logger]:
    """The configured loggers; the CSV logger (metrics.csv) is always among them.

    ``resume_step``: the step of the checkpoint this run continues; metrics.csv keeps
    its rows up to that step instead of being started anew.
    """
    from attnlab.components import locate

    run = {"resume_step": resume_step}
    loggers: list[Logger] = []
    for name, node in (cfg.get("logger") or {}).items():
        if not node or "_target_" not in node:
            continue
        needs = needs_of(component_class(node))
        if needs.factory is not None:
            loggers.append(locate(needs.factory)(cfg, node, run_dir))
        else:
            loggers.append(build(node, f"logger.{name}", **supplied(needs, run)))
    if not any(isinstance(lg, CSVLogger) for lg in loggers):
        csv = ContinuedCSVLogger(str(run_dir), name="", version="", resume_step=resume_step)
        loggers.insert(0, csv)
    return loggers


def precision_for_gpu(precision: Any, accelerator: Any) -> tuple[Any, str | None]:
    """``trainer.precision`` for this machine: bf16 on a GPU without bf16 (before Ampere:
    V100, T4) becomes ``16-mixed`` (fp16 with loss scaling), with a one-line note. Only
    native bf16 counts: torch also calls a GPU that emulates it (slowly) supported."""
    import torch

    wants_bf16 = str(precision).startswith("bf16")
    on_gpu = str(accelerator) in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    if not (wants_bf16 and on_gpu) or torch.cuda.is_bf16_supported(including_emulation=False):
        return precision, None
    name = torch.cuda.get_device_name()
    return "16-mixed", (f"note: {name} does not support bf16; training with "
                        "trainer.precision=16-mixed (fp16 with loss scaling) instead")  # fmt: skip


def build_trainer(
    cfg: DictConfig, run_dir: Path, callbacks: list[L.Callback], loggers: list[Logger] | bool
) -> L.Trainer:
    """The Trainer; checkpoints are written atomically unless trainer.plugins says otherwise."""
    extra: dict[str, Any] = {}
    if not cfg.trainer.get("plugins"):
        extra["plugins"] = [AtomicCheckpointIO()]
    trainer = cfg.trainer
    precision, note = precision_for_gpu(trainer.get("precision"), trainer.get("accelerator"))
    if note is not None:
        extra["precision"] = precision
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            print(note, flush=True)
    return build(
        cfg.trainer, "trainer", callbacks=callbacks, logger=loggers,
        default_root_dir=str(run_dir), **extra,
    )  # fmt: skip


def checkpoint_to_resume(cfg: DictConfig, run_dir: Path) -> str | None:
    """The checkpoint ``ckpt_path`` names (``last``: this run's own last.ckpt, if any)."""
    ckpt = cfg.get("ckpt_path")
    if ckpt in (None, ""):
        return None
    if ckpt == "last":  # inside a sweep job: this job's own last checkpoint, if any
        last = run_dir / "checkpoints" / "last.ckpt"
        return str(last) if last.is_file() else None
    if not Path(str(ckpt)).is_file():
        raise CheckpointError(f"ckpt_path={ckpt} does not exist; give an existing .ckpt file")
    return str(ckpt)


def check_resumable(task: Task, path: str) -> int | None:
    """Open the checkpoint to resume from and return its global step.

    It is read with ``weights_only=True`` (:func:`read_checkpoint`) and its weights are
    checked against this run's model, so an unsafe, corrupt or foreign file is refused in
    one line (naming the model.* key that differs) before Lightning loads it.
    """
    from attnlab.cli.checkpoints import check_weights_fit, read_checkpoint

    checkpoint = read_checkpoint(Path(path))
    saved = (checkpoint.get("hyper_parameters") or {}).get("model")
    check_weights_fit(task, checkpoint["state_dict"], Path(path), saved, dict(task.hparams.model))
    step = checkpoint.get("global_step")
    return int(step) if step is not None else None


def best_checkpoint(trainer: L.Trainer) -> str | None:
    callback = trainer.checkpoint_callback
    path = getattr(callback, "best_model_path", "") if callback is not None else ""
    return path or None


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out
