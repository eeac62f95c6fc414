"""Two printings of a table agree: the tolerance of ``attnlab-reproduce --check``.

Every number agrees within one unit of its last printed digit (integers exactly) and all
other text is identical up to spacing; used for the generated tables and for the lines a
study's README quotes from them.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?:[eE]([-+]?\d+))?")


def _tokens(text: str) -> tuple[list[str], list[str]]:
    """The text between numbers (spacing and table rules normalised) and the numbers."""
    text = re.sub(r"-{3,}", "---", text)
    numbers = [m.group(0) for m in NUMBER.finditer(text)]
    words = [" ".join(part.split()) for part in NUMBER.split(text)[:: 3]]
    return words, numbers


def text_between_numbers(text: str) -> list[str]:
    """What :func:`table_differences` compares exactly: the text with its numbers taken out."""
    return _tokens(text)[0]


def unit(number: str) -> float:
    """One unit of the last printed digit: 0.001 for 2.010, 1e-6 for 1.2e-05, 0 for 42."""
    m = NUMBER.fullmatch(number)
    assert m is not None
    decimals, exponent = len(m.group(1) or ""), int(m.group(2) or 0)
    if not decimals and not m.group(2):
        return 0.0
    return 10.0 ** (exponent - decimals)


def table_differences(expected: str, produced: str) -> list[str]:
    """Where ``produced`` differs from ``expected`` beyond the tolerance (one line each)."""
    words_e, numbers_e = _tokens(expected)
    words_p, numbers_p = _tokens(produced)
    if words_e != words_p or len(numbers_e) != len(numbers_p):
        for line_e, line_p in zip(expected.splitlines(), produced.splitlines(), strict=False):
            if _tokens(line_e)[0] != _tokens(line_p)[0]:
                return [f"text differs: {line_e.strip()!r} vs {line_p.strip()!r}"]
        return ["a different number of lines or numbers"]
    out = []
    for a, b in zip(numbers_e, numbers_p, strict=True):
        if abs(float(a) - float(b)) > unit(a) * 1.000001:
            out.append(f"{a} vs {b}")
    return out
