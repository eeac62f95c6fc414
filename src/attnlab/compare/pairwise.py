"""Two groups compared: Welch's t-test, Holm's correction, effect sizes, seeds needed.

scipy.stats is imported inside the functions: it costs a noticeable fraction of
``attnlab-compare``'s start-up and a plain table does not need it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 1000


@dataclass
class WelchResult:
    """Welch's unequal-variance t-test of group A against group B."""

    t: float
    p: float
    n_a: int
    n_b: int
    # mean A − mean B and its 95 % confidence interval (Welch–Satterthwaite degrees of freedom)
    diff: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)


def welch(a: Sequence[float], b: Sequence[float]) -> WelchResult:
    """Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) and the 95 % CI of the
    difference of the means it implies; NaN below two per side."""
    if len(a) < 2 or len(b) < 2:
        return WelchResult(math.nan, math.nan, len(a), len(b))
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero variance -> NaN, said in the output
        result = stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(1 - ALPHA)
    diff = float(np.mean(a) - np.mean(b))
    ci = (float(interval.low), float(interval.high))
    return WelchResult(float(result.statistic), float(result.pvalue), len(a), len(b), diff, ci)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (Holm 1979), in the order given; NaN stays NaN.

    With the m finite p sorted ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j))
    (1-based), so every p̃ ≥ p and rejecting p̃ < α controls the family-wise error at α.
    """
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full_like(p, math.nan)
    finite = np.flatnonzero(~np.isnan(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted.tolist()


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float:
    """Hedges' g of A − B: Cohen's d with the pooled SD, times J = 1 − 3/(4(n_a + n_b) − 9).

    d = (x̄_a − x̄_b) / s_p,  s_p² = ((n_a − 1)s_a² + (n_b − 1)s_b²) / (n_a + n_b − 2)
    (Hedges 1981). NaN below two runs per side or without variance.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n_a, n_b = len(x), len(y)
    if n_a < 2 or n_b < 2:
        return math.nan
    pooled = ((n_a - 1) * x.var(ddof=1) + (n_b - 1) * y.var(ddof=1)) / (n_a + n_b - 2)
    if pooled == 0:
        return math.nan
    correction = 1 - 3 / (4 * (n_a + n_b) - 9)
    return float(correction * (x.mean() - y.mean()) / math.sqrt(pooled))


def probability_of_improvement(
    a: Sequence[float], b: Sequence[float], lower_is_better: bool = False
) -> float:
    """P(A better than B): the fraction of pairs (a_i, b_j) where a_i is better, ties ½.

    That is the Mann–Whitney U of A against B divided by n_a·n_b (Agarwal et al. 2021,
    "Deep RL at the edge of the statistical precipice"). NaN when a side is empty.
    """
    x, y = np.asarray(a, dtype=float)[:, None], np.asarray(b, dtype=float)[None, :]
    if x.size == 0 or y.size == 0:
        return math.nan
    better = x < y if lower_is_better else x > y
    return float(better.mean() + 0.5 * (x == y).mean())


def welch_power(
    diff: float, sd_a: float, sd_b: float, n: int | np.ndarray, alpha: float = ALPHA
) -> np.ndarray:
    """Power of the two-sided Welch test with ``n`` runs per group, at the observed effect.

    Noncentral t with δ = diff / √(s_a²/n + s_b²/n) and the Welch–Satterthwaite
    df = (s_a²/n + s_b²/n)² / ((s_a²/n)²/(n−1) + (s_b²/n)²/(n−1)):
    power = P(T > t_{1−α/2}) + P(T < −t_{1−α/2}), T ~ nct(df, δ).
    """
    from scipy import stats

    n = np.asarray(n, dtype=float)
    va, vb = sd_a**2 / n, sd_b**2 / n
    df = (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))
    delta = diff / np.sqrt(va + vb)
    critical = stats.t.ppf(1 - alpha / 2, df)
    return stats.nct.sf(critical, df, delta) + stats.nct.cdf(-critical, df, delta)


def seeds_for_power(
    diff: float,
    sd_a: float,
    sd_b: float,
    power: float = POWER,
    alpha: float = ALPHA,
    max_n: int = MAX_SEEDS,
) -> int | None:
    """The smallest n per group whose :func:`welch_power` reaches ``power``; None above max_n."""
    if diff == 0 or not math.isfinite(diff) or sd_a == sd_b == 0:
        return None
    n = np.arange(2, max_n + 1)
    reached = np.flatnonzero(welch_power(diff, sd_a, sd_b, n, alpha) >= power)
    return int(n[reached[0]]) if len(reached) else None


@dataclass
class Comparison:
    """Group A against group B on one metric; ``p_holm`` is None when only one test was made."""

    metric: str
    label_a: str
    label_b: str
    welch: WelchResult
    p_holm: float | None
    hedges_g: float
    p_better: float  # P(a run of A beats a run of B)
    seeds_needed: int | None  # for power 0.8 at α = 0.05; None when above MAX_SEEDS

    @property
    def significant(self) -> bool:
        p = self.welch.p if self.p_holm is None else self.p_holm
        return p < ALPHA


def compare_pairs(
    pairs: Sequence[tuple[str, Sequence[float], str, Sequence[float]]],
    metric: str,
    lower_is_better: bool,
) -> list[Comparison]:
    """Each ``(label_a, a, label_b, b)`` compared; Holm-adjusted when there are several."""
    tests = [welch(a, b) for _, a, _, b in pairs]
    adjusted = holm([t.p for t in tests]) if len(tests) > 1 else [None] * len(tests)
    comparisons = []
    for (label_a, a, label_b, b), test, p_holm in zip(pairs, tests, adjusted, strict=True):
        needed = None
        if not math.isnan(test.p):
            diff = float(np.mean(a) - np.mean(b))
            needed = seeds_for_power(diff, float(np.std(a, ddof=1)), float(np.std(b, ddof=1)))
        comparisons.append(
            Comparison(
                metric,
                label_a,
                label_b,
                test,
                p_holm,
                hedges_g(a, b),
                probability_of_improvement(a, b, lower_is_better),
                needed,
            )
        )
    return comparisons
