"""The architecture interface: all that tasks, generation, diagnostics and the bench ask of a model.

An architecture is one subclass of :class:`Architecture`, named by its config (the keys it
reads, its parts, :mod:`attnlab.components.architectures`); its class attribute ``feeding``
(a :class:`Feeding`, its config's) declares how each task feeds it, so no caller ever checks
a model's class:

=====================  ==================================================================
task                   layouts an architecture may declare
=====================  ==================================================================
seq2seq                ``teacher_forcing``:  ``model(src, BOS + target)`` → logits per
                       target position; generation starts from BOS with the source
                       encoded once (Vaswani et al. 2017, §3.1)
                       ``source_sep_target``: ``model(source SEP target)`` as one
                       sequence, loss on the target only; generation continues a
                       left-padded ``source SEP`` prompt
lm                     ``causal``: ``model(tokens)`` predicts token t+1 at t;
                       ``masked``: BERT's 15 % corruption (Devlin et al. 2019, §3.1)
classification,        the default ``model.pool``: how ``pooled(inputs)`` reduces the
image_classification   input to one vector for the task's linear head
=====================  ==================================================================

Every architecture implements ``forward`` (logits), ``flops`` (for MFU and
the bench) and, where its feeding says so, ``pooled`` (classification); one that
generates names its family of decoding states in ``decoding`` and exposes the methods
they call (:mod:`attnlab.inference.decoding`: greedy, sampling and beam search drive a
state one token at a time and reorder it for beams). Nothing here imports Lightning,
Hydra or the inference runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor, nn

from attnlab.components.feeding import LM_LAYOUTS, SEQ2SEQ_LAYOUTS, TASK_KINDS, Feeding
from attnlab.errors import ConfigError
from attnlab.registry import Registry

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig

__all__ = ["ARCHITECTURES", "LM_LAYOUTS", "SEQ2SEQ_LAYOUTS", "TASK_KINDS", "Architecture",
           "Feeding", "architecture"]  # fmt: skip


class Architecture(nn.Module):
    """Base class of every architecture. Subclasses set ``feeding`` and build in ``__init__``.

    ``task`` is the kind of data the model will be fed (one of ``TASK_KINDS``): an
    architecture that serves several tasks may build different parts for each (the
    recurrent baseline has no encoder as a language model).
    """

    # how each task feeds it: its config's (attnlab.components.architectures)
    feeding: ClassVar[Feeding] = Feeding()
    # the family of decoding states that generates with it (attnlab.inference.DECODINGS);
    # None: it does not generate
    decoding: ClassVar[str | None] = None

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__()
        self.cfg, self.task = cfg, task

    def pool_for(self, task: str) -> str:
        """The pooling ``pooled`` applies: ``model.pool`` or the feeding's default."""
        pool = self.cfg.pool or self.feeding.default_pool(task)
        if pool is None:
            raise ConfigError(f"model={self.cfg.name} {self.feeding.refusal(task)}")
        return pool

    def forward(self, *inputs: Tensor, **options: Any) -> Tensor:
        raise NotImplementedError

    def pooled(self, inputs: Tensor) -> Tensor:
        """(B, …) inputs -> (B, d_model): one vector per example for classification."""
        raise ConfigError(f"model={self.cfg.name} {self.feeding.refusal(self.task)}")

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        """Forward FLOPs of one example with ``src_len`` source and ``tgt_len`` target (or
        only) tokens: matrix products only, multiply-add = 2 (see :mod:`attnlab.models.flops`)."""
        raise NotImplementedError

    def stacks(self) -> dict[str, nn.Module]:
        """The Transformer stacks, input side first, for diagnostics ({} when there are none)."""
        return {}

    def patch_grid(self) -> tuple[int, int] | None:
        """(rows, columns) of image patches when position 0 is a [CLS] token and 1… the
        patches in raster order (diagnostics draw [CLS]-to-patch attention); else None."""
        return None

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def num_active_params(self) -> int:
        """The parameters one token uses: all but the experts a mixture of experts does not
        route it to (``model.ffn=moe``)."""
        from attnlab.nn.moe import inactive_params

        return self.num_params() - inactive_params(self)


ARCHITECTURES: Registry[type[Architecture]] = Registry("model")


def architecture(name: str) -> type[Architecture]:
    """The registered class of ``model=<name>``; ConfigError listing the names otherwise."""
    return ARCHITECTURES.get(name)
