"""How each task feeds an architecture (no torch): the declaration tasks, generation and the
pre-flight checks read, so no caller ever checks a model's class."""

from __future__ import annotations

from dataclasses import dataclass, field

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
