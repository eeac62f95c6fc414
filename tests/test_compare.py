"""attnlab-compare: tables, tests and plots from run directories (no torch involved)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from attnlab.compare import align_curves, group_runs, load_runs, main, summarize, welch
from attnlab.compare.grouping import filter_runs

SRC = Path(__file__).resolve().parents[1] / "src"

PRE = [0.50, 0.52, 0.47]
POST = [0.61, 0.66, 0.58]


def write_run(
    run_dir: Path,
    overrides: list[str],
    metrics: dict[str, float],
    status: str = "completed",
    task: str | None = "seq2seq",
    curve: list[tuple[int, float]] | None = None,
) -> Path:
    """A fake run directory: summary.json (config built from the overrides), metrics.csv."""
    config: dict = {"model": {"name": "decoder_only", "norm": "pre"}, "seed": 0}
    for override in overrides:
        key, value = override.lstrip("+").split("=", 1)
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        if isinstance(node.get(last), dict):
            node[last]["name"] = value
        else:
            node[last] = value
    summary = {
        "status": status,
        "error": None if status == "completed" else "boom",
        "overrides": overrides,
        "config": config,
        "metrics": metrics,
        "params": 1234,
        "tokens_per_sec": 1.0,
        "wall_s": 3.0,
        "git_sha": "abc",
    }
    if task:
        summary["task"] = task
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    rows = ["step,epoch,train/loss,val/loss"]
    for step, value in curve or [(9, 1.0), (19, 0.5)]:
        rows += [f"{step},0,{value + 0.1},", f"{step},0,,{value}"]  # sparse, as Lightning writes
    (run_dir / "metrics.csv").write_text("\n".join(rows) + "\n")
    return run_dir


def norm_sweep(root: Path, values: dict[str, list[float]] | None = None, **kw) -> Path:
    """A Hydra multirun: one job per (model.norm, seed), numbered like Hydra does."""
    sweep = root / "logs" / "copy" / "multiruns" / "2025-01-01_00-00-00"
    job = 0
    for norm, losses in (values or {"pre": PRE, "post": POST}).items():
        for seed, loss in enumerate(losses):
            overrides = [
                "model=decoder_only",
                f"model.norm={norm}",
                f"seed={seed}",
                f"hydra.run.dir=out/{job}",
            ]
            metrics = {"val/loss": loss, "val/exact_match": 1 - loss, "test/loss": loss + 0.01}
            write_run(sweep / str(job), overrides, metrics, **kw)
            job += 1
    return sweep


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_are_grouped_by_varying_overrides_excluding_seed(tmp_path):
    groups = group_runs(load_runs([str(norm_sweep(tmp_path))]))
    assert [g.label for g in groups] == ["model.norm=post", "model.norm=pre"]
    assert [len(g.runs) for g in groups] == [3, 3]


def test_table_shows_mean_and_sample_std_over_seeds(tmp_path, capsys):
    rows = summarize(group_runs(load_runs([str(norm_sweep(tmp_path))])), ["val/loss"])
    pre = next(r for r in rows if r["model.norm"] == "pre")
    assert pre["val/loss_mean"] == pytest.approx(np.mean(PRE))
    assert pre["val/loss_std"] == pytest.approx(np.std(PRE, ddof=1))
    code, out, _ = run_cli(capsys, norm_sweep(tmp_path / "b"), "--metric", "val/loss")
    assert code == 0
    assert f"{np.mean(PRE):.4g} ± {np.std(PRE, ddof=1):.4g}" in out


def test_std_is_a_dash_below_two_runs(tmp_path, capsys):
    code, out, _ = run_cli(capsys, norm_sweep(tmp_path, {"pre": [0.5], "post": [0.6, 0.7]}))
    assert code == 0
    assert "0.5 ± —" in out


def test_failed_and_diverged_runs_are_counted_but_not_averaged(tmp_path):
    sweep = norm_sweep(tmp_path)
    write_run(sweep / "90", ["model.norm=pre", "seed=7"], {"val/loss": 99.0}, status="failed")
    write_run(
        sweep / "91", ["model.norm=pre", "seed=8"], {"val/loss": float("nan")}, status="diverged"
    )
    rows = summarize(group_runs(load_runs([str(sweep)])), ["val/loss"])
    pre = next(r for r in rows if r["model.norm"] == "pre")
    assert (pre["n"], pre["failed"], pre["diverged"], pre["val/loss_n"]) == (5, 2, 1, 3)
    assert pre["val/loss_mean"] == pytest.approx(np.mean(PRE))


@pytest.mark.parametrize(
    ("metric", "best"), [("val/loss", "pre"), ("val/exact_match", "pre"), ("test/loss", "pre")]
)
def test_best_group_is_marked_on_the_main_metric(tmp_path, capsys, metric, best):
    code, out, _ = run_cli(capsys, norm_sweep(tmp_path), "--metric", metric)
    starred = [line for line in out.splitlines() if "★" in line and line.startswith("|")]
    assert code == 0 and len(starred) == 1
    assert starred[0].startswith(f"| {best} |")


def test_two_groups_get_the_welch_p_value_from_scipy(tmp_path, capsys):
    expected = stats.ttest_ind(POST, PRE, equal_var=False)
    result = welch(POST, PRE)
    assert result.t == pytest.approx(expected.statistic)
    assert result.p == pytest.approx(expected.pvalue)
    code, out, _ = run_cli(capsys, norm_sweep(tmp_path))
    assert code == 0
    assert (
        f"Welch t-test on val/loss: model.norm=post vs model.norm=pre: "
        f"t={expected.statistic:.3g}, p={expected.pvalue:.3g} (n=3 vs 3)"
    ) in out


def test_vs_picks_two_of_several_groups_by_unique_part_of_label(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": PRE, "post": POST, "sandwich": [0.4, 0.45]})
    code, out, _ = run_cli(capsys, sweep)
    assert code == 0 and "Welch" not in out  # three groups: no automatic test
    code, out, _ = run_cli(capsys, sweep, "--vs", "sandwich", "pre")
    expected = stats.ttest_ind([0.4, 0.45], PRE, equal_var=False)
    assert code == 0
    assert f"model.norm=sandwich vs model.norm=pre: t={expected.statistic:.3g}" in out


def test_repeated_vs_makes_planned_comparisons_holm_corrected_over_them(tmp_path, capsys):
    groups = {"pre": PRE, "post": POST, "sandwich": [0.4, 0.45, 0.5]}
    sweep = norm_sweep(tmp_path, groups)
    code, out, _ = run_cli(capsys, sweep, "--vs", "sandwich", "pre", "--vs", "post", "pre")
    p = [stats.ttest_ind(groups[a], PRE, equal_var=False).pvalue for a in ("sandwich", "post")]
    lines = [line for line in out.splitlines() if line.startswith("Welch")]
    assert code == 0 and len(lines) == 2
    assert "model.norm=sandwich vs model.norm=pre" in lines[0]
    assert "model.norm=post vs model.norm=pre" in lines[1]
    # Holm over the two: the smaller p times 2, the larger kept monotone and at most 1
    low, high = sorted(p)
    expected = {low: min(1.0, 2 * low), high: min(1.0, max(2 * low, high))}
    for line, raw in zip(lines, p, strict=True):
        assert f"Holm p={expected[raw]:.3g}" in line
    code, _, err = run_cli(capsys, sweep, "--vs", "post", "pre", "--vs", "pre", "model.norm=pre")
    assert code == 2 and "names the same group" in err


def test_vs_best_tests_the_best_group_against_each_other_group(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": PRE, "post": POST, "sandwich": [0.4, 0.45]})
    code, out, _ = run_cli(capsys, sweep, "--vs-best")
    groups = [(PRE, "pre"), (POST, "post"), ([0.4, 0.45], "sandwich")]
    best = min(groups, key=lambda g: sum(g[0]) / len(g[0]))  # val/loss: lower is better
    others = [g for g in groups if g[1] != best[1]]
    assert code == 0 and out.count("Welch t-test on val/loss") == 2
    for values, name in others:
        expected = stats.ttest_ind(best[0], values, equal_var=False)
        assert (
            f"model.norm={best[1]} vs model.norm={name}: t={expected.statistic:.3g}, "
            f"p={expected.pvalue:.3g}"
        ) in out
    code, _, err = run_cli(capsys, sweep, "--vs-best", "--vs", "pre", "post")
    assert code == 2 and "give one of them" in err


def test_csv_format_parses_with_the_csv_module(tmp_path, capsys):
    code, out, _ = run_cli(capsys, norm_sweep(tmp_path), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["model.norm"] for r in rows] == ["post", "pre"]
    assert float(rows[1]["val/loss_mean"]) == pytest.approx(np.mean(PRE))
    assert float(rows[1]["val/loss_std"]) == pytest.approx(np.std(PRE, ddof=1))
    assert [r["best"] for r in rows] == ["false", "true"]


def test_plot_writes_a_png_of_validation_curves(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, curve=[(9, 1.0), (19, 0.6), (29, 0.4)])
    write_run(
        sweep / "50", ["model.norm=pre", "seed=9"], {"val/loss": 0.5}, curve=[(5, 1.2), (15, 0.7)]
    )  # logged at other steps
    png = tmp_path / "curves.png"
    code, _, err = run_cli(capsys, sweep, "--plot", png)
    assert code == 0 and f"wrote {png}" in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_curves_align_on_the_union_of_steps_without_extrapolation():
    a = (np.array([0.0, 10.0]), np.array([1.0, 0.0]))
    b = (np.array([0.0, 5.0]), np.array([3.0, 2.0]))
    steps, mean, low, high = align_curves([a, b])
    assert steps.tolist() == [0, 5, 10]
    assert mean.tolist() == [2.0, 1.25, 0.0]  # at step 10 only run a is left
    assert low.tolist() == [1.0, 0.5, 0.0] and high.tolist() == [3.0, 2.0, 0.0]


def test_globs_and_nested_sweep_directories_are_searched(tmp_path, capsys, monkeypatch):
    norm_sweep(tmp_path)
    write_run(
        tmp_path / "logs" / "copy" / "runs" / "single", ["model.norm=rmsnorm"], {"val/loss": 0.3}
    )
    monkeypatch.chdir(tmp_path)
    assert len(load_runs(["logs"])) == 7
    assert len(load_runs(["logs/*/multiruns/*"])) == 6
    assert len(load_runs(["logs/copy/multiruns/*/0", "logs/**/single"])) == 2
    code, out, _ = run_cli(capsys, "logs/*/multiruns/*/[0-2]")
    assert code == 0 and "| 3 |" in out and "all runs" in out  # one setting, three seeds


def test_by_groups_on_config_keys_and_model_means_its_name(tmp_path):
    sweep = norm_sweep(tmp_path)
    write_run(
        sweep / "60", ["model=encoder_decoder", "model.norm=pre", "seed=0"], {"val/loss": 0.2}
    )
    runs = load_runs([str(sweep)])
    assert [g.label for g in group_runs(runs, ["model"])] == [
        "model=decoder_only",
        "model=encoder_decoder",
    ]
    assert [len(g.runs) for g in group_runs(runs, ["model", "model.norm"])] == [3, 3, 1]


def test_a_list_setting_is_spelled_and_filtered_as_on_the_command_line(tmp_path):
    sweep = tmp_path / "sweep"
    for job, pattern in enumerate([["sliding_window*5", "full"], ["full"]]):
        spelled = "[" + ",".join(pattern) + "]"
        run = write_run(sweep / str(job), ["model.attention=hybrid",
                                           f"model.layer_pattern={spelled}"], {"val/loss": 0.1})
        summary = json.loads((run / "summary.json").read_text())
        summary["config"]["model"]["layer_pattern"] = pattern  # a list, as a run saves it
        (run / "summary.json").write_text(json.dumps(summary))
    runs = load_runs([str(sweep)])
    labels = {g.label for g in group_runs(runs, ["model.layer_pattern"])}
    assert labels == {"model.layer_pattern=[sliding_window*5,full]", "model.layer_pattern=[full]"}
    assert len(filter_runs(runs, [("model.layer_pattern", "[full]")])) == 1


def test_default_metrics_follow_the_task(tmp_path, capsys):
    seq2seq = norm_sweep(tmp_path / "s")
    write_run(
        seq2seq / "70",
        ["model.norm=pre", "seed=5"],
        {"val/loss": 0.5, "val/exact_match": 0.5, "val/bleu": 30.0},
    )
    _, out, _ = run_cli(capsys, seq2seq)
    header = [c for c in out.splitlines()[0].strip("| ").split(" | ") if "CI" not in c]
    assert header[-3:] == ["val/loss", "val/exact_match", "val/bleu"]
    lm = tmp_path / "lm"  # an old run: no "task", the metric names tell
    write_run(lm / "0", ["seed=0"], {"val/loss": 2.0, "val/ppl": 7.4, "val/acc": 0.3}, task=None)
    _, out, _ = run_cli(capsys, lm)
    header = "| val/loss | val/loss 95 % t CI | val/ppl | val/ppl 95 % t CI |"
    assert out.splitlines()[0].endswith(header)


@pytest.fixture
def sweep(tmp_path):
    return norm_sweep(tmp_path)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["{tmp}/nowhere"], "nowhere"),
        (["{tmp}/empty"], "no summary.json under"),
        (["{tmp}/corrupt"], "corrupt/summary.json"),
        (["{sweep}", "--metric", "val/blue"], "val/exact_match"),
        (["{sweep}", "--by", "model.nrom"], "model.norm"),
        (["{sweep}", "--vs", "sandwich", "pre"], "sandwich"),
        (["{sweep}", "--plot", "{tmp}/missing/dir/curves.png"], "does not exist"),
        (["{sweep}", "--plot", "x.png", "--curve-metric", "val/nope"], "train/loss, val/loss"),
        (["--wandb", "team/proj", "--group", "g"], "WANDB_MODE=offline"),
        ([], "no runs given"),
        (["{sweep}", "--format", "xml"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_error_line(tmp_path, sweep, capsys, monkeypatch, argv, named):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "summary.json").write_text('{"status": "compl')
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *(a.format(tmp=tmp_path, sweep=sweep) for a in argv))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and named in err
    assert not (tmp_path / "x.png").exists()


def test_runs_on_disk_are_never_modified(tmp_path, capsys):
    sweep = norm_sweep(tmp_path)

    def snapshot() -> dict[str, tuple[int, int]]:
        return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.rglob("*")}

    before = snapshot()
    assert run_cli(capsys, sweep, "--format", "csv")[0] == 0
    assert snapshot() == before


def _python(code_or_module: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, *code_or_module],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_compare_does_not_import_torch(tmp_path):
    sweep = norm_sweep(tmp_path)
    script = (
        "import sys\n"
        "from attnlab.compare import main\n"
        f"code = main([{str(sweep)!r}, '--plot', 'c.png'])\n"
        "heavy = [m for m in ('torch', 'lightning', 'attnlab.models') if m in sys.modules]\n"
        "assert code == 0 and not heavy, (code, heavy)\n"
    )
    result = _python(["-c", script], tmp_path)
    assert result.returncode == 0, result.stderr


def test_python_dash_m_runs_the_command(tmp_path):
    result = _python(
        ["-m", "attnlab.compare", str(norm_sweep(tmp_path)), "--format", "csv"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("group,model.norm,n,failed")
