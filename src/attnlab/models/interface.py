"""The architecture interface: all that tasks, generation, diagnostics and the bench ask of a model.

An architecture is one subclass of :class:`Architecture` registered by name in
``ARCHITECTURES``; its class attribute ``feeding`` (a :class:`Feeding`) declares
how each task feeds it, so no caller ever checks a model's class:

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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor, nn

from attnlab.errors import ConfigError
from attnlab.registry import Registry

if TYPE_CHECKING:
    from attnlab.model_config import ModelConfig

TASK_KINDS = ("seq2seq", "lm", "classification", "image_classification")
SEQ2SEQ_LAYOUTS = ("teacher_forcing", "source_sep_target")
LM_LAYOUTS = ("causal", "masked")


@dataclass(frozen=True)
class Feeding:
    """How each task feeds an architecture; ``None``: the task does not apply to it.

    ``pools``: the ``model.pool`` values ``pooled`` accepts (the first is the default
    when a classification layout is not given). ``refusals``: per task, why it does
    not apply and what to use instead (the one-line error a user sees).
    """

    seq2seq: str | None = None
    lm: str | None = None
    classification: str | None = None
    image_classification: str | None = None
    pools: tuple[str, ...] = ()
    refusals: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.seq2seq in (None, *SEQ2SEQ_LAYOUTS), self.seq2seq
        assert self.lm in (None, *LM_LAYOUTS), self.lm
        for pool in (self.classification, self.image_classification):
            assert pool is None or pool in self.pools, (pool, self.pools)

    def layout(self, task: str) -> str | None:
        return getattr(self, task, None)

    def serves(self, task: str) -> bool:
        return self.layout(task) is not None

    def refusal(self, task: str) -> str:
        if task == "image_classification":
            default = "it reads token sequences, not images; use model=vit"
        else:
            default = f"it declares no way to be fed {task} data"
        return self.refusals.get(task, default)

    def prompt_layout(self, task: str) -> str | None:
        """How generation lays out its inputs for ``task``: ``source`` (right-padded
        source tokens, decoding from BOS), ``prompt`` (a left-padded prompt the model
        continues) or None (this architecture does not generate for the task)."""
        if task == "seq2seq" and self.seq2seq == "teacher_forcing":
            return "source"
        if (task == "seq2seq" and self.seq2seq == "source_sep_target") or (
            task == "lm" and self.lm == "causal"
        ):
            return "prompt"
        return None

    def default_pool(self, task: str) -> str | None:
        layout = self.layout(task)
        return layout if task.endswith("classification") else None


class Architecture(nn.Module):
    """Base class of every architecture. Subclasses set ``feeding`` and build in ``__init__``.

    ``task`` is the kind of data the model will be fed (one of ``TASK_KINDS``): an
    architecture that serves several tasks may build different parts for each (the
    recurrent baseline has no encoder as a language model).
    """

    feeding: ClassVar[Feeding] = Feeding()
    takes_grid: ClassVar[bool] = False  # reads image patches: 2-D position schemes apply
    attention_heads: ClassVar[bool] = True  # n_heads, pos and the head-size rules apply
    takes_positions: ClassVar[bool] = True  # reads model.pos (a table bounds its length)
    causal_attention: ClassVar[bool] = False  # has causal self-attention (a decoder)
    takes_prefix_lm: ClassVar[bool] = False  # model.prefix_lm applies (decoder_only)
    takes_documents: ClassVar[bool] = False  # forward(tokens, documents=…): document masking
    # the family of decoding states that generates with it (attnlab.inference.DECODINGS);
    # None: it does not generate
    decoding: ClassVar[str | None] = None

    def __init__(self, cfg: ModelConfig, task: str = "lm") -> None:
        super().__init__()
        self.cfg, self.task = cfg, task

    @classmethod
    def check(cls, cfg: ModelConfig) -> None:
        """Raise ConfigError for options this architecture cannot take (before data loads);
        with ``attention_heads``, each component of its Transformer stacks checks its keys."""
        from attnlab.nn.positions import POSITIONS

        if cfg.prefix_lm and not cls.takes_prefix_lm:
            raise ConfigError("model.prefix_lm=true applies to model=decoder_only only; remove it")
        if cls.attention_heads:
            from attnlab.models.stack import TransformerStack

            TransformerStack.check_config(cfg)
        if POSITIONS.get(cfg.pos).needs_grid and not cls.takes_grid:
            raise ConfigError(
                f"model.pos={cfg.pos} places image patches on a grid and model={cfg.name} reads "
                "sequences; use it with model=vit, or choose a 1-D scheme (learned, "
                "sinusoidal, rope, …)"
            )
        from attnlab.nn.attention_kinds import ATTENTION_KINDS

        kind = ATTENTION_KINDS.get(cfg.attention)
        if cfg.attention != "full" and not cls.attention_heads:
            raise ConfigError(f"model.attention={cfg.attention} applies to Transformers, not "
                              f"model={cfg.name}; remove it")  # fmt: skip
        if cfg.activation_checkpointing and not cls.attention_heads:
            raise ConfigError(
                "model.activation_checkpointing=true checkpoints Transformer layers, which "
                f"model={cfg.name} has none of; remove it"
            )
        if not cfg.bias and not cls.attention_heads:
            raise ConfigError(
                "model.bias=false removes the biases of Transformer layers, which "
                f"model={cfg.name} has none of; remove it"
            )
        if cls.causal_attention and not kind.causal_ok:
            raise ConfigError(kind.causal_error)
        from attnlab.models.parametrization import check as check_parametrization

        check_parametrization(cfg, transformer_stacks=cls.attention_heads)
        pools = cls.feeding.pools
        if cfg.pool is not None and cfg.pool not in pools:
            name = cfg.name
            if not pools:
                raise ConfigError(f"model.pool={cfg.pool} does not apply to model={name}; "
                                  "remove it")  # fmt: skip
            raise ConfigError(
                f"model.pool={cfg.pool} is not valid for model={name}; use one of: "
                f"{', '.join(pools)}"
            )

    @classmethod
    def check_lengths(cls, cfg: ModelConfig, longest: int, what: str = "the data") -> None:
        """Raise ConfigError for sizes that the data's ``longest`` sequence makes pointless
        (checked before the model is built); nothing by default."""

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


ARCHITECTURES: Registry[type[Architecture]] = Registry("model")


def architecture(name: str) -> type[Architecture]:
    """The registered class of ``model=<name>``; ConfigError listing the names otherwise."""
    return ARCHITECTURES.get(name)
