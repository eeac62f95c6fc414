"""Typed config sections that need no torch: ``optim``, ``task``, ``decode``, the top level.

Each section is a dataclass whose annotations give every key's type and whose
``__post_init__`` checks ranges; :mod:`attnlab.cli.schema` checks a composed
config against them (and against :class:`attnlab.models.ModelConfig`) before
any run starts. Keeping them free of torch makes a bad value fail fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from attnlab.errors import ConfigError

SCHEDULES = ("cosine", "inverse_sqrt", "constant", "wsd")  # attnlab.optim.registry
OPTIMISERS = ("adamw", "muon", "lion", "adafactor")
DECAY_SHAPES = ("linear", "sqrt", "cosine")
MUON_SCALINGS = ("match_rms_adamw", "original")  # torch.optim.Muon's adjust_lr_fn
STRATEGIES = ("greedy", "sample", "beam")
DECODE_CACHES = ("auto", "static", "dynamic")


def _require(ok: bool, key: str, value: Any, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value} must be {rule}")


@dataclass
class OptimConfig:
    """``optim.*``: the optimiser, its learning rate and the schedule, resolved (each key a
    value; :func:`attnlab.optim.registry.optim_config` checks which keys the chosen
    optimiser and schedule read and fills in their own defaults)."""

    name: str = "adamw"  # adamw | muon | lion | adafactor (attnlab.optim.registry)
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.01
    warmup_steps: int = 100
    schedule: str = "cosine"
    min_lr: float = 0.0  # the floor of a decay
    decay_steps: int | None = None  # None: the trainer's total number of steps
    fused: bool | None = None  # None: fused where Lightning can still clip gradients
    decay_fraction: float = 0.2  # wsd: the share of the steps spent decaying
    decay_shape: str = "sqrt"  # wsd: linear | sqrt (1 - √x) | cosine
    momentum: float = 0.95  # muon
    nesterov: bool = True  # muon
    ns_steps: int = 5  # muon: Newton-Schulz iterations
    adjust_lr: str = "match_rms_adamw"  # muon: match_rms_adamw | original
    beta2_decay: float = -0.8  # adafactor

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        for key, allowed in (("schedule", SCHEDULES), ("name", OPTIMISERS),
                             ("decay_shape", DECAY_SHAPES), ("adjust_lr", MUON_SCALINGS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"optim.{key}={getattr(self, key)} is not valid; use one of: "
                                  f"{', '.join(allowed)}")  # fmt: skip
        _require(self.lr > 0 and math.isfinite(self.lr), "optim.lr", self.lr, "a number > 0")
        _require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "optim.betas",
                 list(self.betas), "two numbers in [0, 1), e.g. [0.9,0.98]")  # fmt: skip
        _require(self.eps > 0, "optim.eps", self.eps, "a number > 0")
        _require(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, ">= 0")
        _require(self.warmup_steps >= 0, "optim.warmup_steps", self.warmup_steps, ">= 0")
        _require(self.min_lr >= 0, "optim.min_lr", self.min_lr, ">= 0")
        _require(self.decay_steps is None or self.decay_steps > 0, "optim.decay_steps",
                 self.decay_steps, "an integer > 0 (or null)")  # fmt: skip
        _require(0 < self.decay_fraction <= 1, "optim.decay_fraction", self.decay_fraction,
                 "in (0, 1], e.g. 0.2")  # fmt: skip
        _require(0 <= self.momentum < 1, "optim.momentum", self.momentum, "in [0, 1)")
        _require(1 <= self.ns_steps <= 100, "optim.ns_steps", self.ns_steps,
                 "an integer in [1, 100] (5 in Jordan et al. 2024)")  # fmt: skip
        _require(self.beta2_decay < 0, "optim.beta2_decay", self.beta2_decay, "< 0, e.g. -0.8")


@dataclass
class TaskConfig:
    """``task.*``: how a task computes its loss and which extra metrics it decodes for."""

    label_smoothing: float = 0.0  # Szegedy et al. 2016; the paper uses 0.1 (§5.4)
    # PaLM's auxiliary loss z_loss·log²Z on the output softmax's normaliser Z (Chowdhery et
    # al. 2022, §5 "Training instability", 1e-4); 0: off. lm and seq2seq data
    z_loss: float = 0.0
    mlm_probability: float = 0.15  # masked LM (Devlin et al. 2019, §3.1)
    bleu: bool | None = None  # None: on for translation data
    decode_every_n_epochs: int = 1  # free-running decoding for val/exact_match (and BLEU)
    # test BLEU per source-length bucket: upper edges in source words, e.g. [10, 15, 20, 25]
    bleu_by_length: list[int] | None = None
    # a causal LM's val/test loss per context-length bucket: upper edges in tokens of context,
    # e.g. [128, 256, 512]
    loss_by_position: list[int] | None = None

    def __post_init__(self) -> None:
        edges = self.bleu_by_length
        if edges is not None:
            edges = list(edges)
            self.bleu_by_length = edges
        _require(edges is None or (bool(edges) and edges == sorted(set(edges)) and edges[0] >= 1),
                 "task.bleu_by_length", edges, "increasing source lengths in words, e.g. "
                 "[10,15,20,25] (or null)")  # fmt: skip
        positions = self.loss_by_position
        if positions is not None:
            positions = list(positions)
            self.loss_by_position = positions
        _require(positions is None or (bool(positions) and positions == sorted(set(positions))
                                       and positions[0] >= 1),
                 "task.loss_by_position", positions, "increasing context lengths in tokens, "
                 "e.g. [128,256,512] (or null)")  # fmt: skip
        _require(0 <= self.label_smoothing < 1, "task.label_smoothing", self.label_smoothing,
                 "in [0, 1) (0.1 in the paper)")  # fmt: skip
        _require(0 <= self.z_loss < math.inf, "task.z_loss", self.z_loss,
                 "a finite number >= 0 (PaLM uses 1e-4; 0: off)")  # fmt: skip
        _require(0 < self.mlm_probability < 1, "task.mlm_probability", self.mlm_probability,
                 "in (0, 1)")  # fmt: skip
        _require(self.decode_every_n_epochs >= 1, "task.decode_every_n_epochs",
                 self.decode_every_n_epochs, "an integer >= 1")  # fmt: skip


@dataclass
class DecodeConfig:
    """``decode.*`` keys. The paper's translation setting is beam 4, α = 0.6 (§6.1)."""

    strategy: str = "greedy"
    max_new_tokens: int | None = None  # None: source length + 50 (seq2seq)
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    beam_size: int = 4
    length_penalty: float = 0.6
    use_cache: bool = True
    # static: buffers for the whole generation allocated once, every step the same shapes
    # (where the model supports it: full attention); dynamic: buffers that grow as needed;
    # auto: static when the step is compiled, dynamic otherwise (faster in eager mode)
    cache: str = "auto"
    # the one-token decoding step through torch.compile; auto: on CUDA only. Off by default:
    # compiling takes longer than most generations on a CPU, and has not run on a GPU yet
    compile: bool | str = False

    def __post_init__(self) -> None:
        if self.cache not in DECODE_CACHES:
            raise ConfigError(
                f"decode.cache={self.cache} is not valid; use one of: {', '.join(DECODE_CACHES)}"
            )
        _require(self.compile in (True, False, "auto"), "decode.compile", self.compile,
                 "true, false or auto")  # fmt: skip
        if self.compile is True and self.cache == "dynamic":
            raise ConfigError(
                "decode.compile=true needs decode.cache=static (or auto): a dynamic cache "
                "changes shape every step, so its step would recompile every time"
            )
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"decode.strategy={self.strategy} is not valid; use one of: {', '.join(STRATEGIES)}"
            )
        rules = (
            ("max_new_tokens", lambda v: v is None or v >= 1, "an integer >= 1 (or null)"),
            ("temperature", lambda v: v > 0, "a number > 0"),
            ("top_k", lambda v: v is None or v >= 1, "an integer >= 1 (or null)"),
            ("top_p", lambda v: v is None or 0 < v <= 1, "a number in (0, 1] (or null)"),
            ("beam_size", lambda v: v >= 1, "an integer >= 1"),
            ("length_penalty", lambda v: v >= 0, "a number >= 0"),
        )
        for key, ok, rule in rules:
            value = getattr(self, key)
            _require(ok(value), f"decode.{key}", value, rule)


@dataclass
class RunConfig:
    """The top-level keys of ``conf/config.yaml`` (the groups are checked on their own)."""

    task_name: str = "train"
    experiment_name: str | None = None  # set by experiment presets; attnlab-compare --by it
    tags: list[str] = field(default_factory=list)
    seed: int = 0
    train: bool = True
    test: bool = True
    ckpt_path: str | None = None
    overwrite: bool = False
    resume: bool = False  # -m: continue the sweep in hydra.sweep.dir (attnlab.cli.resume_sweep)
    retry_failed: bool = False  # with resume=true: run failed/diverged jobs again
    optimized_metric: str = "val/loss"

    def __post_init__(self) -> None:
        _require(0 <= self.seed < 2**32, "seed", self.seed, "an integer in [0, 2^32)")
        _require(bool(self.task_name.strip()) and "/" not in self.task_name, "task_name",
                 self.task_name, "a non-empty name without '/'")  # fmt: skip
