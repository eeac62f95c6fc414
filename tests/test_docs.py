"""The documentation cannot fall behind the code it describes.

* docs/configuration.md names every key of ``conf/model/_base.yaml`` (dotted, as
  ``model.ffn``) and of the sections of ``conf/config.yaml`` (``seed``, ``optim.lr``, …).
* The groups tables of docs/configuration.md and docs/design.md name every option of every
  group (``logger=mlflow``, …).
* Every relative link in README.md and docs/*.md points at a file that exists and, for a
  link into a markdown file, at a heading that exists there (GitHub's anchors).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def flattened(node: Any, prefix: str) -> Iterator[str]:
    """Every leaf key under ``node`` as a dotted name below ``prefix``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "defaults":
                continue
            yield from flattened(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def documented(key: str, text: str) -> bool:
    """Whether ``key`` is written as code (`` `model.ffn` ``, `` `model.ffn=…` ``) in ``text``."""
    return re.search(rf"`{re.escape(key)}(?=[`=\s])", text) is not None


def test_the_configuration_page_names_every_model_key() -> None:
    base = yaml.safe_load((ROOT / "conf" / "model" / "_base.yaml").read_text(encoding="utf-8"))
    keys = list(flattened(base, "model"))
    assert "model.ffn" in keys and len(keys) > 30, keys  # the YAML is still read
    text = CONFIGURATION.read_text(encoding="utf-8")
    missing = [key for key in keys if not documented(key, text)]
    assert not missing, f"{CONFIGURATION.name} does not document {missing}"


def test_the_configuration_page_names_every_key_of_config_yaml() -> None:
    config = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text(encoding="utf-8"))
    keys = list(flattened(config, ""))
    assert "optim.lr" in keys and "seed" in keys, keys
    text = CONFIGURATION.read_text(encoding="utf-8")
    missing = [key for key in keys if not documented(key, text)]
    assert not missing, f"{CONFIGURATION.name} does not document {missing}"


@pytest.mark.parametrize("page", ["configuration.md", "design.md"])
def test_the_groups_table_names_every_option_of_every_group(page: str) -> None:
    """Each group's row lists every file of its folder (the experiment presets in design.md;
    configuration.md lists them in a section of their own)."""
    from attnlab.cli.help import config_groups

    text = (ROOT / "docs" / page).read_text(encoding="utf-8").split("# Config groups\n")[1]
    groups = config_groups(ROOT / "conf")
    assert "mlflow" in groups["logger"]
    missing = []
    for group, options in groups.items():
        if group == "experiment" and page == "configuration.md":
            continue
        row = next(line for line in text.splitlines() if line.startswith(f"| `{group}` |"))
        row = re.sub(r"(\w+)\{([^}]*)\}",  # study_recurrence_{conv, lstm_none}
                     lambda m: ", ".join(m[1] + part.strip() for part in m[2].split(",")), row)
        missing += [f"{group}={o}" for o in options if not re.search(rf"\b{o}\b", row)]
    assert not missing, f"{page}'s groups table does not name {missing}"


def without_code(markdown: str) -> str:
    """``markdown`` without fenced code blocks and inline code (links there are not links)."""
    markdown = re.sub(r"^ *```.*?^ *```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", markdown)


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings of ``markdown``: the heading's text, lowercased,
    punctuation but ``-`` and ``_`` removed, spaces as ``-``; repeats get ``-1``, ``-2``."""
    markdown = re.sub(r"^ *```.*?^ *```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#* *$", markdown, flags=re.MULTILINE):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
        text = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower())
        slug = text.replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> Iterator[str]:
    for target in LINK.findall(without_code(page.read_text(encoding="utf-8"))):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # not http:, https:, mailto:, …
            yield target


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_points_at_a_file_that_exists(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text("utf-8")):
            broken.append(f"{target} (no such heading in {file.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_check_reads_links_and_anchors_as_github_does() -> None:
    text = "## Sweeps and clusters\n## Weights & Biases\n## `data=tokens` (big)\n"
    text += "## Sweeps and clusters\n"
    assert anchors(text) == {"sweeps-and-clusters", "weights--biases", "datatokens-big",
                             "sweeps-and-clusters-1"}  # fmt: skip
    sample = "See [a](docs/a.md#x), ![img](p.png) and [web](https://x.org).\n```\n[no](n.md)\n```\n"
    assert LINK.findall(without_code(sample)) == ["docs/a.md#x", "p.png", "https://x.org"]


def test_the_model_key_table_gives_each_components_default() -> None:
    """docs/configuration.md's defaults are the components' own (an architecture's where the
    row says so, in parentheses): the table cannot drift from the configs."""
    from attnlab.model_config import every_key

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `model\.(\w+)` \| ([^|(]+?)\s*(?:\(|\|)", text, re.MULTILINE))
    shown = {True: "true", False: "false", None: "null"}
    defaults = {k: shown.get(v, v) if isinstance(v, bool | None) else v
                for k, v in every_key().items()}  # fmt: skip
    assert set(rows) >= set(defaults) - {"name", "vocab_size", "image_size", "channels",
                                         "patch_size"}  # fmt: skip
    for key, default in rows.items():
        if key != "name":
            assert str(defaults[key]) == default.strip().strip("`"), key
