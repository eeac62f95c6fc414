"""``attnlab-train --options``: every value of every ``model.*`` key that takes a name.

A registry-backed value is shown with the first line of its class's docstring (which cites
its paper), so a variant named in :mod:`attnlab.catalog` (or registered at run time) is
listed here with no other edit; the other named values (``model.block``, ``model.param``,
``model.pool``, …) with their rule. Config groups are listed as ``--help`` lists them, each
option with the first comment line of its YAML file (``model`` once, from its registry).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from attnlab.cli.common import config_dir
from attnlab.cli.help import config_groups

NAMED = {  # model keys with a fixed set of names (model_config.py), and what each is
    "model.block": {
        "sequential": "x + Attn(LN(x)), then x + FFN(LN(x)): one sublayer after the other",
        "parallel": "x + Attn(LN(x)) + FFN(LN(x)) (GPT-J; Chowdhery et al. 2022 §2); "
                    "needs norm=pre, no cross-attention",
    },
    "model.param": {
        "sp": "the standard parametrisation: one learning rate, model.init's initialisation",
        "mup": "the Maximal Update Parametrisation (Yang et al. 2022): learning rates, init and "
               "multipliers scaled from model.mup_base_width; Transformer architectures",
    },
    "model.cell": {
        "lstm": "torch.nn.LSTM (Hochreiter & Schmidhuber 1997); model=rnn",
        "gru": "torch.nn.GRU (Cho et al. 2014); model=rnn",
        "rnn": "torch.nn.RNN, tanh (Elman 1990); model=rnn",
    },
    "model.rnn_attention": {
        "bahdanau": "additive: vᵀtanh(Ws + Uh) (Bahdanau et al. 2015); model=rnn",
        "luong_dot": "sᵀh (Luong et al. 2015, §3.1); model=rnn",
        "luong_general": "sᵀWh (Luong et al. 2015, §3.1); model=rnn",
        "none": "no attention: the decoder starts from the encoder's final state; model=rnn",
    },
}  # fmt: skip


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _yaml_comment(path: Path) -> str:
    """The first comment line, Hydra's ``# @package`` directive aside."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.lstrip("# ").startswith("@package"):
            return line.lstrip("# ").strip()
        if line.strip() and not line.startswith("#"):
            break
    return ""


def registry_rows() -> list[tuple[str, str, str]]:
    """(key, value, reference) for every registry-backed model key."""
    from attnlab.model_config import INITS
    from attnlab.models import ARCHITECTURES
    from attnlab.nn.attention import ATTN_IMPLS
    from attnlab.nn.attention_kinds import ATTENTION_KINDS
    from attnlab.nn.feedforward import FEEDFORWARDS
    from attnlab.nn.norms import NORM_TYPES, RESIDUALS
    from attnlab.nn.positions import POSITIONS

    rows = [("model", name, _first_line(cls)) for name, cls in ARCHITECTURES.items()]
    for registry in (RESIDUALS, NORM_TYPES, POSITIONS, FEEDFORWARDS, ATTENTION_KINDS):
        rows += [(registry.key, name, _first_line(cls)) for name, cls in registry.items()]
    impls = {
        "sdpa": "torch's fused scaled_dot_product_attention (flash / memory-efficient)",
        "math": "explicit softmax(QKᵀ/√d_k)V (Vaswani et al. 2017, eq. 1); returns weights",
    }
    rows += [("model.attn_impl", name, impls.get(name, "")) for name in ATTN_IMPLS]
    inits = {"paper": "Xavier-uniform linear maps, token embeddings N(0, d_model^-½) "
                      "(tensor2tensor)",
             "xavier": "Xavier-uniform for every matrix, embeddings included "
                       "(the Annotated Transformer)",
             "gpt2": "N(0, 0.02); residual output projections N(0, 0.02/√(2·n_layers)) "
                     "(Radford et al. 2019)"}  # fmt: skip
    rows += [("model.init", name, inits.get(name, "")) for name in INITS]
    for key, values in NAMED.items():
        rows += [(key, name, rule) for name, rule in values.items()]
    return [*rows, *pool_rows(ARCHITECTURES)]


def pool_rows(architectures: Any) -> list[tuple[str, str, str]]:
    """``model.pool``: each pooling with the architectures that take it (their default
    marked): classification reads the pooled state."""
    takers: dict[str, list[str]] = {}
    for name, cls in architectures.items():
        for i, pool in enumerate(cls.feeding.pools):
            takers.setdefault(pool, []).append(f"{name} (default)" if i == 0 else name)
    return [("model.pool", pool, ", ".join(names)) for pool, names in sorted(takers.items())]


def group_rows() -> list[tuple[str, str, str]]:
    """The config groups and their options; ``model``'s are listed from its registry."""
    conf = config_dir()
    return [(group, option, _yaml_comment(conf / group / f"{option}.yaml"))
            for group, options in config_groups(conf).items() if group != "model"
            for option in options]  # fmt: skip


def print_options() -> None:
    rows = [*registry_rows(), *group_rows()]
    width = max(len(key) for key, _, _ in rows), max(len(value) for _, value, _ in rows)
    previous = None
    for key, value, reference in rows:
        if key != previous and previous is not None:
            print()
        shown = key if key != previous else ""
        print(f"{shown:<{width[0]}}  {value:<{width[1]}}  {reference}".rstrip())
        previous = key
    print(
        "\nEvery other key: attnlab-train --cfg job prints the composed config; "
        "docs/configuration.md explains each."
    )
