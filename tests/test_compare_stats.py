"""attnlab-compare statistics, each checked against a hand computation or scipy."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from scipy import stats

from attnlab.compare import (
    bootstrap_ci,
    compare_pairs,
    hedges_g,
    holm,
    interquartile_mean,
    probability_of_improvement,
    seeds_for_power,
    t_interval,
    welch_power,
)
from test_compare import PRE, norm_sweep, run_cli, write_run

FIVE_PRE = [0.50, 0.52, 0.47, 0.49, 0.51]
FIVE_POST = [0.61, 0.66, 0.58, 0.55, 0.70]


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible():
    low, high = bootstrap_ci(FIVE_POST)
    assert low < np.mean(FIVE_POST) < high
    assert bootstrap_ci(FIVE_POST) == (low, high)
    expected = stats.bootstrap((np.array(FIVE_POST),), np.mean, method="BCa", rng=0)
    assert (low, high) == pytest.approx(tuple(expected.confidence_interval))


def test_bootstrap_ci_falls_back_to_percentile_where_bca_degenerates():
    expected = stats.bootstrap((np.array([0.4, 0.45]),), np.mean, method="percentile", rng=0)
    assert bootstrap_ci([0.4, 0.45]) == pytest.approx(tuple(expected.confidence_interval))
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert bootstrap_ci([0.5]) is None


def test_t_interval_is_the_mean_plus_minus_t_times_the_standard_error():
    values = [0.61, 0.66, 0.58]  # mean 0.6167, s = 0.04041, t_{0.975, 2} = 4.3027
    half = 4.302653 * np.std(values, ddof=1) / math.sqrt(3)
    assert t_interval(values) == pytest.approx((np.mean(values) - half, np.mean(values) + half))
    expected = stats.t.interval(0.95, 4, loc=np.mean(FIVE_POST), scale=stats.sem(FIVE_POST))
    assert t_interval(FIVE_POST) == pytest.approx(expected)
    assert t_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert t_interval([0.5]) is None


def _coverage(interval, n: int, trials: int) -> float:
    """The share of ``trials`` standard-normal samples of size ``n`` whose interval holds 0."""
    samples = np.random.default_rng(0).standard_normal((trials, n))
    return float(np.mean([low <= 0 <= high for low, high in map(interval, samples)]))


def test_t_interval_covers_the_mean_95_percent_of_the_time_at_three_seeds():
    assert _coverage(t_interval, n=3, trials=4000) == pytest.approx(0.95, abs=0.015)


def test_bootstrap_ci_of_three_seeds_covers_the_mean_far_less_than_95_percent():
    assert _coverage(bootstrap_ci, n=3, trials=1000) < 0.85  # 0.74: why tables use t


def test_interquartile_mean_is_the_mean_of_the_middle_half():
    values = [10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -20.0]  # sorted: -20 1 2 3 4 5 6 10
    assert interquartile_mean(values) == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))


def test_holm_adjusted_p_values_match_a_hand_computation():
    # sorted 0.005, 0.01, 0.03, 0.04 (m=4): ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04 → running max
    adjusted = holm([0.01, 0.04, 0.03, math.nan, 0.005])
    assert adjusted[:3] + adjusted[4:] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adjusted[3])
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1


def test_hedges_g_matches_the_textbook_formula():
    a, b = [1.0, 2.0, 3.0], [2.0, 3.0, 5.0]  # means 2 and 10/3; variances 1 and 7/3
    pooled_sd = math.sqrt((2 * 1 + 2 * 7 / 3) / 4)
    d = (2 - 10 / 3) / pooled_sd
    assert hedges_g(a, b) == pytest.approx(d * (1 - 3 / (4 * 6 - 9)))
    assert math.isnan(hedges_g([1.0], b)) and math.isnan(hedges_g([1.0, 1.0], [1.0, 1.0]))


def test_probability_of_improvement_counts_ties_as_half():
    a, b = [1.0, 2.0, 3.0], [2.0, 3.0, 5.0]
    # a > b: (3, 2) → 1 pair; ties: (2, 2), (3, 3) → 2 pairs; of 9
    assert probability_of_improvement(a, b) == pytest.approx((1 + 0.5 * 2) / 9)
    assert probability_of_improvement(a, b, lower_is_better=True) == pytest.approx(
        (6 + 0.5 * 2) / 9
    )
    u = stats.mannwhitneyu(FIVE_POST, FIVE_PRE).statistic
    assert probability_of_improvement(FIVE_POST, FIVE_PRE) == pytest.approx(u / 25)


def test_power_analysis_finds_the_smallest_sufficient_n():
    # equal SDs and n: Welch's df is Student's 2(n−1); Cohen's table: 64 for d=0.5, 26 for 0.8
    assert seeds_for_power(0.5, 1.0, 1.0) == 64
    assert seeds_for_power(0.8, 1.0, 1.0) == 26
    diff, sd_a, sd_b = -0.1, 0.05, 0.2
    n = seeds_for_power(diff, sd_a, sd_b)
    assert welch_power(diff, sd_a, sd_b, n) >= 0.8 > welch_power(diff, sd_a, sd_b, n - 1)
    # by hand: noncentral t with Welch–Satterthwaite df at that n
    va, vb = sd_a**2 / n, sd_b**2 / n
    df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    crit, nc = stats.t.ppf(0.975, df), diff / math.sqrt(va + vb)
    assert welch_power(diff, sd_a, sd_b, n) == pytest.approx(
        1 - stats.nct.cdf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)
    )
    assert seeds_for_power(0.001, 1.0, 1.0) is None  # beyond the 1000 cap
    assert seeds_for_power(0.0, 1.0, 1.0) is None


def test_several_tests_are_holm_corrected_and_one_is_not():
    groups = [("pre", FIVE_PRE), ("post", FIVE_POST), ("few", [0.4, 0.45])]
    pairs = [(la, a, lb, b) for i, (la, a) in enumerate(groups) for lb, b in groups[i + 1 :]]
    comparisons = compare_pairs(pairs, "val/loss", lower_is_better=True)
    raw = [stats.ttest_ind(a, b, equal_var=False).pvalue for _, a, _, b in pairs]
    assert [c.p_holm for c in comparisons] == pytest.approx(holm(raw))
    (single,) = compare_pairs(pairs[:1], "val/loss", lower_is_better=True)
    assert single.p_holm is None and single.p_better == 1.0


def test_table_shows_the_ci_column_and_median_and_iqm_from_five_runs(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": FIVE_PRE, "post": FIVE_POST})
    code, out, _ = run_cli(capsys, sweep, "--metric", "val/loss")
    low, high = t_interval(FIVE_PRE)
    assert code == 0
    assert "| val/loss | val/loss 95 % t CI | val/loss median | val/loss IQM |" in out
    assert f"[{low:.4g}, {high:.4g}] | {np.median(FIVE_PRE):.4g} |" in out
    _, out, _ = run_cli(capsys, norm_sweep(tmp_path / "three"), "--metric", "val/loss")
    assert "95 % t CI" in out and "IQM" not in out  # three runs: no median or IQM


def test_csv_carries_ci_median_and_iqm_columns(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": FIVE_PRE, "post": PRE})
    code, out, _ = run_cli(capsys, sweep, "--metric", "val/loss", "--format", "csv")
    rows = {r["model.norm"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0
    low, high = t_interval(FIVE_PRE)
    assert float(rows["pre"]["val/loss_ci_low"]) == pytest.approx(low)
    assert float(rows["pre"]["val/loss_ci_high"]) == pytest.approx(high)
    assert float(rows["pre"]["val/loss_iqm"]) == pytest.approx(stats.trim_mean(FIVE_PRE, 0.25))
    assert rows["post"]["val/loss_median"] == ""  # three runs


def test_all_pairs_prints_holm_p_effect_size_and_probability_of_improvement(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": FIVE_PRE, "post": FIVE_POST, "sandwich": [0.48, 0.53]})
    code, out, err = run_cli(capsys, sweep, "--metric", "val/loss", "--all-pairs")
    lines = [line for line in out.splitlines() if line.startswith("Welch")]
    assert code == 0 and len(lines) == 3
    t = stats.ttest_ind(FIVE_POST, FIVE_PRE, equal_var=False)
    g = hedges_g(FIVE_POST, FIVE_PRE)
    assert lines[0] == (
        f"Welch t-test on val/loss: model.norm=post vs model.norm=pre: "
        f"t={t.statistic:.3g}, p={t.pvalue:.3g}, Holm p={3 * t.pvalue:.3g} "
        f"(n=5 vs 5); Hedges' g={g:.3g}; P(A better)=0; "
        f"A − B = {np.mean(FIVE_POST) - np.mean(FIVE_PRE):.3g}, "
        f"95% CI [{t.confidence_interval(0.95).low:.3g}, {t.confidence_interval(0.95).high:.3g}]"
    )
    assert "Holm–Bonferroni-adjusted over the 3 tests" in out
    code, _, err = run_cli(capsys, sweep, "--all-pairs", "--vs-best")
    assert code == 2 and "give one of them" in err


def test_a_non_significant_difference_says_how_many_seeds_would_detect_it(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": FIVE_PRE, "sandwich": [0.48, 0.53, 0.50]})
    code, out, _ = run_cli(capsys, sweep, "--metric", "val/loss")
    n = seeds_for_power(
        np.mean(FIVE_PRE) - np.mean([0.48, 0.53, 0.50]),
        np.std(FIVE_PRE, ddof=1),
        np.std([0.48, 0.53, 0.50], ddof=1),
    )
    assert code == 0 and "Holm" not in out.splitlines()[-2]  # one test: no correction
    assert (
        f"not significant at α=0.05: ~{n} seeds per group would detect this difference (power 0.8)"
    ) in out
    _, out, _ = run_cli(capsys, norm_sweep(tmp_path / "sig", {"pre": FIVE_PRE, "post": FIVE_POST}))
    assert "not significant" not in out


def test_groups_below_three_runs_get_one_warning_line(tmp_path, capsys):
    sweep = norm_sweep(tmp_path, {"pre": PRE, "post": [0.6, 0.7], "sandwich": [0.4]})
    code, _, err = run_cli(capsys, sweep, "--metric", "val/loss")
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warnings) == 1
    assert "model.norm=post: n=2" in warnings[0] and "model.norm=sandwich: n=1" in warnings[0]
    _, _, err = run_cli(capsys, norm_sweep(tmp_path / "ok"))
    assert "warning" not in err


def two_rate_sweep(root):
    """model.norm × optim.lr × seeds 0-2: each norm holds two runs of every seed."""
    for job, (norm, lr, seed) in enumerate(
        (n, lr, s) for n in ("pre", "post") for lr in ("1e-3", "2e-3") for s in range(3)
    ):
        loss = (0.5 if norm == "pre" else 0.6) + 0.01 * seed + (0.02 if lr == "2e-3" else 0)
        overrides = [f"model.norm={norm}", f"optim.lr={lr}", f"seed={seed}"]
        write_run(root / str(job), overrides, {"val/loss": loss})
    return root


def test_a_test_over_settings_that_share_seeds_is_warned_about(tmp_path, capsys):
    sweep = two_rate_sweep(tmp_path / "sweep")
    code, _, err = run_cli(capsys, sweep, "--by", "model.norm", "--metric", "val/loss")
    assert code == 0
    assert err.startswith("warning: a test pools runs that share a seed (")
    assert "model.norm=pre: 2 runs of seed 0, 2 runs of seed 1, 2 runs of seed 2" in err
    within = ["--vs", "model.norm=pre optim.lr=1e-3", "model.norm=post optim.lr=1e-3"]
    code, out, err = run_cli(capsys, sweep, "--metric", "val/loss", *within)
    assert code == 0 and "Welch t-test" in out and "pools" not in err
