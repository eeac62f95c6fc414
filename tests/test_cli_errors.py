"""The console command itself (a real subprocess) prints only the one ``error:`` line.

The in-process battery of bad inputs is tests/test_bad_inputs.py; these cases run
through ``python -m attnlab.train`` to check what a terminal shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runs import TINY, run
from test_bad_inputs import CONFIG_CASES, earlier_run_untouched, logs_with_an_earlier_run


@pytest.mark.parametrize("case", ["encoder_only_seq2seq", "unknown_model"])
def test_the_console_command_prints_only_the_error_line(case: str, tmp_path: Path) -> None:
    logs = logs_with_an_earlier_run(tmp_path)
    overrides, named = CONFIG_CASES[case]
    result = run("train", *TINY, *overrides, f"paths.log_dir={logs}", timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
    assert result.stderr.startswith("error:")
    assert named in result.stderr
    earlier_run_untouched(logs)
