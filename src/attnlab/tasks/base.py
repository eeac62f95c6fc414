"""What every task shares: the model, the optimiser and the learning-rate schedule.

A task is how a variant is fed and what loss it learns; the architecture
itself comes from :mod:`attnlab.models`.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from attnlab.compat import logs_this_step
from attnlab.errors import ConfigError
from attnlab.inference.generation import DecodeConfig
from attnlab.models import Architecture, ModelConfig, build_model
from attnlab.models.parametrization import lr_multipliers
from attnlab.nn.moe import routing_statistics, update_biases
from attnlab.optim.build import _no_decay, build_optimizer, param_groups
from attnlab.optim.registry import optim_config
from attnlab.optim.schedules import decay_start, lr_multiplier, needs_length, shortest_budget
from attnlab.options import SCHEDULES, OptimConfig, TaskConfig

__all__ = ["SCHEDULES", "OptimConfig", "TaskConfig", "Task", "lr_multiplier", "param_groups",
           "_no_decay"]  # fmt: skip


def auxiliary_losses(model: nn.Module) -> dict[str, Tensor]:
    """The losses a model's modules add to the task's: each module's ``aux_losses`` of its
    last training forward (a mixture of experts' balancing and z-losses, :mod:`attnlab.nn.moe`),
    summed by name over the modules, then cleared so that none is counted twice."""
    total: dict[str, Tensor] = {}
    for module in model.modules():
        losses = getattr(module, "aux_losses", None)
        if losses:
            for name, value in losses.items():
                total[name] = total[name] + value if name in total else value
            module.aux_losses = {}
    return total


def attached_trainer(module: L.LightningModule) -> L.Trainer | None:
    """The Trainer ``module`` is attached to, or None (Lightning's ``module.trainer`` raises
    then: a module used on its own, as in unit tests)."""
    try:
        return module.trainer
    except RuntimeError:
        return None


def is_fsdp(module: Any) -> bool:
    """Whether ``module`` is an FSDP root (torch's FullyShardedDataParallel)."""
    if module is None or not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(module, FullyShardedDataParallel)


def z_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """mean of log²Z over the positions whose label is not -100, Z = Σ_v exp(logit_v) the
    softmax's normaliser: "an auxiliary loss of z_loss = 10⁻⁴ · log² Z to encourage the
    softmax normalizer log(Z) to be close to 0" (Chowdhery et al. 2022, PaLM, §5)."""
    log_z = torch.logsumexp(logits.float(), dim=-1)  # (…,)
    real = labels != -100
    return (log_z.square() * real).sum() / real.sum().clamp(min=1)


class Task(L.LightningModule):
    """Base LightningModule: builds the model from ``model`` and owns the optimiser."""

    kind = "lm"

    def __init__(
        self,
        model: dict[str, Any],
        optim: dict[str, Any] | None = None,
        task: dict[str, Any] | None = None,
        decode: dict[str, Any] | None = None,
        num_classes: int | None = None,
        seed: int = 0,
        model_config: ModelConfig | None = None,
        architecture: Architecture | None = None,
    ) -> None:
        """``model``: the ``model.*`` settings (saved with the checkpoint); ``model_config``:
        the same, already checked, and ``architecture``: the model already built from it (a
        run passes both, so the config is validated and the model built once)."""
        super().__init__()
        self.save_hyperparameters(ignore=["model_config", "architecture"])
        self.model_cfg = model_config or ModelConfig.from_dict(dict(model), strict=False)
        self.optim_cfg = optim_config(optim, strict=False)
        self.task_cfg = TaskConfig(**(task or {}))
        if self.task_cfg.z_loss and self.kind not in ("lm", "seq2seq"):  # never dropped silently
            raise ConfigError(f"task.z_loss={self.task_cfg.z_loss} is PaLM's loss on a language "
                              f"model's output softmax, and this task is {self.kind}; set "
                              "task.z_loss=0")  # fmt: skip
        self.decode_cfg = DecodeConfig(**(decode or {}))
        self.seed = seed
        self.model: Architecture = (
            architecture if architecture is not None else build_model(self.model_cfg, self.kind)
        )
        self.label_smoothing = self.task_cfg.label_smoothing

    def setup(self, stage: str) -> None:
        if self.model_cfg.compile and not getattr(self, "_compiled", False):
            self.model.compile()
            self._compiled = True

    def log_train_loss(self, loss: Tensor, batch_size: int) -> None:
        """Log ``train/loss`` on the steps whose metrics reach the loggers.

        Lightning writes step metrics every ``trainer.log_every_n_steps`` optimizer steps
        (and at a stop) and drops the values logged in between, so only those steps call
        ``self.log`` (about 0.6 ms a call on a CPU): the logged series is the same, and the
        progress bar's loss is the one of the last logged step.
        """
        if self._logs_this_step():
            self.log("train/loss", loss, prog_bar=True, batch_size=batch_size)

    def with_auxiliary_losses(self, loss: Tensor, batch_size: int) -> Tensor:
        """The loss to optimise: the task's ``loss`` plus the model's auxiliary losses of this
        forward (:func:`auxiliary_losses`), each logged as ``train/<name>`` with the routing
        statistics of a mixture of experts, on the steps ``train/loss`` is logged."""
        extra = auxiliary_losses(self.model)
        if self._logs_this_step():
            for name, value in {**extra, **routing_statistics(self.model)}.items():
                self.log(f"train/{name}", value, batch_size=batch_size)
        return loss + sum(extra.values()) if extra else loss

    def _logs_this_step(self) -> bool:
        trainer = attached_trainer(self)  # none: log as Lightning would
        return trainer is None or logs_this_step(trainer)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        """Lightning's step, then each MoE layer's balancing bias from the load of that step
        (DeepSeek-V3, §2.1.2): once per optimizer step, after every accumulated batch."""
        super().optimizer_step(*args, **kwargs)
        update_biases(self.model)

    def training_loss(self, logits: Tensor, labels: Tensor, batch_size: int) -> Tensor:
        """The step's objective: the cross-entropy, logged as ``train/loss``, plus, with
        ``task.z_loss`` α, PaLM's auxiliary α·log²Z (:func:`z_loss`), logged apart as
        ``train/z_loss`` so that ``train/loss`` stays comparable across runs, plus the
        model's own auxiliary losses (:meth:`with_auxiliary_losses`)."""
        loss = self.loss(logits, labels)
        self.log_train_loss(loss, batch_size)
        if self.task_cfg.z_loss:
            term = self.task_cfg.z_loss * z_loss(logits, labels)
            if self._logs_this_step():
                self.log("train/z_loss", term, batch_size=batch_size)
            loss = loss + term
        return self.with_auxiliary_losses(loss, batch_size)

    def loss(self, logits: Tensor, labels: Tensor, smoothing: float | None = None) -> Tensor:
        """Cross-entropy over positions whose label is not -100, with label smoothing (§5.4)."""
        return nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            labels.reshape(-1),
            ignore_index=-100,
            label_smoothing=self.label_smoothing if smoothing is None else smoothing,
        )

    def tokens_in_batch(self, batch: dict[str, Tensor]) -> int:
        """Tokens processed in one step, for throughput and MFU."""
        return sum(int(v.numel()) for k, v in batch.items() if v.dim() == 2)

    def flops_in_batch(self, batch: dict[str, Tensor]) -> float:
        """Training FLOPs of one step on ``batch`` (padded shapes), for MFU."""
        src_len, tgt_len = self.sequence_lengths(batch)
        rows = next(iter(batch.values())).size(0)
        return 3.0 * rows * self.model.flops(self.model_cfg, src_len, tgt_len)

    def sequence_lengths(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        """(source, target) lengths the model reads for ``batch``; tasks override."""
        return 0, int(next(iter(batch.values())).size(1))

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.optim_cfg
        groups = param_groups(self.named_parameters(), cfg, lr_multipliers(self))
        params = [p for group in groups for p in group["params"]]
        fused = self._fused(params) if cfg.name in ("adamw", "muon") else False
        names = {id(p): name for name, p in self.named_parameters()}
        optimizer = build_optimizer(groups, cfg, fused, names)
        total = (cfg.decay_steps or self._total_steps()) if needs_length(cfg) else 0
        self.schedule_steps = total
        d_model = self.model_cfg.d_model
        schedule = LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg, d_model, total))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": schedule, "interval": "step"},
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["schedule_steps"] = getattr(self, "schedule_steps", 0)  # the decay's length

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        optim = (checkpoint.get("hyper_parameters") or {}).get("optim")
        self.saved_schedule = (optim_config(optim, strict=False), checkpoint.get("schedule_steps"))

    def on_train_start(self) -> None:
        """A run that continues a checkpoint with another budget is checked
        (:meth:`_check_branch`), then each group's learning rate is set from this run's
        schedule at the step it starts from: a checkpoint holds the rate its own schedule
        set for the next step, and a wsd cool-down takes its first step at its own."""
        self._check_branch()
        scheduler = self.lr_schedulers()
        if isinstance(scheduler, LambdaLR):
            groups = scheduler.optimizer.param_groups
            for group, base, factor in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas,
                                           strict=True):  # fmt: skip
                group["lr"] = base * factor(scheduler.last_epoch)

    def _check_branch(self) -> None:
        """A wsd cool-down branched from a stable run's checkpoint with another budget decays
        over the last ``decay_fraction`` of its own budget: refused when the checkpoint is
        past the start of that decay, or already in its own run's decay (not on the stable
        rate). The same budget resumes as it was, at any step."""
        cfg, saved = self.optim_cfg, getattr(self, "saved_schedule", None)
        trainer = attached_trainer(self)
        if cfg.schedule != "wsd" or saved is None or trainer is None:
            return
        (old, old_steps), step, total = saved, trainer.global_step, self.schedule_steps
        if old_steps == total and old.decay_fraction == cfg.decay_fraction:
            return
        if old.schedule == "wsd" and old_steps and step > decay_start(old, old_steps):
            raise ConfigError(
                f"the checkpoint is at step {step}, in its run's decay (from step "
                f"{decay_start(old, old_steps)} of {old_steps}), not on the stable learning "
                "rate; branch a cool-down from a checkpoint of the stable phase"
            )
        if step > decay_start(cfg, total):
            raise ConfigError(
                f"the checkpoint is at step {step}, past step {decay_start(cfg, total)} where "
                f"optim.schedule=wsd starts decaying over the last optim.decay_fraction="
                f"{cfg.decay_fraction} of {total} steps; give a budget (trainer.max_steps or "
                f"optim.decay_steps) of at least {shortest_budget(cfg, step)} "
                "steps, or an earlier checkpoint"
            )

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:  # fmt: skip
        """Under FSDP the gradient norm is the root module's, over every rank's shards (a
        collective, run on every rank): Lightning's FSDP precision plugin refuses norm
        clipping, which would see one shard. A fused AdamW without a loss scaler (bf16-mixed)
        is clipped here, as Lightning's own clipping does it: Lightning refuses to clip any
        fused optimizer under mixed precision, for fp16's scaler, which bf16 does not have.
        Elsewhere, Lightning's own clipping."""
        trainer = attached_trainer(self)
        root = trainer.model if trainer is not None else None
        norm = (gradient_clip_algorithm or "norm") == "norm"
        if gradient_clip_val and norm and is_fsdp(root):
            root.clip_grad_norm_(gradient_clip_val)  # type: ignore[union-attr]
            return
        if gradient_clip_val and getattr(optimizer, "defaults", {}).get("fused"):
            if not self._loss_scaled():
                params = [p for group in optimizer.param_groups for p in group["params"]]
                if norm:
                    torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
                else:
                    torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
                return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def _fused(self, params: list[Tensor]) -> bool:
        """Fused AdamW (one kernel for all tensors; ~5x faster steps on CPU too), except with
        clipping under a loss scaler (``16-mixed``): the fused step unscales the gradients
        itself, after clipping would have seen them scaled. bf16 has no scaler."""
        trainer = attached_trainer(self)
        clipping = trainer is not None and bool(trainer.gradient_clip_val)
        scaled = self._loss_scaled()
        if self.optim_cfg.fused is not None:
            if self.optim_cfg.fused and scaled and clipping:
                raise ConfigError(
                    "optim.fused=true cannot be combined with gradient clipping under fp16's "
                    "loss scaling (trainer.precision=16-mixed); set optim.fused=null (auto), "
                    "trainer.gradient_clip_val=0 or trainer.precision=bf16-mixed"
                )
            return bool(self.optim_cfg.fused)
        supported = all(p.device.type in ("cpu", "cuda") for p in params)
        return supported and not (scaled and clipping)

    def _loss_scaled(self) -> bool:
        """Whether the trainer scales the loss (fp16's GradScaler, under ``16-mixed``)."""
        plugin = getattr(attached_trainer(self), "precision_plugin", None)
        return getattr(plugin, "scaler", None) is not None

    def _total_steps(self) -> int:
        """The run's optimizer steps, for a schedule that decays over them (``cosine``,
        ``wsd``) when ``optim.decay_steps`` is not set. A trainer setting Lightning refuses
        (``trainer.val_check_interval`` past an epoch) raises its ValueError here, which
        the run reports in one line; a fit whose number of steps is unknown is refused."""
        trainer = attached_trainer(self)
        if trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return 10_000  # a module used on its own, or outside a fit (unit tests)
        steps = trainer.estimated_stepping_batches
        if not 0 < steps < 10**9:
            raise ConfigError(
                f"optim.schedule={self.optim_cfg.schedule} decays over the run's steps, but "
                "their number is unknown (trainer.max_steps=-1 with trainer.max_epochs=-1, "
                "or data of unknown length); set optim.decay_steps or trainer.max_steps"
            )
        return int(steps)
