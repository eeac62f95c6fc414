"""docs/extending.md's examples as code: a documented class put where its config says it
lives, the documented config declared into its family, and a documented YAML line added to
a copy of ``conf/`` — all for the length of a test (restored after it)."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

import attnlab.cli.compose
import attnlab.components.core as core
import attnlab.model_config
import composed_runs
from attnlab.cli.common import config_dir

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def section(title: str) -> str:
    """The text of ``## <title>`` in docs/extending.md."""
    return DOC.read_text(encoding="utf-8").split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, kind: str = "python") -> list[str]:
    """The fenced blocks of ``kind`` in ``text``, dedented (a block may sit in a list item)."""
    return [textwrap.dedent(b) for b in re.findall(rf"```{kind}\n(.*?)\n *```", text, re.DOTALL)]


def block_with(text: str, needle: str, kind: str = "python") -> str:
    found = [b for b in blocks(text, kind) if needle in b]
    assert found, f"{DOC} has no {kind} block with {needle!r}"
    return found[0]


def declare(monkeypatch: pytest.MonkeyPatch, code: str, module: str, classes: dict[str, Any]
            ) -> type:  # fmt: skip
    """Run the documented config ``code`` as if pasted into ``module`` (a module of
    :mod:`attnlab.components`), with the documented ``classes`` put where its ``builds``
    says they live; the family it declares into and the table of keys are restored after
    the test. Returns the config."""
    monkeypatch.setattr(core, "KEYS", dict(core.KEYS))
    monkeypatch.setattr(attnlab.model_config, "KEYS", core.KEYS)
    for family in core.FAMILIES.values():
        monkeypatch.setattr(family, "members", dict(family.members))
    namespace = dict(vars(sys.modules[module]))
    before = set(namespace)
    exec(compile(code, str(DOC), "exec"), namespace)
    (config,) = [v for k, v in namespace.items() if k not in before and isinstance(v, type)]
    where, _, name = config.builds.partition(":")
    if name in classes:  # else the caller puts it there (a class that imports its config)
        if where not in sys.modules:
            monkeypatch.setitem(sys.modules, where, types.ModuleType(where))
        monkeypatch.setattr(sys.modules[where], name, classes[name], raising=False)
    return config


def conf_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of ``conf/`` with the documented ``files`` (path relative to conf: text to
    append), from which the tests' and the command line's compositions read."""
    conf = tmp_path / "conf"
    shutil.copytree(config_dir(), conf)
    for relative, text in files.items():
        with (conf / relative).open("a", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
    monkeypatch.setattr(composed_runs, "config_dir", lambda: conf)
    monkeypatch.setattr(attnlab.cli.compose, "config_dir", lambda: conf)
    return conf
