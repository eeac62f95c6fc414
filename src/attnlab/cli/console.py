"""What a researcher sees: the start banner and ``train.log``.

* The banner (single runs): the composed config as a rich tree (as the
  lightning-hydra-template's ``print_config_tree``), then the run directory,
  the parameter count and the device.
* ``<run_dir>/train.log``: everything the run prints to stdout and stderr,
  without the progress bar's redraws (cursor-control sequences) or colours.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

LOG_FILE = "train.log"
# cursor movement and line erasing: the frames of a live progress bar
_REDRAW = re.compile(r"\x1b\[(\d*[ABCDGJK]|\?25[hl])")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# the sections shown first in the tree, in this order
TREE_ORDER = ("model", "data", "optim", "task", "trainer", "callbacks", "logger", "paths")


def print_config_tree(config: dict[str, Any], file: TextIO | None = None) -> None:
    """The resolved config as a rich tree, one branch per section, YAML inside."""
    import yaml
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree("config", style="bold")
    top = {k: v for k, v in config.items() if not isinstance(v, dict)}
    sections = [k for k in TREE_ORDER if k in config]
    sections += [k for k, v in config.items() if isinstance(v, dict) and k not in sections]
    for name in sections:
        text = yaml.safe_dump(config[name], sort_keys=False, default_flow_style=False)
        tree.add(name, style="bold").add(Syntax(text.rstrip(), "yaml", theme="ansi_dark"))
    if top:
        text = yaml.safe_dump(top, sort_keys=False, default_flow_style=False)
        tree.add("run", style="bold").add(Syntax(text.rstrip(), "yaml", theme="ansi_dark"))
    Console(file=file or sys.stdout, soft_wrap=True).print(tree)


class _Tee(io.TextIOBase):
    """Writes to the console stream and, cleaned of redraws and colours, to the log.

    A log write that fails (a full or read-only disk) stops the copy into the log, with
    one warning on the console: the run goes on, and the write that matters (a
    checkpoint, summary.json) reports the disk in its own error line.
    """

    def __init__(self, stream: TextIO, log: TextIO) -> None:
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.stream.write(text)
        # a logging handler made while this tee was sys.stderr may outlive the run's log
        if not self.log.closed and not _REDRAW.search(text):
            self._to_log(lambda: self.log.write(_ANSI.sub("", text).replace("\r", "")))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        if not self.log.closed:
            self._to_log(self.log.flush)

    def _to_log(self, write: Any) -> None:
        try:
            write()
        except OSError as exc:
            name = getattr(self.log, "name", "train.log")
            with contextlib.suppress(OSError, ValueError):
                self.log.close()  # its buffer cannot be written either
            self.stream.write(f"warning: {name} is no longer written ({exc.strerror or exc})\n")

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


class _LogFileHandler(logging.StreamHandler):
    """Lightning's log records into train.log; a record that cannot be written (a full
    disk) is dropped, as the tee drops its lines, instead of printing a traceback."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


@contextlib.contextmanager
def log_to_file(run_dir: Path) -> Iterator[None]:
    """Copy this process's stdout and stderr into ``<run_dir>/train.log`` (appended on resume)."""
    try:
        log = (run_dir / LOG_FILE).open("a", encoding="utf-8")
    except OSError:
        yield  # an unwritable run directory is reported by the run itself
        return
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(sys.stdout, log), _Tee(sys.stderr, log)
    handler = _LogFileHandler(log)  # Lightning's log lines go to its own console handler
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        sys.stdout, sys.stderr = saved
        try:
            log.close()
        except OSError as exc:  # the last lines could not be written: the disk is full
            print(f"warning: {log.name} is incomplete ({exc.strerror or exc})", file=sys.stderr)

