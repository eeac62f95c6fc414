"""experiments/reanalyse.py: the committed tables parse, and its statistics from summaries
agree with attnlab-compare's own on the raw values (``attnlab.compare.pairwise``)."""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest

from attnlab.compare.pairwise import hedges_g, welch
from attnlab.compare.report import format_table
from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("reanalyse", REPO_ROOT / "experiments/reanalyse.py")
reanalyse = sys.modules["reanalyse"] = importlib.util.module_from_spec(_spec)  # for dataclasses
_spec.loader.exec_module(reanalyse)

POST = [0.61, 0.66, 0.58, 0.55, 0.70]
PRE = [0.50, 0.52, 0.47, 0.49]


def _row(norm: str, values: list[float]) -> dict:
    """A row of ``summarize`` as far as ``format_table`` reads it, for one metric."""
    return {
        "model.norm": norm, "n": len(values) + 1, "failed": 1, "diverged": 0, "best": False,
        "val/loss_mean": float(np.mean(values)), "val/loss_std": float(np.std(values, ddof=1)),
        "val/loss_n": len(values), "val/loss_ci_low": 0.4, "val/loss_ci_high": 0.7,
        "val/loss_median": None, "val/loss_iqm": None,
    }  # fmt: skip


def test_parser_reads_the_committed_preln_vs_postln_table():
    rows = reanalyse.parse_table(
        (REPO_ROOT / "experiments/preln_vs_postln_warmup/results.md").read_text()
    )
    assert len(rows) == 12
    best = reanalyse.select(
        rows, {"model.norm": "pre", "optim.warmup_steps": "0", "optim.lr": "0.001"}
    )
    assert best[0].cells["test/bleu"] == reanalyse.Cell("5.759", "0.5668", 3)  # ★ dropped
    assert len(reanalyse.select(rows, {"model.norm": "post"})) == 6


def test_welch_and_hedges_g_from_summaries_equal_pairwise_on_the_raw_values():
    a = (float(np.mean(POST)), float(np.std(POST, ddof=1)), len(POST))
    b = (float(np.mean(PRE)), float(np.std(PRE, ddof=1)), len(PRE))
    t, p = reanalyse.welch_from_stats(*a, *b)
    raw = welch(POST, PRE)
    assert (t, p) == pytest.approx((raw.t, raw.p), rel=1e-12)
    assert reanalyse.hedges_g_from_stats(*a, *b) == pytest.approx(hedges_g(POST, PRE), rel=1e-12)


def test_welch_p_from_a_formatted_table_brackets_the_raw_p():
    table = format_table([_row("post", POST), _row("pre", PRE)], ["model.norm"], ["val/loss"])
    rows = reanalyse.parse_table(table)  # with the CI column newer tables have
    post, pre = (reanalyse.select(rows, {"model.norm": norm}) for norm in ("post", "pre"))
    assert post[0].cells["val/loss"].n == 5  # completed runs: n − failed
    box = [reanalyse.summary(g, "val/loss", draws=4096, seed=s) for s, g in enumerate((post, pre))]
    p_box = reanalyse.welch_from_stats(*box[0], *box[1])[1]
    assert p_box.min() <= welch(POST, PRE).p <= p_box.max()


def test_pooled_summary_is_the_mean_and_sd_of_the_union():
    mean, std, n = reanalyse.pooled(
        np.array([[np.mean(POST)], [np.mean(PRE)]]),
        np.array([[np.std(POST, ddof=1)], [np.std(PRE, ddof=1)]]),
        np.array([len(POST), len(PRE)]),
    )
    union = POST + PRE
    assert (mean[0], std[0], n) == pytest.approx((np.mean(union), np.std(union, ddof=1), 9))


def test_t_based_ci_is_the_textbook_interval():
    low, high = reanalyse.t_ci(10.0, 2.0, 2)
    assert (low, high) == pytest.approx(
        (10 - 12.7062 * 2 / math.sqrt(2), 10 + 12.7062 * 2 / math.sqrt(2)), rel=1e-5
    )
