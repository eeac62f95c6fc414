"""``attnlab-train --options``: every value of every ``model.*`` and ``optim.*`` key that
takes a name.

A component is shown with the first line of its config's docstring (which cites its paper)
and the keys it reads, so a variant declared in :mod:`attnlab.components` (or registered at
run time) is listed here with no other edit; the other named values (``model.cell``,
``model.pool``, …) with their rule. Config groups are listed as ``--help`` lists them, each
option with the first comment line of its YAML file (``model`` once, from its family).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.cli.common import config_dir
from attnlab.cli.help import config_groups

NAMED = {  # model keys with a fixed set of names that no family declares, and what each is
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
    "model.init": {
        "paper": "Xavier-uniform linear maps, token embeddings N(0, d_model^-½) (tensor2tensor)",
        "xavier": "Xavier-uniform for every matrix, embeddings included (the Annotated "
                  "Transformer)",
        "gpt2": "N(0, 0.02); residual output projections N(0, 0.02/√(2·n_layers)) "
                "(Radford et al. 2019)",
    },
}  # fmt: skip
FAMILY_ORDER = ("norm", "norm_type", "pos", "ffn", "attention", "attn_impl", "block", "param")
TASK_RECIPES = {  # task keys that are a recipe of their own, as (default, what and where from)
    "task.z_loss": ("0.0", "α·log²Z of the output softmax's normaliser added to the training "
                    "loss, logged as train/z_loss; lm and seq2seq data (Chowdhery et al. 2022, "
                    "PaLM §5 \"Training instability\", α = 1e-4)"),
}  # fmt: skip


def _yaml_comment(path: Path) -> str:
    """The first comment line, Hydra's ``# @package`` directive aside."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.lstrip("# ").startswith("@package"):
            return line.lstrip("# ").strip()
        if line.strip() and not line.startswith("#"):
            break
    return ""


def registry_rows() -> list[tuple[str, str, str]]:
    """(key, value, reference) for every model key that takes a name: each component with
    the first line of its config's docstring and the keys it reads (no torch)."""
    from attnlab.components import FAMILIES
    from attnlab.components.architectures import FROM_DATA

    def reads(config: Any) -> str:
        keys = [*config.keys, *(k for part in getattr(config, "parts", ()) for k in part.keys)]
        keys = [k for k in keys if k not in FROM_DATA]
        return f" [reads model.{', model.'.join(keys)}]" if keys else ""

    rows = [("model", arch.name, arch.summary() + reads(arch)) for arch in FAMILIES["name"]]
    for key in FAMILY_ORDER:
        rows += [(f"model.{key}", c.name, c.summary() + reads(c)) for c in FAMILIES[key]]
    for key, values in NAMED.items():
        rows += [(key, name, rule) for name, rule in values.items()]
    return [*rows, *pool_rows(FAMILIES["name"]), *optim_rows(), *recipe_rows()]


def recipe_rows() -> list[tuple[str, str, str]]:
    """(key, default, what it does, its paper and who reads it) for every key declared with a
    ``cite`` (a recipe of its own: ``model.attn_softcap``, ``model.rope_theta``, …) and the
    task keys of :data:`TASK_RECIPES`."""
    from attnlab.components import FAMILIES
    from attnlab.components.core import KEYS

    rows = []
    for key, declared in KEYS.items():
        if not declared.cite:
            continue
        readers = [f"model.{k}={', '.join(f.readers(key))}" for k, f in FAMILIES.items()
                   if k != "name" and f.readers(key)]  # fmt: skip
        where = f"; read by {' and '.join(readers)}" if readers else ""
        default = "null" if declared.default is None else str(declared.default)
        rows.append((f"model.{key}", default, f"{declared.help} ({declared.cite}){where}"))
    return rows + [(key, default, what) for key, (default, what) in TASK_RECIPES.items()]


def optim_rows() -> list[tuple[str, str, str]]:
    """``optim.name`` and ``optim.schedule``: each choice with its update rule, its paper and
    the ``optim.*`` keys of its own (:mod:`attnlab.optim.registry`)."""
    from attnlab.optim.registry import OPTIMISERS, SCHEDULES

    def reads(choice: Any) -> str:
        return f" [reads optim.{', optim.'.join(choice.keys)}]" if choice.keys else ""

    return [(f"optim.{family.key}", c.name, c.summary() + reads(c))
            for family in (OPTIMISERS, SCHEDULES) for c in family]  # fmt: skip


def pool_rows(architectures: Any) -> list[tuple[str, str, str]]:
    """``model.pool``: each pooling with the architectures that take it (their default
    marked): classification reads the pooled state."""
    takers: dict[str, list[str]] = {}
    for arch in architectures:
        for i, pool in enumerate(arch.feeding.pools):
            takers.setdefault(pool, []).append(f"{arch.name} (default)" if i == 0 else arch.name)
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
