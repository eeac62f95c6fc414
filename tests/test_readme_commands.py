"""Every ``attnlab-train`` command that README.md and docs/*.md show composes, as
attnlab-train checks it.

A command is read from each page's fenced code blocks the way a shell reads it
(a trailing backslash continues the line, ``#`` starts a comment, ``NAME=value``
before the command sets the environment) and is recognised in any of its
spellings: ``attnlab-train …``, ``.venv/bin/attnlab-train …``, ``make train
ARGS="…"``, ``python -m attnlab.train …`` and ``torchrun … -m attnlab.train …``.
Hydra's own argument parser then drops its flags (``-m``, ``--cfg job``, …), and
the overrides go through what ``attnlab-train`` checks before any job starts:
``validate_overrides`` (composition, every swept value) and, for a single run,
the model and optimiser checks that are the job's first step. No data is read,
so commands on ``../shared/data`` or on the user's own files compose without them.

Per-command decisions:

* ``...`` stands for "your other overrides" and is dropped.
* Commands of an "Add your own variant" section (README.md's and docs/extending.md's)
  run after the ReZero class of docs/extending.md is added, so they are checked with
  that class registered (as ``test_add_variant_example.py`` does); commands of an "Add
  your own architecture" section with its DAN class and YAML registered.
* A command followed by an ``error: …`` line in its block is shown failing; it
  must fail with exactly that line.

``attnlab-eval`` and ``attnlab-generate`` commands are not checked: they read
the saved config of a trained run directory (``<run>`` in the docs), which
only a training run would provide.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hydra._internal.utils import get_args_parser

import attnlab.nn.norms as norms
from attnlab.cli.compose import check_values, validate_overrides

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXTENDING = ROOT / "docs" / "extending.md"  # where the ReZero class is documented
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]  # every page whose commands are checked
VARIANT_SECTION = "Add your own variant"
ARCHITECTURE_SECTION = "Add your own architecture"
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class TrainCommand:
    """One ``attnlab-train`` command of a markdown file, as the shell would run it."""

    line: int  # where it starts in the markdown (1-based)
    text: str  # as shown, continuation lines joined
    args: list[str]  # attnlab-train's argv
    env: dict[str, str] = field(default_factory=dict)
    section: str = ""  # the ``## `` heading above it
    expected_error: str | None = None  # the ``error: …`` line shown right after it


def fenced_blocks(markdown: str) -> Iterator[tuple[int, list[str], str]]:
    """(line of the first content line, content lines, section) of each fenced block."""
    lines = markdown.splitlines()
    section, start = "", None
    for number, line in enumerate(lines, start=1):
        if start is None and line.startswith("## "):
            section = line[3:].strip()
        if line.lstrip().startswith("```"):
            if start is None:
                start = number
            else:
                yield start + 1, lines[start : number - 1], section
                start = None


def logical_lines(lines: list[str], first: int) -> Iterator[tuple[int, str]]:
    """(line number, text) of each shell line, backslash continuations joined."""
    pending, begun = "", first
    for number, line in enumerate(lines, start=first):
        if not pending:
            begun = number
        text = line.strip() if pending else line
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1].rstrip() + " "
            continue
        yield begun, pending + text
        pending = ""
    if pending:
        yield begun, pending


def train_args(tokens: list[str]) -> list[str] | None:
    """attnlab-train's argv when these shell words run it, else None."""
    program, rest = tokens[0], tokens[1:]
    if program == "attnlab-train" or program.endswith("/attnlab-train"):
        return rest
    if program == "make" and rest[:1] == ["train"]:
        given = [t.split("=", 1)[1] for t in rest[1:] if t.startswith("ARGS=")]
        return shlex.split(given[-1]) if given else []
    for i in range(len(tokens) - 1):  # python -m attnlab.train …, torchrun … -m attnlab.train …
        if tokens[i] == "-m" and tokens[i + 1] == "attnlab.train":
            return tokens[i + 2 :]
    return None


def train_commands(markdown: str) -> list[TrainCommand]:
    """Every attnlab-train command in the fenced code blocks of ``markdown``."""
    found = []
    for first, lines, section in fenced_blocks(markdown):
        shell = list(logical_lines(lines, first))
        for i, (number, text) in enumerate(shell):
            text = text.strip().removeprefix("$ ")
            try:
                tokens = shlex.split(text, comments=True)
            except ValueError:  # not shell (unbalanced quotes in YAML, Python, …)
                continue
            env = {}
            while tokens and ENV_ASSIGNMENT.match(tokens[0]) and len(tokens) > 1:
                name, value = tokens.pop(0).split("=", 1)
                env[name] = value
            args = train_args(tokens) if tokens else None
            if args is None:
                continue
            after = shell[i + 1][1].strip() if i + 1 < len(shell) else ""
            found.append(TrainCommand(
                line=number, text=text, env=env, section=section,
                args=[a for a in args if a not in ("...", "…")],
                expected_error=after if after.startswith("error:") else None,
            ))  # fmt: skip
    return found


def compose_command(command: TrainCommand) -> None:
    """What attnlab-train checks before it runs anything; SystemExit(2) on a bad command."""
    parsed = get_args_parser().parse_args(command.args)  # drops -m, --cfg job, …
    cfg = validate_overrides(list(parsed.overrides), bool(parsed.multirun))
    if not parsed.multirun:
        check_values(cfg)  # a sweep's values were checked above; a single run's job does it first


@pytest.fixture
def readme_variant_added(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """docs/extending.md's ReZero class, config and YAML line, as written (restored after the
    test)."""
    from documented import block_with, conf_with, declare, section

    variant = section(VARIANT_SECTION)
    namespace = dict(vars(norms))
    exec(compile(block_with(variant, "class ReZeroResidual"), str(EXTENDING), "exec"), namespace)
    declare(monkeypatch, block_with(variant, "class ReZeroConfig"), "attnlab.components.layers",
            {"ReZeroResidual": namespace["ReZeroResidual"]})  # fmt: skip
    conf_with(monkeypatch, tmp_path, {"model/_base.yaml": block_with(variant, "rezero_alpha",
                                                                     kind="yaml")})  # fmt: skip


def readme_cases() -> list:
    cases = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        for command in train_commands(page.read_text(encoding="utf-8")):
            cases.append(pytest.param(command, id=f"{name}:L{command.line}"))
    return cases


@pytest.mark.parametrize("command", readme_cases())
def test_readme_train_command_composes(
    command: TrainCommand, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for name, value in command.env.items():
        monkeypatch.setenv(name, value)
    if command.section == VARIANT_SECTION:
        request.getfixturevalue("readme_variant_added")
    if command.section == ARCHITECTURE_SECTION:
        from test_add_architecture_example import add_documented_architecture

        add_documented_architecture(monkeypatch, request.getfixturevalue("tmp_path"))
    if command.expected_error is None:
        compose_command(command)
        return
    with pytest.raises(SystemExit) as exited:
        compose_command(command)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == command.expected_error


def test_the_readme_shows_train_commands() -> None:
    texts = [c.text for c in train_commands(README.read_text(encoding="utf-8"))]
    assert len(texts) >= 10, texts  # the extractor still finds them
    assert any(t.startswith("attnlab-train -m") for t in texts)


SNIPPET = """\
Some prose with `attnlab-train model.norm=inline` (inline code is not a command).

```bash
attnlab-train model=decoder_only data=copy   # fine
ATTNLAB_LOG_DIR=/tmp/x attnlab-train -m model.norm=pre,post \\
  seed=1,2 ...   # a sweep over two lines
make train ARGS="model.pos=rope seed=3"
attnlab-eval run_dir=logs/train/runs/<run>
$ attnlab-train model.norm=mid
error: model.norm=mid is not a known option
```
"""


def test_commands_are_read_as_the_shell_reads_them() -> None:
    commands = train_commands(SNIPPET)
    assert [(c.line, c.args) for c in commands] == [
        (4, ["model=decoder_only", "data=copy"]),
        (5, ["-m", "model.norm=pre,post", "seed=1,2"]),
        (7, ["model.pos=rope", "seed=3"]),
        (9, ["model.norm=mid"]),
    ]
    assert commands[1].env == {"ATTNLAB_LOG_DIR": "/tmp/x"}
    assert commands[3].expected_error == "error: model.norm=mid is not a known option"


def test_a_readme_command_with_a_bad_value_fails_to_compose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    good, sweep, make, misspelt = train_commands(SNIPPET)
    for command in (good, sweep, make):
        compose_command(command)
    with pytest.raises(SystemExit) as exited:
        compose_command(misspelt)
    assert exited.value.code == 2
    assert "model.norm=mid" in capsys.readouterr().err


def test_a_bad_value_in_one_swept_value_fails_to_compose() -> None:
    (sweep,) = train_commands("```\nattnlab-train -m model.pos=rope,nowhere seed=1,2\n```\n")
    with pytest.raises(SystemExit):
        compose_command(sweep)
