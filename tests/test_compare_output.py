"""attnlab-compare output: plot file formats, distinct curve styles, LaTeX and JSON tables."""

from __future__ import annotations

import pytest

from attnlab.compare import group_runs, load_runs, plot_curves
from test_compare import norm_sweep, run_cli, write_run

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
