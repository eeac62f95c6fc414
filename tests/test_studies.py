"""attnlab-reproduce: the analysis of every study with committed raw runs reproduces its
tables and plots; the tolerance, the saving of raw runs and the refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnlab import studies, study_readme
from attnlab.callbacks.summary import write_summary
from conftest import REPO_ROOT

EXPERIMENTS = REPO_ROOT / "experiments"
WITH_RUNS = [p.parent.name for p in sorted(EXPERIMENTS.glob(f"*/{studies.RUNS}"))]
# analyses that take over a minute on 2 cores (bootstrap refits of scaling fits, many-arm
# comparisons): run with -m slow (make test-all)
SLOW_ANALYSES = {"compute_multipliers", "mixers"}


@pytest.mark.parametrize("study", [
    pytest.param(s, marks=pytest.mark.slow) if s in SLOW_ANALYSES else s for s in WITH_RUNS
])  # fmt: skip
def test_the_analysis_of_the_committed_runs_reproduces_the_study(
    study: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    assert studies.main([study, "--check"]) == 0, capsys.readouterr().out
    record = next((EXPERIMENTS / study / "runs").glob("*/provenance.json"))
    provenance = json.loads(record.read_text())
    assert {"attnlab_git_sha", "torch", "cpu", "gpu", "torch_threads"} <= set(provenance)


def test_numbers_agree_within_one_unit_of_their_last_digit() -> None:
    table = "| full | **2.010 ± 0.022** | [1.996, 2.034] | p = 0.0006 | 104,640 | 1.2e-05 |"
    assert studies.table_differences(table, table) == []
    close = "| full  | **2.011 ± 0.021** | [1.997, 2.034] | p = 0.0005 | 104,640 | 1.3e-05 |"
    assert studies.table_differences(table, close) == []  # spacing too
    far = "| full | **2.012 ± 0.022** | [1.996, 2.034] | p = 0.0006 | 104,641 | 1.2e-05 |"
    assert studies.table_differences(table, far) == ["2.010 vs 2.012", "640 vs 641"]
    renamed = table.replace("full", "linear")
    assert studies.table_differences(table, renamed)[0].startswith("text differs")


def test_a_changed_curve_is_a_different_plot(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def plot(name: str, ys: list[float]) -> Path:
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([0, 1, 2, 3], ys)
        fig.savefig(tmp_path / name)
        plt.close(fig)
        return tmp_path / name

    a, again = plot("a.png", [1, 2, 1.5, 3]), plot("b.png", [1, 2, 1.5, 3])
    changed = plot("c.png", [1, 2.5, 1.0, 3])
    assert studies.image_differences(a, again) == []
    assert studies.image_differences(a, changed)[0].endswith("of the pixels differ")


def fake_sweep(root: Path) -> Path:
    """Two groups of two runs as attnlab-train writes them, a checkpoint beside each."""
    runs = [("full", 2.0), ("full", 2.1), ("linear", 2.4), ("linear", 2.5)]
    for job, (kind, loss) in enumerate(runs):
        run = root / str(job)
        write_summary(
            run, status="completed", overrides=[f"model.attention={kind}", f"seed={job}"],
            config={"model": {"attention": kind}, "seed": job}, metrics={"val/loss": loss},
            task="lm", torch_threads=1,
        )  # fmt: skip
        (run / "metrics.csv").write_text(f"step,val/loss\n10,{loss + 1}\n20,{loss}\n")
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.ckpt").write_bytes(b"not copied")
    return root


def test_saving_runs_keeps_summaries_and_curves_and_records_the_machine(tmp_path: Path) -> None:
    dest = tmp_path / "study" / "runs" / "lm"
    dest.mkdir(parents=True)
    (dest / "stale.json").write_text("{}")
    assert studies.save_runs(fake_sweep(tmp_path / "sweep"), dest) == 4
    kept = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert kept == [f"{j}/{f}" for j in range(4) for f in ("metrics.csv", "summary.json")] + [
        "provenance.json"
    ]
    provenance = json.loads((dest / "provenance.json").read_text())
    assert provenance["torch"] and provenance["cpu_count"] and "gpu" in provenance
    assert provenance["runs_torch_threads"] == [1]  # the runs' own threads, from summary.json


def mini_study(root: Path) -> Path:
    """An experiments/ folder with study.sh and one study whose analysis is one table."""
    (root / "experiments").mkdir()
    shutil.copy(EXPERIMENTS / "study.sh", root / "experiments" / "study.sh")
    folder = root / "experiments" / "mini"
    folder.mkdir()
    (folder / "run.sh").write_text(
        'source "$(dirname "$0")/../study.sh"\n'
        'LM="$(sweep_dir lm logs/mini)"\n'
        'train_sweep lm "$LM" experiment=none\n'
        '"$PY" -m attnlab.compare "$LM" --by model.attention --metric val/loss \\\n'
        '  > "$OUT/results.md"\n'
    )
    studies.save_runs(fake_sweep(root / "sweep"), folder / "runs" / "lm")
    return folder


def test_check_regenerates_and_finds_a_changed_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = mini_study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert studies.main(["mini"]) == 0  # the analysis, written into the study's folder
    table = (folder / "results.md").read_text()
    assert "full" in table and "linear" in table and "2.05 ± 0.07071" in table
    assert studies.main(["mini", "--check"]) == 0
    assert "mini: 1 of 1 files reproduce (results.md)" in capsys.readouterr().out
    (folder / "results.md").write_text(table.replace("2.05 ±", "2.07 ±"))
    assert studies.main(["mini", "--check"]) == 1
    assert "mini/results.md: 2.07 vs 2.05" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no_such_study", "--check"], "no study 'no_such_study'"),
        (["mini", "--check"], "mini has no committed raw runs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    folder = mini_study(tmp_path)
    shutil.rmtree(folder / "runs")
    monkeypatch.chdir(tmp_path)
    assert studies.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


RESULTS = "| group | val/loss |\n| --- | --- |\n| full | 2.05 ± 0.07071 |\n| linear | 2.3 ± 0.1 |\n"


def readme_quoting(tmp_path: Path, quoted: str, results: str = RESULTS) -> Path:
    """A study folder with results.md and a README whose Results section quotes ``quoted``."""
    (tmp_path / "results.md").write_text(results)
    readme = tmp_path / "README.md"
    readme.write_text(f"# s\n\n## Results\n\n<!-- from: results.md -->\n{quoted}<!-- end -->\n")
    return readme


@pytest.mark.parametrize(
    "quoted",
    [RESULTS, "| group | val/loss |\n| linear | 2.30 ± 0.10 |\n"],
    ids=["whole table", "header and one row"],
)
def test_a_readme_block_that_agrees_with_its_file_passes(tmp_path: Path, quoted: str) -> None:
    assert study_readme.readme_differences(readme_quoting(tmp_path, quoted), tmp_path) == []


@pytest.mark.parametrize(
    ("quoted", "problem"),
    [
        (
            "| full | 2.07 ± 0.07071 |\n",
            "line 6: '| full | 2.07 ± 0.07071 |' disagrees with results.md: "
            "'| full | 2.05 ± 0.07071 |'",
        ),
        ("| linear | 2.3 ± 0.1 |\n| full | 2.05 ± 0.07071 |\n", "line 7: '| full | 2.05"),
        ("| sandwich | 2.1 ± 0.1 |\n", "line 6: '| sandwich | 2.1 ± 0.1 |' is not a line of"),
    ],
    ids=["a number", "the order", "a row"],
)
def test_a_readme_block_that_disagrees_with_its_file_fails_with_one_line(
    tmp_path: Path, quoted: str, problem: str
) -> None:
    (line,) = study_readme.readme_differences(readme_quoting(tmp_path, quoted), tmp_path)
    assert line.startswith(problem)


def test_a_results_table_row_outside_a_block_fails(tmp_path: Path) -> None:
    readme = readme_quoting(tmp_path, RESULTS)
    text = readme.read_text() + "\n| hand copy | 2.05 |\n\n## Setup\n\n| lr | 1e-3 |\n"
    readme.write_text(text)
    (line,) = study_readme.readme_differences(readme, tmp_path)
    assert line.startswith("line 12: a table row under Results that quotes no generated file")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("## Results\n<!-- from: gone.md -->\n| a |\n<!-- end -->\n", "line 2: quotes gone.md"),
        ("## Results\n<!-- from: results.md -->\n| group | val/loss |\n", "line 2: the block of"),
    ],
    ids=["no such file", "no end"],
)
def test_a_block_must_name_a_generated_file_and_end(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "results.md").write_text(RESULTS)
    (tmp_path / "README.md").write_text(text)
    (line,) = study_readme.readme_differences(tmp_path / "README.md", tmp_path)
    assert line.startswith(problem)


def test_check_fails_on_a_readme_number_that_disagrees_with_the_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = mini_study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert studies.main(["mini"]) == 0
    row = next(line for line in (folder / "results.md").read_text().splitlines() if "full" in line)
    readme = folder / "README.md"
    readme.write_text(f"## Results\n\n<!-- from: results.md -->\n{row}\n<!-- end -->\n")
    assert studies.main(["mini", "--check"]) == 0
    assert "mini: 2 of 2 files reproduce (README.md, results.md)" in capsys.readouterr().out
    readme.write_text(readme.read_text().replace("2.05 ±", "2.07 ±"))
    assert studies.main(["mini", "--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("mini/README.md: line 4: ") and "disagrees with results.md" in out[0]


@pytest.mark.parametrize(
    "prose",
    [
        "full at 2.05, linear at 2.30 (sd 0.07 and 0.1)",  # as printed, and rounded
        "over 3 seeds of 400 steps at `lr=1.5e-3`",  # whole numbers and settings
    ],
    ids=["quoted numbers", "whole numbers and code"],
)
def test_results_prose_may_state_what_its_blocks_show(tmp_path: Path, prose: str) -> None:
    readme = readme_quoting(tmp_path, RESULTS)
    readme.write_text(readme.read_text() + f"\n{prose}\n")
    assert study_readme.readme_differences(readme, tmp_path) == []


def test_a_results_number_that_no_block_shows_fails(tmp_path: Path) -> None:
    readme = readme_quoting(tmp_path, RESULTS)
    text = readme.read_text() + "\nfull is at 2.04 (hand copied)\n\n## Reading\n\n0.123 is fine\n"
    readme.write_text(text)
    (line,) = study_readme.readme_differences(readme, tmp_path)
    assert line.startswith("line 12: 2.04 is in no block of this Results section")
