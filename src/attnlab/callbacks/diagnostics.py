"""Training-dynamics diagnostics (``callbacks=diagnostics``), logged under ``diag/…``.

At step 0 and every ``every_n_steps`` optimizer steps, for every layer ``i`` of
every stack (``encoder``, ``decoder``):

* ``diag/grad_norm/<stack>.<i>.{attn,cross_attn,ffn,block}``  ‖∇θ‖₂ of each
  sublayer (its residual wrapper's norm included) and of the whole layer,
  after backward and before gradient clipping;
* ``diag/grad_ratio_last_first``  block gradient norm of the last layer over
  the first, in the stack nearest the output (the decoder when there is one).
  Xiong et al. 2020 (§3.3, Fig. 3): at initialisation Post-LN's gradients grow
  toward the output layers, more so the deeper the stack; Pre-LN's do not (flat
  in the paper; ≤ 1 in attnlab's models, see experiments/depth_stability);
* ``diag/resid_rms/<stack>.<i>``  RMS of the residual stream after layer i;
* ``diag/update_ratio/<stack>.<i>``  ‖Δθ‖ / ‖θ‖ of the layer over that optimizer step;
* ``diag/attn_entropy/<stack>.<i>[.cross]`` (mean over heads) and ``….h<j>``
  (head j): the entropy −Σ_k p_k log p_k of each query's attention row, in nats,
  averaged over the real queries of a fixed probe batch (the first validation
  batch, taken once). log T_k is uniform attention, 0 is one-hot.

At step 0, every ``image_every_n_steps`` and at the end of training, the
probe's attention maps (first example, a grid of heads per layer) are saved as
``<run_dir>/diagnostics/attention_step<k>_<stack>_layer<i>.png`` and sent to
TensorBoard / W&B when those loggers are configured.

Learning rate and tokens/s are logged by LearningRateMonitor and TokenThroughput.
Values go straight to the loggers at the step they describe (not through
``self.log``), so ``log_every_n_steps`` does not thin them out and they do not
crowd the final metrics of summary.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from attnlab.callbacks.attention_maps import (
    AttentionMap,
    attention_figure,
    entropy_metrics,
    figure_rgb,
    forward_with_labels,
    patch_attention_figure,
    probe_attention,
    transformer_layers,
)

# sublayer name -> the layer attributes that hold its parameters
SUBLAYERS = {
    "attn": ("self_attn", "attn_residual"),
    "cross_attn": ("cross_attn", "cross_residual"),
    "ffn": ("ffn", "ffn_residual"),
}


def _norm(tensors: list[Tensor]) -> Tensor:
    """‖concat(tensors)‖₂ without concatenating."""
    norms = [torch.linalg.vector_norm(t.float()) for t in tensors]
    return torch.linalg.vector_norm(torch.stack(norms))


def gradient_norms(model: nn.Module) -> dict[str, float]:
    """‖∇θ‖₂ from ``.grad`` per sublayer and layer (``"decoder.3.ffn"``, ``"decoder.3.block"``)."""
    names, values = [], []
    for name, layer in transformer_layers(model):
        for sublayer, parts in SUBLAYERS.items():
            modules = [m for part in parts if (m := getattr(layer, part, None)) is not None]
            grads = [p.grad for m in modules for p in m.parameters() if p.grad is not None]
            if grads:
                names.append(f"{name}.{sublayer}")
                values.append(_norm(grads))
        grads = [p.grad for p in layer.parameters() if p.grad is not None]
        if grads:
            names.append(f"{name}.block")
            values.append(_norm(grads))
    return dict(zip(names, torch.stack(values).tolist(), strict=True)) if values else {}


def last_first_ratio(norms: dict[str, float], stack: str | None = None) -> float | None:
    """Block gradient norm of the last layer over the first in ``stack`` (default: the last)."""
    blocks = [k for k in norms if k.endswith(".block")]
    stack = stack or (blocks[-1].split(".")[0] if blocks else None)
    blocks = [k for k in blocks if k.split(".")[0] == stack]
    if len(blocks) < 2 or norms[blocks[0]] == 0:
        return None
    return norms[blocks[-1]] / norms[blocks[0]]


def initial_gradient_profile(task: nn.Module, batch: dict[str, Any]) -> dict[str, float]:
    """:func:`gradient_norms` after one backward pass of the training loss on ``batch``.

    No update is made and dropout is off, as in Xiong et al.'s analysis at initialisation.
    """
    was_training = task.training
    task.eval()
    task.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            logits, labels = forward_with_labels(task, batch)
            task.loss(logits, labels).backward()
        return gradient_norms(task.model)
    finally:
        task.zero_grad(set_to_none=True)
        task.train(was_training)


# -- the callback ------------------------------------------------------------------------------
class TrainingDiagnostics(L.Callback):
    """Gradient norms, residual RMS, update ratios, attention entropy and maps (module doc).

    Lightning 2.6 hook order per optimizer step: ``on_train_batch_start`` (probe
    the attention maps, arm the residual hooks) → training_step → backward →
    ``on_before_optimizer_step`` (gradients, before clipping; snapshot weights)
    → clip → ``optimizer.step()`` → ``on_train_batch_end`` (update ratio).
    """

    def __init__(
        self,
        every_n_steps: int = 50,
        image_every_n_steps: int | None = 500,
        probe_size: int = 4,
        output_dir: str | None = None,
    ) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps={every_n_steps} must be >= 1")
        self.every_n_steps = every_n_steps
        self.image_every_n_steps = image_every_n_steps
        self.probe_size = probe_size
        self.output_dir = output_dir
        self.probe: dict[str, Any] | None = None
        self._step: int | None = None  # the optimizer step being diagnosed
        self._capture = False  # residual hooks armed for this step's training forward
        self._resid: dict[str, Tensor] = {}
        self._pending: dict[str, float] = {}  # this step's values, logged as one row
        self._before: dict[str, list[Tensor]] | None = None
        self._hooks: list[Any] = []
        self._last_image_step: int | None = None
        self.off = False  # under FSDP: no rank holds whole weights to diagnose

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        from lightning.pytorch.strategies import FSDPStrategy
        from lightning.pytorch.utilities import rank_zero_warn

        if isinstance(trainer.strategy, FSDPStrategy):
            self.off = True
            rank_zero_warn("callbacks=diagnostics is off under FSDP: its probe forward and "
                           "weight norms run on rank 0, which holds only shards; diagnose "
                           "with trainer=ddp or one GPU")  # fmt: skip

    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.is_global_zero and not self.off:
            self._hooks = [
                layer.register_forward_hook(lambda _m, _a, out, n=name: self._record_resid(n, out))
                for name, layer in transformer_layers(pl_module.model)
            ]

    def on_fit_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if self.off or not trainer.is_global_zero:
            return
        if step % self.every_n_steps or step == self._step:
            return
        if self.probe is None:
            self.probe = self._take_probe(trainer, pl_module, batch)
        maps = probe_attention(pl_module, self.probe)
        self._pending = self._named("attn_entropy/", entropy_metrics(maps))
        every = self.image_every_n_steps
        if every and step % every == 0:
            self._draw(trainer, maps, step)
        self._step, self._capture, self._resid = step, True, {}

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: Any, optimizer: Any) -> None:
        if not self._capture:
            return
        self._capture = False
        norms = gradient_norms(pl_module.model)
        self._pending.update(self._named("grad_norm/", norms))
        ratio = last_first_ratio(norms)
        if ratio is not None:
            self._pending["diag/grad_ratio_last_first"] = ratio
        resid = {name: float(rms) for name, rms in self._resid.items()}
        self._pending.update(self._named("resid_rms/", resid))
        self._before = {
            name: [p.detach().clone() for p in layer.parameters()]
            for name, layer in transformer_layers(pl_module.model)
        }

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._before is None:
            return
        ratios = {}
        for name, layer in transformer_layers(pl_module.model):
            before = self._before[name]
            delta = _norm([p.detach() - b for p, b in zip(layer.parameters(), before, strict=True)])
            ratios[name] = float(delta / _norm(before).clamp(min=1e-12))
        self._pending.update(self._named("update_ratio/", ratios))
        for logger in trainer.loggers:
            logger.log_metrics(self._pending, step=self._step)
        self._before, self._pending = None, {}

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        step = trainer.global_step
        if trainer.is_global_zero and self.probe is not None and self.image_every_n_steps \
                and step != self._last_image_step:  # fmt: skip
            self._draw(trainer, probe_attention(pl_module, self.probe), step)

    def _record_resid(self, name: str, out: Tensor) -> None:
        if self._capture and torch.is_grad_enabled():
            self._resid[name] = out.detach().float().pow(2).mean().sqrt()

    def _take_probe(self, trainer: L.Trainer, pl_module: Any, batch: Any) -> dict[str, Any]:
        """The first validation batch (this training batch if there is none), cut to probe_size."""
        try:
            # fork the RNG: starting a DataLoader draws a seed, which would shift training's dropout
            with torch.random.fork_rng(devices=[]):
                batch = next(iter(trainer.datamodule.val_dataloader()))
        except Exception:  # no data module or no validation data
            pass
        n = self.probe_size
        return {
            k: v[:n].to(pl_module.device) if isinstance(v, Tensor) else v[:n]
            for k, v in batch.items()
        }

    @staticmethod
    def _named(group: str, values: dict[str, float]) -> dict[str, float]:
        return {f"diag/{group}{k}": v for k, v in values.items()}

    def _draw(self, trainer: L.Trainer, maps: dict[str, AttentionMap], step: int) -> None:
        from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

        out_dir = Path(self.output_dir or Path(trainer.default_root_dir) / "diagnostics")
        out_dir.mkdir(parents=True, exist_ok=True)
        tokenizer = getattr(getattr(trainer, "datamodule", None), "tokenizer", None)
        grid = trainer.lightning_module.model.patch_grid()
        for name, m in maps.items():
            stack, index, *cross = name.split(".")
            label = f"{stack}-cross" if cross else stack
            title = f"{label} layer {index}, step {step}"
            if grid is not None:  # a ViT with [CLS]: its attention over the patch grid
                fig = patch_attention_figure(m, grid, (self.probe or {}).get("pixels"), title=title)
            else:
                fig = attention_figure(m, 0, tokenizer, title=title)
            path = out_dir / f"attention_step{step}_{label}_layer{index}.png"
            fig.savefig(path, dpi=80)
            key = f"diag/attention/{label}.{index}"
            for logger in trainer.loggers:
                if isinstance(logger, WandbLogger):
                    logger.log_image(key=key, images=[str(path)], step=step)
                elif isinstance(logger, TensorBoardLogger):
                    logger.experiment.add_image(key, figure_rgb(fig), step, dataformats="HWC")
        self._last_image_step = step
