"""attnlab-compare output: plot file formats, distinct curve styles, LaTeX and JSON tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlab.compare import group_runs, load_runs, plot_curves
from attnlab.compare.report import format_number, latex_escape
from test_compare import POST, norm_sweep, run_cli, write_run

FIVE = [0.50, 0.52, 0.47, 0.49, 0.51]

MAGIC = {"png": (b"\x89PNG\r\n\x1a\n",), "pdf": (b"%PDF",), "svg": (b"<?xml", b"<svg")}


@pytest.mark.parametrize("fmt", sorted(MAGIC))
def test_plot_writes_the_format_its_suffix_names(tmp_path, capsys, fmt):
    target = tmp_path / f"curves.{fmt}"
    code, _, err = run_cli(capsys, norm_sweep(tmp_path), "--plot", target)
    assert code == 0 and f"wrote {target}" in err
    assert target.read_bytes().startswith(MAGIC[fmt])


@pytest.mark.parametrize("name", ["curves.jpg", "curves"])
def test_plot_with_an_unknown_suffix_is_one_error_naming_the_formats(tmp_path, capsys, name):
    code, out, err = run_cli(capsys, norm_sweep(tmp_path), "--plot", tmp_path / name)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: ") and ".png, .pdf, .svg" in err
    assert not (tmp_path / name).exists()


def test_twenty_groups_get_twenty_distinct_colour_and_line_style_pairs(tmp_path):
    for g in range(20):
        write_run(tmp_path / str(g), [f"model.d_model={g}", "seed=0"], {"val/loss": 0.5})
    groups = group_runs(load_runs([str(tmp_path)]))
    fig = plot_curves(groups, "val/loss")
    lines = fig.axes[0].lines
    styles = {(line.get_color(), line.get_linestyle()) for line in lines}
    assert len(lines) == 20 and len(styles) == 20
    assert fig.legends and not fig.axes[0].get_legend()  # many groups: legend below the axes


def test_a_legend_of_long_labels_below_the_axes_fits_inside_the_figure(tmp_path):
    keys = ["model.norm={}", "optim.warmup_steps={}", "optim.lr={}"]
    for g in range(12):
        setting = (("post", "pre")[g % 2], 50 * (g // 4), (0.0005, 0.001)[g // 2 % 2])
        overrides = [k.format(v) for k, v in zip(keys, setting, strict=True)]
        write_run(tmp_path / str(g), [*overrides, "seed=0"], {"val/loss": 0.5})
    fig = plot_curves(group_runs(load_runs([str(tmp_path)])), "val/loss")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the constrained layout places the legend when drawn
    renderer = canvas.get_renderer()
    legend, page = fig.legends[0].get_window_extent(renderer), fig.bbox
    assert page.x0 <= legend.x0 and legend.x1 <= page.x1 and page.y0 <= legend.y0


@pytest.mark.parametrize(("values", "scale"), [((0.8, 2.0, 40.0), "linear"), ((0.8, 9e3), "log")])
def test_curves_spanning_more_than_three_decades_get_a_log_axis(tmp_path, values, scale):
    for g, top in enumerate(values):
        curve = [(0, 0.8), (10, top)]
        write_run(tmp_path / str(g), [f"model.norm=n{g}", "seed=0"], {"val/loss": 1}, curve=curve)
    fig = plot_curves(group_runs(load_runs([str(tmp_path)])), "val/loss")
    assert fig.axes[0].get_yscale() == scale


def test_latex_format_is_a_booktabs_tabular_with_escaped_cells(tmp_path, capsys):
    code, out, err = run_cli(capsys, norm_sweep(tmp_path), "--format", "latex")
    assert code == 0 and r"\begin{tabular}{lrrllll}" in out
    assert out.rstrip().endswith(r"\end{tabular}")
    assert all(rule in out for rule in (r"\toprule", r"\midrule", r"\bottomrule"))
    assert r"val/exact\_match 95 \% t CI" in out and "exact_match" not in out.replace(r"\_", "")
    assert r"0.4967 $\pm$ 0.02517 $\star$" in out and "±" not in out.split(r"\begin")[1]
    assert "Welch t-test" in err and "Welch" not in out  # stdout: only the table


def test_latex_escape_covers_the_special_characters():
    assert latex_escape("a_b 50% R&D #1 ± ★ —") == r"a\_b 50\% R\&D \#1 $\pm$ $\star$ ---"


def test_json_format_holds_numbers_and_the_md_tables_means(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": FIVE, "post": POST})
    code, out, err = run_cli(capsys, sweep, "--format", "json")
    rows = json.loads(out)
    _, md, _ = run_cli(capsys, sweep)
    assert code == 0 and "Welch t-test" in err
    assert [r["settings"]["model.norm"] for r in rows] == ["post", "pre"]
    pre = rows[1]
    assert pre["n"] == 5 and pre["failed"] == 0 and pre["best"] is True
    loss = pre["metrics"]["val/loss"]
    assert loss["mean"] == pytest.approx(np.mean(FIVE)) and loss["median"] == np.median(FIVE)
    assert loss["ci_low"] < loss["mean"] < loss["ci_high"] and isinstance(loss["iqm"], float)
    assert rows[0]["metrics"]["val/loss"]["median"] is None  # below 5 runs
    for row in rows:
        for name, values in row["metrics"].items():
            assert f"| {format_number(values['mean'])} ± " in md, name


def test_the_help_examples_read_the_folders_attnlab_train_writes() -> None:
    """Each path of ``attnlab-compare --help`` matches the run or sweep directory Hydra gives
    a run with the defaults (timestamps aside), as docs/design.md's "Runs on disk" says."""
    import re
    from fnmatch import fnmatch

    from hydra import compose, initialize_config_dir

    from attnlab.cli.common import config_dir, register_resolvers
    from attnlab.compare.cli import EPILOG

    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=["paths.log_dir=logs"], return_hydra_config=True)
    written = [str(cfg.hydra.run.dir), str(cfg.hydra.sweep.dir), f"{cfg.hydra.sweep.dir}/0"]
    stamp = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_[0-9a-f]{8}")
    commands = [line.split()[1:] for line in EPILOG.splitlines()
                if line.strip().startswith("attnlab-compare ")]  # fmt: skip
    words = [word.strip("'") for command in commands for word in command]
    examples = [word for word in words if word.startswith("logs")]
    assert len(examples) >= 7
    for example in examples:
        assert any(fnmatch(stamp.sub("STAMP", real), stamp.sub("STAMP", example))
                   for real in written), (example, written)  # fmt: skip
