"""Scaling fits and compute multipliers (``attnlab-compare --fit``, ``--multiplier``).

* ``--fit frontier`` (Kaplan et al. 2020; Hoffmann et al. 2022, approach 1): per group, the
  compute-efficient frontier of a metric against training FLOPs — the best value any run
  reached with at most C FLOPs, read on a log grid of FLOPs where at least one run has a
  validation on both sides — fitted by L(C) = E + A·C^(−α).
* ``--fit final``: the same law fitted to each run's *final* value against its training
  FLOPs (the summary's ``flops``), so that every point is a schedule that ended. With one
  token budget for every size, compute grows through the size alone: L(C) is then the
  loss against model size at fixed data, not the compute-optimal frontier, and the
  multiplier reads "B at one size matches A at k× its compute" (flagged when it applies).
* ``--fit nd`` (Hoffmann et al., approach 3): the final values of a size × token-budget
  grid of separate runs (each with its own schedule length), fitted by
  L(N, D) = E + A/N^α + B/D^β with N the parameters and D the training tokens. Readings
  partway through one run would be biased (its learning rate has not decayed there), so
  only each run's last value is used.

Fits minimise squared error in log L (scipy's ``least_squares``; E ≥ 0, exponents in
(0, 3)) from several starting points, as Hoffmann et al. do; an E that stops a rounding error
above its bound is shown as 0. 95 % CIs (shown to 2 significant digits) come from a
bootstrap: over the seeds of each size (a resample keeps every size, so the fitted range
stays the same) when every size has 2 runs or more and the resamples are varied enough;
otherwise over the fit's residuals. The number of distinct resamples the data allow is
reported.

``--multiplier A B``: the compute multiplier of B against A at a target loss L*: k =
C_A(L*) / C_B(L*) (> 1: B reaches L* with k× less compute), with C(L) = (A/(L − E))^(1/α)
from each frontier; L* is the higher of the two fitted losses at the largest FLOPs both
groups measured, a loss both frontiers reach (or ``--target-loss``). A target outside
either group's measured range is flagged as an extrapolation; a target so near a fitted
floor that C(L) diverges across the bootstrap (the estimate outside its own CI, a CI over
more than six orders of magnitude, or a tenth of the resamples never reaching it) is flagged
as ill-conditioned and shown without a CI; the multiplier over the
common measured range is printed too, and whether the two frontiers cross inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnlab.errors import UserError

from .compute import axis_curve
from .grouping import Group
from .runs import Run

GRID_POINTS = 24
BOOTSTRAP = 1000
CI = 95.0


@dataclass
class Fit:
    """One group's fitted law, its data and its bootstrap draws."""

    label: str
    kind: str  # frontier | final | nd
    names: tuple[str, ...]
    params: np.ndarray
    draws: np.ndarray  # (resamples, params)
    x: np.ndarray  # frontier: C; nd: (N, D) rows
    y: np.ndarray
    rmse: float  # of log L
    bootstrap: str
    distinct: float  # distinct resamples the data allow
    flags: list[str] = field(default_factory=list)

    def interval(self, i: int) -> tuple[float, float]:
        lo, hi = np.nanpercentile(self.draws[:, i], [(100 - CI) / 2, (100 + CI) / 2])
        return float(lo), float(hi)


def frontier_law(c: np.ndarray, e: float, log_a: float, alpha: float) -> np.ndarray:
    return e + np.exp(log_a - alpha * np.log(c))


def nd_law(nd: np.ndarray, e: float, log_a: float, alpha: float, log_b: float,
           beta: float) -> np.ndarray:  # fmt: skip
    n, d = nd[:, 0], nd[:, 1]
    return e + np.exp(log_a - alpha * np.log(n)) + np.exp(log_b - beta * np.log(d))


def _least_squares(law: Any, x: np.ndarray, y: np.ndarray, starts: list[list[float]],
                   lower: list[float], upper: list[float]) -> np.ndarray:  # fmt: skip
    from scipy.optimize import least_squares

    best = None
    for start in starts:
        start = np.clip(start, np.array(lower) + 1e-9, np.array(upper) - 1e-9)
        try:
            result = least_squares(
                lambda p: np.log(np.maximum(law(x, *p), 1e-12)) - np.log(y),
                start, bounds=(lower, upper), method="trf",
            )  # fmt: skip
        except (ValueError, FloatingPointError):
            continue
        if best is None or result.cost < best.cost:
            best = result
    if best is None:
        return np.full(len(lower), np.nan)
    return best.x


def _frontier_starts(c: np.ndarray, y: np.ndarray) -> list[list[float]]:
    floor = float(y.min())
    starts = []
    for e_share in (0.0, 0.5, 0.9):
        for alpha in (0.05, 0.2, 0.5):
            e = e_share * floor
            # A from the first point: y0 − e = A c0^−α
            log_a = math.log(max(float(y[0]) - e, 1e-9)) + alpha * math.log(float(c[0]))
            starts.append([e, log_a, alpha])
    return starts


def fit_frontier_points(c: np.ndarray, y: np.ndarray, start: np.ndarray | None = None
                        ) -> np.ndarray:  # fmt: skip
    """The fit from several starting points, or (a bootstrap refit) from ``start``."""
    upper_e = float(y.min())
    starts = _frontier_starts(c, y) if start is None else [list(start)]
    return _least_squares(frontier_law, c, y, starts,
                          [0.0, -50.0, 1e-4], [upper_e, 200.0, 3.0])  # fmt: skip


def envelope(runs: Sequence[Run], metric: str,
             pointwise: bool = False) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The compute-efficient frontier of the runs' ``metric`` curves against training FLOPs,
    on a log grid spanning where at least one run's validations are (nothing extrapolated):
    the best value any run reached with at most C FLOPs, so that its inverse is Kaplan et
    al.'s C_min(L), the least compute that reaches L (2020, §6.1). Where the sizes' curves
    do not overlap in compute — a small model's run ended before a larger one caught up —
    it holds the earlier best; ``pointwise=True`` gives the plain lower envelope of the
    curves at each C instead."""
    curves = []
    for run in runs:
        curve = axis_curve(run, metric, "flops")
        if curve is None:
            continue
        x, y = (np.asarray(a, dtype=float) for a in curve)
        keep = np.isfinite(y) & (x > 0)
        if keep.sum() >= 2:
            curves.append((x[keep], y[keep]))
    if not curves:
        return np.array([]), np.array([])
    lo = min(float(x[0]) for x, _ in curves)
    hi = max(float(x[-1]) for x, _ in curves)
    grid = np.geomspace(lo, hi, GRID_POINTS)
    values = np.full(GRID_POINTS, np.inf)
    for x, y in curves:
        inside = (grid >= x[0]) & (grid <= x[-1])
        values[inside] = np.minimum(values[inside], np.interp(grid[inside], x, y))
    keep = np.isfinite(values)
    grid, values = grid[keep], values[keep]
    return (grid, values) if pointwise else (grid, np.minimum.accumulate(values))


def _sizes(runs: Sequence[Run], by_tokens: bool = False) -> dict[Any, list[Run]]:
    """The runs of each model size (each (size, token budget) with ``by_tokens``): the
    strata the bootstrap resamples seeds within."""
    by_size: dict[Any, list[Run]] = {}
    for run in runs:
        size = run.metrics.get("params")
        if size is None:
            raise UserError(f"--fit: run {run.path} has no parameter count (params) in its "
                            "summary.json; fit runs written by attnlab-train")  # fmt: skip
        key = (size, run.metrics.get("tokens")) if by_tokens else size
        by_size.setdefault(key, []).append(run)
    return dict(sorted(by_size.items(), key=lambda item: str(item[0])))


def _distinct_stratified(counts: Sequence[int]) -> float:
    # multisets of size k from k items, per size: C(2k − 1, k)
    return float(np.prod([math.comb(2 * k - 1, k) for k in counts]))


def fit_group(group: Group, metric: str, kind: str, seed: int = 0) -> Fit:
    runs = [r for r in group.completed if metric in r.metrics or r.curves is not None]
    by_size = _sizes(runs, by_tokens=kind == "nd")
    rng = np.random.default_rng(seed)
    if kind == "frontier":
        names = ("E", "A", "α")
        c, y = envelope(runs, metric)
        if len({r.metrics["params"] for r in runs}) < 2 or len(c) < 4:
            raise UserError(
                f"--fit frontier: group {group.label} has {len(by_size)} model size(s) and "
                f"{len(c)} frontier points of {metric} against FLOPs; a fit of 3 parameters "
                "needs 2 sizes or more with validation curves (and perf/flops logged)"
            )
        params = fit_frontier_points(c, y)

        def refit(sample: list[Run]) -> np.ndarray:
            cc, yy = envelope(sample, metric)
            return fit_frontier_points(cc, yy, params) if len(cc) >= 4 else np.full(3, np.nan)

        residual = np.log(y) - np.log(frontier_law(c, *params))
        x: np.ndarray = c

        def from_residuals(noise: np.ndarray) -> np.ndarray:
            return fit_frontier_points(c, frontier_law(c, *params) * np.exp(noise), params)
    elif kind == "final":
        names = ("E", "A", "α")
        x, y = _finals(runs, metric)
        if len(by_size) < 3:
            raise UserError(
                f"--fit final: group {group.label} has {len(by_size)} model size(s); a fit of "
                "3 parameters to final values needs 3 sizes or more"
            )
        params = fit_frontier_points(x, y)

        def refit(sample: list[Run]) -> np.ndarray:
            return fit_frontier_points(*_finals(sample, metric), params)

        residual = np.log(y) - np.log(frontier_law(x, *params))

        def from_residuals(noise: np.ndarray) -> np.ndarray:
            return fit_frontier_points(x, frontier_law(x, *params) * np.exp(noise), params)
    else:
        names = ("E", "A", "α", "B", "β")
        finals = [(r.metrics.get("params"), r.metrics.get("tokens"), r.metrics.get(metric))
                  for r in runs]  # fmt: skip
        missing = [r.path for r, f in zip(runs, finals, strict=True) if None in f]
        if missing:
            raise UserError(f"--fit nd: run {missing[0]} lacks params, tokens or {metric} in "
                            "its summary.json; fit runs written by attnlab-train")  # fmt: skip
        x = np.array([[f[0], f[1]] for f in finals], dtype=float)
        y = np.array([f[2] for f in finals], dtype=float)
        budgets = {(n, d) for n, d in x}
        if len(budgets) < 6 or len({n for n, _ in x}) < 2 or len({d for _, d in x}) < 2:
            raise UserError(
                f"--fit nd: group {group.label} has {len(budgets)} distinct (size, tokens) "
                "runs; L(N, D) has 5 parameters and needs 6 or more, over 2 sizes and 2 "
                "token budgets or more (each its own run, with its own schedule)"
            )
        params = _fit_nd(x, y)

        def refit(sample: list[Run]) -> np.ndarray:
            xs = np.array([[r.metrics["params"], r.metrics["tokens"]] for r in sample])
            return _fit_nd(xs, np.array([r.metrics[metric] for r in sample]), params)

        residual = np.log(y) - np.log(nd_law(x, *params))

        def from_residuals(noise: np.ndarray) -> np.ndarray:
            return _fit_nd(x, nd_law(x, *params) * np.exp(noise), params)

    counts = [len(v) for v in by_size.values()]
    distinct = _distinct_stratified(counts)
    if min(counts) >= 2 and distinct >= 100:
        method = "seeds resampled within each size"
        draws = []
        for _ in range(BOOTSTRAP):
            sample = [r for rs in by_size.values() for r in rng.choice(rs, len(rs)).tolist()]
            draws.append(refit(sample))
    else:
        method = "residuals resampled (too few seeds per size to resample runs)"
        n = len(residual)
        distinct = float(math.comb(2 * n - 1, n))
        draws = [from_residuals(rng.choice(residual, n)) for _ in range(BOOTSTRAP)]
    fit = Fit(group.label, kind, names, params, np.array(draws), x, y,
              float(np.sqrt(np.mean(residual**2))), method, distinct)  # fmt: skip
    if kind == "frontier":
        _, plain = envelope(runs, metric, pointwise=True)
        held = float(np.mean(plain > y * 1.01))
        if held > 0:
            fit.flags.append(f"{group.label}: over {held:.0%} of the FLOPs range every curve "
                             "there is above an earlier best, which the frontier holds (the "
                             "sizes' curves do not overlap in compute, or they rise): train "
                             "the smaller sizes longer")  # fmt: skip
    if kind == "final" and len({r.metrics.get("tokens") for r in runs}) == 1:
        fit.flags.append(f"{group.label}: every size trained on the same tokens, so compute "
                         "grows through size alone: the fit is loss against size at fixed "
                         "data, not the compute-optimal frontier")  # fmt: skip
    if kind == "frontier":
        fit.flags.append("the frontier reads each run partway through its schedule, which "
                         "biases it upwards (Hoffmann et al. §3.1); --fit nd uses final "
                         "values only")  # fmt: skip
    return fit


def _finals(runs: Sequence[Run], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Each run's training FLOPs and final ``metric``, in order of FLOPs."""
    pairs = [(r.metrics.get("flops"), r.metrics.get(metric)) for r in runs]
    missing = [r.path for r, pair in zip(runs, pairs, strict=True) if None in pair]
    if missing:
        raise UserError(f"--fit final: run {missing[0]} lacks flops or {metric} in its "
                        "summary.json; fit runs written by attnlab-train")  # fmt: skip
    x, y = np.array(sorted(pairs), dtype=float).T
    return x, y


def _fit_nd(x: np.ndarray, y: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    floor = float(y.min())
    starts = [] if start is None else [list(start)]
    for e_share in (0.0, 0.5, 0.9) if start is None else ():
        for alpha in (0.1, 0.3, 0.6):
            e = e_share * floor
            head = math.log(max((float(y.max()) - e) / 2, 1e-9))
            starts.append([e, head + alpha * math.log(float(x[:, 0].min())), alpha,
                           head + alpha * math.log(float(x[:, 1].min())), alpha])  # fmt: skip
    return _least_squares(nd_law, x, y, starts, [0.0, -50.0, 1e-4, -50.0, 1e-4],
                          [floor, 200.0, 3.0, 200.0, 3.0])  # fmt: skip


def bound(value: float) -> str:
    """A bootstrap percentile to 2 significant digits: over 1000 resamples its Monte Carlo
    error is a few per cent, and the refits that set it (near-degenerate ones, in the
    tails) move in later digits with the machine's floating point."""
    return f"{value:.2g}"


def describe(fit: Fit) -> list[str]:
    """One line per fit: each parameter with its bootstrap CI. A floor E within 1e-9 of the
    data's scale of its bound 0 is shown as 0: the optimiser stops a rounding error away
    from a bound, and that residue is not an estimate."""
    at_zero = 1e-9 * float(np.max(np.abs(fit.y)))
    parts = []
    for i, name in enumerate(fit.names):
        value, (lo, hi) = fit.params[i], fit.interval(i)
        if name in ("A", "B"):  # fitted as logs
            value, lo, hi = math.exp(value), math.exp(lo), math.exp(hi)
        if name == "E":
            value, lo, hi = (0.0 if v < at_zero else v for v in (value, lo, hi))
        parts.append(f"{name} = {value:.4g} [{bound(lo)}, {bound(hi)}]")
    return [f"  {fit.label}: {', '.join(parts)}; RMSE of log L {fit.rmse:.4f}"]


def header(fits: Sequence[Fit], metric: str) -> str:
    fit = fits[0]
    if fit.kind == "frontier":
        law = (f"L(C) = E + A·C^(−α): the compute-efficient frontier of {metric} against "
               "training FLOPs (the best value any run reached within C)")  # fmt: skip
    elif fit.kind == "final":
        law = (f"L(C) = E + A·C^(−α): the final {metric} of each run against its training "
               "FLOPs (each point a schedule that ended)")  # fmt: skip
    else:
        law = (f"L(N, D) = E + A/N^α + B/D^β: the final {metric} of each run against its "
               "parameters N and training tokens D")  # fmt: skip
    methods = "; ".join(sorted({f"{f.label}: {f.bootstrap}, {f.distinct:.3g} distinct"
                                for f in fits}))  # fmt: skip
    return f"Scaling fit {law}; {CI:g}% bootstrap CIs ({BOOTSTRAP} resamples; {methods}):"


def compute_for(params: np.ndarray, loss: float) -> float:
    """C(L) = (A / (L − E))^(1/α) of a frontier fit; inf at or below its floor E."""
    e, log_a, alpha = params[:3]
    if loss <= e:
        return math.inf
    return math.exp((log_a - math.log(loss - e)) / alpha)


def multiplier(a: Fit, b: Fit, target: float | None) -> list[str]:
    """Lines describing the compute multiplier of ``b`` against ``a``."""
    if a.kind == "nd":
        raise UserError("--multiplier reads compute from L(C) fits; use it with "
                        "--fit frontier or --fit final")  # fmt: skip
    lo = max(float(a.x.min()), float(b.x.min()))
    hi = min(float(a.x.max()), float(b.x.max()))
    if lo >= hi:
        raise UserError(f"--multiplier: {a.label} and {b.label} share no range of FLOPs; "
                        "train them over overlapping budgets")  # fmt: skip
    chosen = "given"
    if target is None:
        ends = [float(frontier_law(np.array([hi]), *f.params)[0]) for f in (a, b)]
        target = max(ends)
        worse = (a, b)[ends.index(target)].label
        chosen = (f"{worse}'s fitted loss at {hi:.3g} FLOPs, the largest both measured: "
                  "the higher of the two, which both reach")  # fmt: skip
    needed = [compute_for(f.params, target) for f in (a, b)]
    floors = [f.label for f, c in zip((a, b), needed, strict=True) if not math.isfinite(c)]
    if floors:
        raise UserError(f"--multiplier: the fitted floor E of {', '.join(floors)} is at or "
                        f"above the target loss {target:.4g}, which it never reaches; give "
                        "a higher --target-loss")  # fmt: skip
    k = needed[0] / needed[1]
    ks = np.array([compute_for(pa, target) / compute_for(pb, target)
                   for pa, pb in zip(a.draws, b.draws, strict=True)])  # fmt: skip
    reached = float(np.mean(np.isfinite(ks)))
    ks = ks[np.isfinite(ks)]
    ci = np.percentile(ks, [(100 - CI) / 2, (100 + CI) / 2]) if len(ks) else [math.nan] * 2
    measured = [(float(f.x.min()) * (1 - 1e-6), float(f.x.max()) * (1 + 1e-6)) for f in (a, b)]
    extrapolated = [f.label for f, c, (m0, m1) in zip((a, b), needed, measured, strict=True)
                    if not m0 <= c <= m1]  # fmt: skip
    word = "less" if k >= 1 else "more"
    # ill-conditioned: a tenth of the resamples never reach the target, the estimate lies
    # outside its own CI, or the CI spans more than six orders of magnitude (resamples whose
    # C(L) diverges set it); then no interval is shown
    ill = (reached < 0.9 or not ci[0] <= k <= ci[1]
           or not (ci[0] > 0 and ci[1] / ci[0] < 1e6))  # fmt: skip
    interval = "(no CI: ill-conditioned)" if ill else f"[{bound(ci[0])}, {bound(ci[1])}]"
    lines = [
        f"Compute multiplier of {b.label} against {a.label} at {target:.4g} ({chosen}): "
        f"{k:.3g}× {interval} ({b.label} reaches it with "
        f"{k if k >= 1 else 1 / k:.3g}× {word} compute)"
        + (f"; EXTRAPOLATED beyond the measured FLOPs of {', '.join(extrapolated)}"
           if extrapolated else "")  # fmt: skip
    ]
    if ill:
        margin = target - max(a.params[0], b.params[0])
        lines.append(f"  ILL-CONDITIONED: the target is {margin:.3g} above the higher fitted "
                     f"floor, where C(L) diverges ({1 - reached:.0%} of the resamples never "
                     "reach it, the others' multipliers spread too widely for a CI): read "
                     "the range below, or give a --target-loss well above both "
                     "floors")  # fmt: skip
    grid = np.geomspace(lo, hi, 50)
    la, lb = frontier_law(grid, *a.params), frontier_law(grid, *b.params)
    over = [compute_for(a.params, float(v)) / compute_for(b.params, float(v))
            for v in la if v > max(a.params[0], b.params[0])]  # fmt: skip
    if over:
        lines.append(f"  over the common measured range {lo:.3g}–{hi:.3g} FLOPs: "
                     f"{min(over):.3g}–{max(over):.3g}×")  # fmt: skip
    sign = np.sign(la - lb)
    crossings = grid[1:][sign[1:] != sign[:-1]]
    if len(crossings):
        lines.append(f"  the frontiers cross inside the range, at {crossings[0]:.3g} FLOPs: "
                     "the ranking depends on the budget")  # fmt: skip
    else:
        better = b.label if (lb < la).all() else a.label
        lines.append(f"  the frontiers do not cross inside the range ({better} is lower "
                     "throughout)")  # fmt: skip
    return lines


def plot_fits(fits: Sequence[Fit], groups: Sequence[Group], metric: str, path: str) -> None:
    """Log-log: each run's curve (faint), the frontier points, the fit and its CI band."""
    from matplotlib.figure import Figure

    from .plot import plot_format

    fig = Figure(figsize=(5.5, 3.8))
    ax = fig.add_subplot()
    colours = [f"C{i}" for i in range(10)]
    for i, (fit, group) in enumerate(zip(fits, groups, strict=True)):
        colour = colours[i % 10]
        if fit.kind in ("frontier", "final"):
            for run in group.completed if fit.kind == "frontier" else ():
                curve = axis_curve(run, metric, "flops")
                if curve is not None:
                    ax.plot(curve[0], curve[1], color=colour, alpha=0.2, linewidth=0.8)
            ax.plot(fit.x, fit.y, "o", color=colour, markersize=3)
            grid = np.geomspace(fit.x.min(), fit.x.max(), 100)
            ax.plot(grid, frontier_law(grid, *fit.params), color=colour, label=fit.label)
            bands = np.array([frontier_law(grid, *d) for d in fit.draws if np.all(np.isfinite(d))])
            if len(bands):
                lo, hi = np.percentile(bands, [(100 - CI) / 2, (100 + CI) / 2], axis=0)
                ax.fill_between(grid, lo, hi, color=colour, alpha=0.2)
            ax.set_xlabel("training FLOPs")
        else:
            compute = 6 * fit.x[:, 0] * fit.x[:, 1]
            ax.plot(compute, fit.y, "o", color=colour, markersize=4, label=f"{fit.label} (runs)")
            ax.plot(compute, nd_law(fit.x, *fit.params), "x", color=colour,
                    label=f"{fit.label} (fit)")  # fmt: skip
            ax.set_xlabel("6·N·D")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format=plot_format(path))


def report(groups: Sequence[Group], metric: str, kind: str, pair: Sequence[str] | None,
           target: float | None, plot: str | None) -> list[str]:  # fmt: skip
    from .stats import resolve_group

    named = [resolve_group(groups, q, "--multiplier") for q in pair or ()]  # before fitting
    if len(named) == 2 and named[0] is named[1]:
        raise UserError(f"--multiplier {' '.join(pair or ())} names the same group twice")
    fits = [fit_group(g, metric, kind) for g in groups]
    lines = [header(fits, metric)]
    for fit in fits:
        lines += describe(fit)
    flags = sorted({flag for fit in fits for flag in fit.flags})
    lines += [f"  note: {flag}" for flag in flags]
    if named:
        by_label = {f.label: f for f in fits}
        lines += multiplier(by_label[named[0].label], by_label[named[1].label], target)
    if plot:
        plot_fits(fits, groups, metric, plot)
    return lines
