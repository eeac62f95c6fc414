"""``attnlab-train --help``: the config groups and the composed config, as Hydra prints them.

Hydra's own help builds a config repository per group option to list them (106 deep copies
of the config tree here, ~2 s); the groups are those of ``conf/config.yaml``'s defaults list
and their options the YAML files of their folders, so they are listed from the folders, and
the config is composed once.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf


def config_groups(conf: Path) -> dict[str, list[str]]:
    """{group: options} of the groups a run chooses from: those of the primary config's
    defaults list (Hydra's own left out, as its help does), each with its YAML files but
    the ``_*`` ones (keys its options share, such as ``model/_base``, not a choice).
    Folders outside the defaults list (``wandb_sweep``: files ``wandb sweep`` reads) are
    not groups."""
    defaults = OmegaConf.to_container(OmegaConf.load(conf / "config.yaml").defaults)
    assert isinstance(defaults, list)
    names = [key for entry in defaults if isinstance(entry, dict) for key in entry]
    return {group: sorted(p.stem for p in (conf / group).glob("[!_]*.yaml"))
            for group in sorted(names) if group != "hydra"}  # fmt: skip


def help_text(conf: Path, overrides: list[str], usage: str = "") -> str:
    """``usage``, then the config groups and the config composed with ``overrides``."""
    from attnlab.cli.compose import compose_config

    cfg_yaml = OmegaConf.to_yaml(compose_config(overrides))  # without Hydra's own node
    groups = "\n".join(f"{g}: {', '.join(o)}" for g, o in config_groups(conf).items())
    return (
        f"{usage}\n== Configuration groups ==\n"
        f"Compose your configuration from those groups (group=option)\n\n{groups}\n\n\n"
        f"== Config ==\nOverride anything in the config (foo.bar=value)\n\n{cfg_yaml}\n"
    )
