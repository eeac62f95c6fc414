"""``attnlab-train --options``: every value of every registry-backed key, from the registries.

Each value is shown with the first line of its class's docstring (which cites
its paper), so a variant named in :mod:`attnlab.catalog` (or registered at run time) is
listed here with no other edit. Config groups are listed from ``conf/``, each
with the first comment line of its YAML file.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from attnlab.cli.common import config_dir

GROUPS = ("model", "data", "trainer", "logger", "callbacks", "experiment", "debug",
          "hparams_search")  # fmt: skip


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _yaml_comment(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
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
    return rows


def group_rows() -> list[tuple[str, str, str]]:
    rows = []
    for group in GROUPS:
        for path in sorted((config_dir() / group).glob("[!_]*.yaml")):  # _base: shared keys
            rows.append((group, path.stem, _yaml_comment(path)))
    return rows


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
