"""``optim.name`` and ``optim.schedule``: each choice, the keys it reads, its paper (no torch).

An optimiser or a schedule is a class whose docstring's first paragraph quotes its update
rule and cites the paper (``attnlab-train --options`` shows it) and whose ``keys`` are the
``optim.*`` keys it reads, with its own defaults. :func:`optim_config` resolves the keys
set in ``optim`` against the chosen two: every optimiser reads :data:`COMMON`; a key that
neither choice reads is refused in one line naming the choices that read it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

from attnlab.components.core import Key
from attnlab.errors import ConfigError
from attnlab.options import OptimConfig
from attnlab.value_checks import check_keys

UNSET = "???"  # Hydra's "missing": conf/config.yaml leaves the keys of one choice unset
COMMON = ("name", "lr", "weight_decay", "warmup_steps", "schedule")

BETAS = Key((0.9, 0.98), tuple[float, float], help="(β₁, β₂) of the first and second moments")
EPS = Key(1e-9, float, help="ε added to √v̂ in the denominator")
FUSED = Key(None, bool | None, help="fused AdamW kernel; null: where clipping allows")
MIN_LR = Key(0.0, float, help="the learning rate the decay ends at")
DECAY_STEPS = Key(None, int | None, help="the step the decay ends at; null: the run's total")


class Choice:
    """Base of an optimiser's or a schedule's config: class attributes only."""

    name: ClassVar[str] = ""
    keys: ClassVar[dict[str, Key]] = {}
    shards: ClassVar[bool] = True  # steps FSDP's flat parameter shards as it steps whole ones

    @classmethod
    def summary(cls) -> str:
        """The docstring's first paragraph on one line: the update rule and the paper."""
        return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


class Choices:
    """The choices of one ``optim`` key (``optim.name``, ``optim.schedule``)."""

    def __init__(self, key: str, default: str) -> None:
        self.key, self.default = key, default
        self.members: dict[str, type[Choice]] = {}

    def declare(self, choice: type[Choice]) -> type[Choice]:
        self.members[choice.name] = choice
        return choice

    def get(self, name: Any) -> type[Choice]:
        if isinstance(name, str) and name in self.members:
            return self.members[name]
        raise ConfigError(f"optim.{self.key}={name} is not valid; use one of: "
                          f"{', '.join(self.members)}")  # fmt: skip

    def readers(self, key: str) -> list[str]:
        return [name for name, choice in self.members.items() if key in choice.keys]

    def __iter__(self) -> typing.Iterator[type[Choice]]:
        return iter(self.members.values())


OPTIMISERS = Choices("name", "adamw")
SCHEDULES = Choices("schedule", "cosine")


# optim.name --------------------------------------------------------------------------------
@OPTIMISERS.declare
class AdamWConfig(Choice):
    """θ ← θ − η(m̂/(√v̂ + ε) + λθ), m, v: EMAs (β₁, β₂) of g and g² — Adam with decoupled
    weight decay (Loshchilov & Hutter 2019, Alg. 2); torch.optim.AdamW.

    Weight decay on weight matrices only; under μP (model.param=mup) each hidden weight's
    learning rate is η·m, its decay λ/m (mup.MuAdamW)."""

    name = "adamw"
    keys = {"betas": BETAS, "eps": EPS, "fused": FUSED}


@OPTIMISERS.declare
class MuonConfig(Choice):
    """O = NewtonSchulz₅(nesterov-momentum(g)), θ ← θ − η(0.2·√max(A,B)·O + λθ) on each
    A×B hidden matrix (Jordan et al. 2024; Liu et al. 2025, §2.2: decoupled weight decay,
    update-RMS matching); AdamW on embeddings, output head, norms and biases; torch.optim.Muon.

    ``optim.betas``, ``optim.eps`` and ``optim.fused`` set the AdamW part. The 0.2·√max(A,B)
    factor gives Muon's update AdamW's RMS (≈0.2), so one ``optim.lr`` and ``weight_decay``
    serve both parts, and μP's per-weight learning rates (η·m for hidden matrices) apply to
    Muon's matrices as to AdamW's. Orthogonalising needs a whole matrix: not under FSDP."""

    name = "muon"
    shards = False
    keys = {
        "momentum": Key(0.95, float, help="μ of the Nesterov momentum buffer"),
        "nesterov": Key(True, bool, help="Nesterov momentum (g + μB) instead of B"),
        "ns_steps": Key(5, int, help="Newton–Schulz iterations"),
        "adjust_lr": Key("match_rms_adamw", str,
                         help="match_rms_adamw: 0.2·√max(A,B) (Liu et al.); original: "
                              "√max(1, A/B) (Jordan et al.)"),
        "betas": BETAS, "eps": EPS, "fused": FUSED,
    }  # fmt: skip


@OPTIMISERS.declare
class LionConfig(Choice):
    """c = β₁m + (1−β₁)g, θ ← θ − η(sign(c) + λθ), m ← β₂m + (1−β₂)g (Chen et al. 2023,
    "Symbolic Discovery of Optimization Algorithms", Alg. 2); attnlab.optim.lion.Lion.

    Every update entry is ±η: the paper advises a learning rate 3–10× smaller and a weight
    decay 3–10× larger than AdamW's."""

    name = "lion"
    keys = {"betas": Key((0.9, 0.99), tuple[float, float], help="(β₁, β₂) of Alg. 2")}


@OPTIMISERS.declare
class AdafactorConfig(Choice):
    """Factored second moment V ≈ R·C/(1ᵀR), β̂₂ₜ = 1 − t^c, relative step size
    min(η, t^-½)·max(ε₂, RMS(θ)) (Shazeer & Stern 2018, Alg. 4–5, no momentum);
    torch.optim.Adafactor.

    Its row and column statistics need each weight whole: not under FSDP."""

    name = "adafactor"
    shards = False
    keys = {"beta2_decay": Key(-0.8, float, help="c in β̂₂ₜ = 1 − t^c (Alg. 4)")}


# optim.schedule ----------------------------------------------------------------------------
@SCHEDULES.declare
class CosineConfig(Choice):
    """Linear warm-up to η, then η_min + (η − η_min)·½(1 + cos(π·progress)) (Loshchilov &
    Hutter 2017, SGDR, without restarts)."""

    name = "cosine"
    keys = {"min_lr": MIN_LR, "decay_steps": DECAY_STEPS}


@SCHEDULES.declare
class InverseSqrtConfig(Choice):
    """η·d_model^-0.5·min(step^-0.5, step·warmup^-1.5) (Vaswani et al. 2017, eq. 3);
    optim.lr is a scale, 1.0 in the paper."""

    name = "inverse_sqrt"


@SCHEDULES.declare
class ConstantConfig(Choice):
    """Linear warm-up to η, then η."""

    name = "constant"


@SCHEDULES.declare
class WSDConfig(Choice):
    """Warm-up, stable η, then a decay over the last decay_fraction of the steps to η_min:
    1 − x (linear), 1 − √x (sqrt) or ½(1 + cos πx) (Hu et al. 2024, MiniCPM §4; Hägele et
    al. 2024, §3). A stable checkpoint branches into cool-downs of shorter budgets."""

    name = "wsd"
    keys = {
        "decay_fraction": Key(0.2, float, help="the share of the steps spent decaying"),
        "decay_shape": Key("sqrt", str, help="linear, sqrt (1 − √x) or cosine"),
        "min_lr": MIN_LR, "decay_steps": DECAY_STEPS,
    }  # fmt: skip


def set_keys(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keys ``values`` sets (``???``: not set)."""
    return {k: v for k, v in (values or {}).items() if not (isinstance(v, str) and v == UNSET)}


def read_keys(values: Mapping[str, Any] | None) -> set[str]:
    """The ``optim`` keys the optimiser and the schedule ``values`` chooses read."""
    given = set_keys(values)
    optimiser = OPTIMISERS.get(given.get("name", OPTIMISERS.default))
    schedule = SCHEDULES.get(given.get("schedule", SCHEDULES.default))
    return {*COMMON, *optimiser.keys, *schedule.keys}


def optim_config(values: Mapping[str, Any] | None, strict: bool = True) -> OptimConfig:
    """The checked :class:`OptimConfig` of the ``optim`` keys ``values`` sets (``???``: not
    set): each key's type, that the chosen optimiser or schedule reads it, then its range.
    ``strict=False`` drops a key neither reads (a config saved before they were refused)."""
    given = set_keys(values)
    hints = typing.get_type_hints(OptimConfig)
    check_keys(given, {f.name: hints[f.name] for f in dataclasses.fields(OptimConfig)}, "optim.")
    optimiser = OPTIMISERS.get(given.get("name", OPTIMISERS.default))
    schedule = SCHEDULES.get(given.get("schedule", SCHEDULES.default))
    reads = {**optimiser.keys, **schedule.keys}
    for key in [k for k in given if k not in COMMON and k not in reads]:
        if not strict:
            del given[key]
            continue
        readers = [f"optim.name={n}" for n in OPTIMISERS.readers(key)]
        readers += [f"optim.schedule={n}" for n in SCHEDULES.readers(key)]
        raise ConfigError(
            f"optim.{key} does not apply to optim.name={optimiser.name} with "
            f"optim.schedule={schedule.name}; it is read by {' and '.join(readers)}; remove it"
        )
    defaults = {key: declared.default for key, declared in reads.items()}
    try:
        return OptimConfig(**{**defaults, **given})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"optim: {exc}") from None

