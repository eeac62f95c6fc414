"""A study's README against its generated files: what ``attnlab-reproduce --check`` adds.

A README quotes a generated table or line between two markers::

    <!-- from: results.md -->
    | model.norm | n | failed | val/loss | val/loss 95 % t CI |
    | --- | ---: | ---: | --- | --- |
    | pre | 3 | 0 | 4.050 ± 0.018 | [4.005, 4.095] |
    <!-- end -->

Every line of the block but blank lines and code fences (a line of only ```) must be a
line of the named file (as ``run.sh`` writes it; a hardware measurement as committed), in
the file's order; lines of the file may be left out
between them, so a block quotes a whole table or only its header and some rows. Lines
agree with the tolerance of the other checks (:func:`attnlab.study_tables.table_differences`:
every number within one unit of its last printed digit, text equal up to spacing).

Under a ``## Results`` heading (up to the next ``## `` heading) every table row, a line
that starts with ``|``, must be inside such a block, and every decimal number the prose
states must be one that a block of the same section shows (as printed, or rounded from
it): a result is never a hand copy. Each problem is one line naming the README's line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.study_tables import NUMBER, table_differences, text_between_numbers, unit

FROM = re.compile(r"<!--\s*from:\s*(\S+)\s*-->")
END = re.compile(r"<!--\s*end\s*-->")
RESULTS = re.compile(r"##\s+Results\b")
CODE = re.compile(r"`[^`]*`")  # inline code: settings and names, not results


def _agree(quoted: str, generated: str) -> bool:
    return not table_differences(quoted, generated)


def block_differences(
    opened: int, lines: list[tuple[int, str]], name: str, folders: list[Path]
) -> list[str]:
    """The problems of the block opened at README line ``opened``: ``lines`` (line number,
    text) quoted from ``name``, read from the first of ``folders`` that has it."""
    path = next((folder / name for folder in folders if (folder / name).is_file()), None)
    if path is None:
        return [f"line {opened}: quotes {name}, which the analysis does not write"]
    produced = path.read_text().splitlines()
    position = 0
    for number, text in lines:
        hit = next((i for i in range(position, len(produced)) if _agree(text, produced[i])), None)
        if hit is not None:
            position = hit + 1
            continue
        words = text_between_numbers(text)
        near = next((p for p in produced[position:] if text_between_numbers(p) == words), None)
        if near is not None:
            return [f"line {number}: {text.strip()!r} disagrees with {name}: {near.strip()!r}"]
        return [f"line {number}: {text.strip()!r} is not a line of {name} (after line "
                f"{position})"]  # fmt: skip
    return []


def readme_differences(readme: Path, generated: Path) -> list[str]:
    """Where ``readme`` disagrees with the files in ``generated``, one ``line N: …`` each: a
    quoted line that is not in its file, an unclosed block, and under a Results heading a
    table row outside a block or a decimal number that no block of the section shows.

    A file the analysis does not write (a hardware measurement, which ``--check`` does not
    rerun) is read from the README's own folder."""
    problems: list[str] = []
    name: str | None = None
    opened_at = 0
    block: list[tuple[int, str]] = []
    section: Section | None = None
    for number, text in enumerate(readme.read_text().splitlines(), start=1):
        if text.startswith("## "):
            problems += section.problems() if section else []
            section = Section() if RESULTS.match(text) else None
        if (opened := FROM.search(text)) is not None:
            if name is not None:
                problems.append(f"line {number}: a block opens inside the block of {name}")
            name, opened_at, block = opened.group(1), number, []
        elif END.search(text) and name is not None:
            problems += block_differences(opened_at, block, name, [generated, readme.parent])
            name = None
        elif name is not None:
            if text.strip() not in ("", "```"):  # a fence may keep the file's line breaks
                block.append((number, text))
                if section:
                    section.quoted.append(text)
        elif section:
            section.prose.append((number, text))
    if name is not None:
        problems.append(f"line {opened_at}: the block of {name} has no <!-- end -->")
    return problems + (section.problems() if section else [])


@dataclass
class Section:
    """The lines under one ``## Results`` heading: quoted from generated files, or not."""

    quoted: list[str] = field(default_factory=list)
    prose: list[tuple[int, str]] = field(default_factory=list)

    def problems(self) -> list[str]:
        """A table row outside a block; a decimal number (one with a decimal point or an
        exponent) that is no quoted number as printed or rounded. Whole numbers (steps,
        seeds, layers, counts) and `code` (settings) are the prose's own."""
        shown = [abs(float(m.group(0))) for line in self.quoted for m in NUMBER.finditer(line)]
        out = []
        for number, text in self.prose:
            if text.lstrip().startswith("|"):
                out.append(f"line {number}: a table row under Results that quotes no generated "
                           "file; put it between <!-- from: FILE --> and <!-- end -->")  # fmt: skip
                continue
            for match in NUMBER.finditer(CODE.sub("", text).replace(",", "")):
                value, last_digit = abs(float(match.group(0))), unit(match.group(0))
                near = (abs(value - x) <= last_digit / 2 * 1.000001 for x in shown)
                if last_digit and not any(near):
                    out.append(f"line {number}: {match.group(0)} is in no block of this Results "
                               "section; quote the generated line that states it")  # fmt: skip
        return out
