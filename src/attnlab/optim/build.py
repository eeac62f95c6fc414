"""The optimiser ``optim.name`` chooses, built over the model's parameter groups (torch).

Every optimiser gets the same groups (:func:`param_groups`): weight-decayed or not and,
under μP, one per learning-rate multiplier. Muon takes the 2-D hidden matrices of those
groups and leaves the rest to AdamW, in one :class:`MuonWithAdamW` (Lightning steps one
optimiser; its schedule scales every group).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import torch
from torch import Tensor

from attnlab.optim.lion import Lion
from attnlab.options import OptimConfig

# prefixes that wrappers (FSDP, activation checkpointing, torch.compile) add to a name
_WRAPPERS = re.compile(r"(_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")
_NO_DECAY_LEAVES = ("query", "cls", "cls_token")  # attention pooling's query, ViT's [CLS]
_OUTPUT_MODULES = ("lm_head", "head")  # the readout of a language model, a classifier


def _no_decay(name: str) -> bool:
    """Norm gains, biases, embeddings, position tables and the learned [CLS]/pooling query
    vectors are not weight-decayed.

    Chosen by name, not by shape: under FSDP (``use_orig_params``) the optimiser is handed
    1-D shards of every weight. The rule gives the groups ``param.dim() < 2`` gave on the
    unwrapped model (a test checks it over every architecture and option).
    """
    *path, leaf = _WRAPPERS.sub("", name).split(".")
    return (
        leaf.startswith("bias") or leaf in _NO_DECAY_LEAVES
        or "embedding" in name or "positions" in name
        or any(part.endswith("norm") for part in path)
    )  # fmt: skip


def is_hidden_matrix(name: str, param: Tensor) -> bool:
    """A weight matrix inside the network, which Muon orthogonalises: 2-D, decayed, not
    the output head (Jordan et al. 2024: embeddings, head, norms and biases take AdamW)."""
    path = _WRAPPERS.sub("", name).split(".")[:-1]
    return param.dim() == 2 and not _no_decay(name) and not set(path) & set(_OUTPUT_MODULES)


def param_groups(
    named: Any, cfg: OptimConfig, multipliers: dict[str, float]
) -> list[dict[str, Any]]:
    """The parameter groups: weight-decayed or not (:func:`_no_decay`) and, under μP, one
    group per learning-rate multiplier (hidden weights: lr/m with decay λ·m, as
    ``mup.MuAdamW``; :mod:`attnlab.models.parametrization`). Under SP: the two groups.
    Every optimiser's decay is decoupled, θ ← θ(1 − η·λ): η·m and λ/m decay as η·λ."""
    groups: dict[tuple[bool, float], list[Tensor]] = {(True, 1.0): [], (False, 1.0): []}
    multipliers = {_WRAPPERS.sub("", k): m for k, m in multipliers.items()}
    for name, param in named:
        if param.requires_grad:
            key = _WRAPPERS.sub("", name)
            mult = multipliers.get(key, 1.0)
            groups.setdefault((not _no_decay(name), mult), []).append(param)
    out = []
    for (decayed, mult), params in groups.items():
        if not params and mult != 1.0:
            continue
        decay = cfg.weight_decay / mult if decayed else 0.0
        group: dict[str, Any] = {"params": params, "weight_decay": decay}
        if mult != 1.0:
            group["lr"] = cfg.lr * mult
        out.append(group)
    return out


class _MergedState(MutableMapping):
    """The per-parameter state of two optimisers as one mapping (Lightning moves it between
    devices through ``optimizer.state``)."""

    def __init__(self, *parts: torch.optim.Optimizer) -> None:
        self.parts = parts

    def _owner(self, key: Any) -> Any:
        for part in self.parts:
            if any(key is p for group in part.param_groups for p in group["params"]):
                return part.state
        raise KeyError(key)

    def __getitem__(self, key: Any) -> Any:
        return self._owner(key)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._owner(key)[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._owner(key)[key]

    def __iter__(self) -> Iterator[Any]:
        for part in self.parts:
            yield from part.state

    def __len__(self) -> int:
        return sum(len(part.state) for part in self.parts)


class MuonWithAdamW(torch.optim.Optimizer):
    """torch.optim.Muon on the hidden matrices and torch.optim.AdamW on every other
    parameter, stepped together as one optimiser. ``param_groups`` are the two optimisers'
    own groups (Muon's first), so a schedule that sets ``lr`` sets it in both; the state is
    saved and loaded as ``{"muon": …, "adamw": …}``."""

    def __init__(self, muon: torch.optim.Muon, adamw: torch.optim.AdamW) -> None:
        self.muon, self.adamw = muon, adamw
        super().__init__([*muon.param_groups, *adamw.param_groups], {})
        self.defaults = {"fused": adamw.defaults.get("fused")}
        self._share()

    def _share(self) -> None:
        self.param_groups = [*self.muon.param_groups, *self.adamw.param_groups]
        self.state = _MergedState(self.muon, self.adamw)  # type: ignore[assignment]

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        self._share()  # loading replaces each optimiser's group dicts


def build_optimizer(groups: list[dict[str, Any]], cfg: OptimConfig, fused: bool,
                    named: dict[int, str] | None = None) -> torch.optim.Optimizer:  # fmt: skip
    """The optimiser ``cfg.name`` names over ``groups``; ``fused``: AdamW's fused kernel;
    ``named``: each parameter's name by ``id`` (Muon splits its groups by name)."""
    if cfg.name == "lion":
        return Lion(groups, lr=cfg.lr, betas=cfg.betas)
    if cfg.name == "adafactor":
        return torch.optim.Adafactor(groups, lr=cfg.lr, beta2_decay=cfg.beta2_decay)
    if cfg.name == "muon":
        return _muon(groups, cfg, fused, named or {})
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)


def _muon(groups: list[dict[str, Any]], cfg: OptimConfig, fused: bool,
          named: dict[int, str]) -> MuonWithAdamW:  # fmt: skip
    """Each group split in two, the same lr and decay in both halves."""
    hidden, rest = [], []
    for group in groups:
        matrices = [p for p in group["params"] if is_hidden_matrix(named.get(id(p), ""), p)]
        others = [p for p in group["params"] if all(p is not m for m in matrices)]
        hidden.append({**group, "params": matrices})
        rest.append({**group, "params": others})
    muon = torch.optim.Muon(
        [g for g in hidden if g["params"]] or [{"params": []}], lr=cfg.lr,
        momentum=cfg.momentum, nesterov=cfg.nesterov, ns_steps=cfg.ns_steps,
        adjust_lr_fn=cfg.adjust_lr,
    )  # fmt: skip
    adamw = torch.optim.AdamW([g for g in rest if g["params"]], lr=cfg.lr, betas=cfg.betas,
                              eps=cfg.eps, fused=fused)  # fmt: skip
    return MuonWithAdamW(muon, adamw)
