"""``attnlab-prepare``'s console entry point: Ctrl-C while the command's libraries load
(numpy, tokenizers: a fraction of a second) ends it with one line, not a traceback."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Load :mod:`attnlab.prepare` and run its ``main``; exit code 130 if Ctrl-C comes first."""
    try:
        from attnlab.prepare import main as prepare
    except KeyboardInterrupt:
        print("attnlab-prepare: stopped by SIGINT before it began; nothing was written",
              file=sys.stderr)  # fmt: skip
        return 130
    return prepare(argv)


if __name__ == "__main__":
    sys.exit(main())
