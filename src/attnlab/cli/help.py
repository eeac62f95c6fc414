"""``attnlab-train --help``: the config groups and the composed config, as Hydra prints them.

Hydra's own help builds a config repository per group option to list them (106 deep copies
of the config tree here, ~2 s); the groups are the folders of ``conf/`` and their options
its YAML files, so they are listed from the folders, and the config is composed once.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

USAGE = """\
attnlab-train [overrides] [-m]: train a model (fit, then test on the best checkpoint).

  attnlab-train model=decoder_only data=shakespeare_char model.norm=post seed=1
  attnlab-train -m model=decoder_only,encoder_decoder model.norm=pre,post   # a sweep
  attnlab-train --options      # every value of every registry-backed model.* key
  attnlab-train --hydra-help   # Hydra's own flags
"""


def config_groups(conf: Path) -> dict[str, list[str]]:
    """{group: options} of a config folder, nested groups as ``a/b``; Hydra's own (``hydra``)
    left out, as its help does."""
    groups: dict[str, list[str]] = {}
    for path in sorted(conf.rglob("*.yaml")):
        group = path.parent.relative_to(conf).as_posix()
        if group == "." or group.split("/")[0] == "hydra":
            continue
        groups.setdefault(group, []).append(path.stem)
    return {group: sorted(options) for group, options in sorted(groups.items())}


def help_text(conf: Path, overrides: list[str]) -> str:
    from attnlab.cli.compose import compose_config

    cfg_yaml = OmegaConf.to_yaml(compose_config(overrides))  # without Hydra's own node
    groups = "\n".join(f"{g}: {', '.join(o)}" for g, o in config_groups(conf).items())
    return (
        f"{USAGE}\n== Configuration groups ==\n"
        f"Compose your configuration from those groups (group=option)\n\n{groups}\n\n\n"
        f"== Config ==\nOverride anything in the config (foo.bar=value)\n\n{cfg_yaml}\n"
    )
