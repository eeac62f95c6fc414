"""Bad input to ``attnlab-train`` ends with exit code 2 and one ``error:`` line.

No traceback, nothing of earlier runs overwritten, and where a run directory was
already created, a ``failed`` summary.json that says why. Every case goes through
the console entry point (``attnlab.train.main``) in this process, which is what
``attnlab-train`` calls; two of them also through a real subprocess.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.train import main
from cli_runs import TINY, run

CASES = {
    "indivisible_heads": (["model.d_model=30", "model.n_heads=4"], "model.d_model=30"),
    "unknown_norm": (["model.norm=mid"], "model.norm=mid"),
    "unknown_pos": (["model.pos=nonsense"], "model.pos=nonsense"),
    "no_layers": (["model.n_layers=0"], "model.n_layers=0"),
    "encoder_only_seq2seq": (["model=encoder_only", "data=reverse"], "model=encoder_only"),
    "unknown_model": (["model=nosuch"], "model/nosuch"),
    "unknown_key": (["model.nosuchkey=1"], "model.nosuchkey"),
    "negative_batch": (["data.batch_size=-1"], "data.batch_size=-1"),
    "bad_value_in_a_sweep": (["-m", "model.norm=pre,mid"], "model.norm=mid"),
}
NO_RUN_DIR = ("unknown_model", "unknown_key", "bad_value_in_a_sweep")  # refused before Hydra runs
EARLIER_RUN = Path("train") / "runs" / "2000-01-01_00-00-00_00000000"


def _logs_with_an_earlier_run(tmp_path: Path) -> Path:
    earlier = tmp_path / EARLIER_RUN
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text('{"status": "completed"}')
    return tmp_path


def _check_nothing_overwritten(logs: Path, case: str) -> None:
    earlier = logs / EARLIER_RUN
    assert json.loads((earlier / "summary.json").read_text()) == {"status": "completed"}
    assert sorted(p.name for p in earlier.iterdir()) == ["summary.json"]
    new = [p.parent for p in logs.glob("train/*/*/.hydra") if p.parent != earlier]
    if case in NO_RUN_DIR:
        assert new == [] and not (logs / "train" / "multiruns").exists()
    for run_dir in new:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "failed"
        assert CASES[case][1].split("=")[0] in summary["error"]
        assert not (run_dir / "checkpoints").exists()


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_one_error_line_and_overwrites_nothing(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    overrides, named = CASES[case]
    logs = _logs_with_an_earlier_run(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY, *overrides, f"paths.log_dir={logs}"])
    out, err = capfd.readouterr()
    assert exit_info.value.code == 2, out[-2000:] + err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert named in errors[0]
    assert "Traceback" not in out + err
    _check_nothing_overwritten(logs, case)


@pytest.mark.parametrize("case", ["encoder_only_seq2seq", "unknown_model"])
def test_the_console_command_prints_only_the_error_line(case: str, tmp_path: Path) -> None:
    logs = _logs_with_an_earlier_run(tmp_path)
    result = run("train", *TINY, *CASES[case][0], f"paths.log_dir={logs}", timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
    assert result.stderr.startswith("error:")
    assert CASES[case][1] in result.stderr
    _check_nothing_overwritten(logs, case)
