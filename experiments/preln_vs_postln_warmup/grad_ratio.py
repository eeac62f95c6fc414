"""Xiong et al. 2020 §3.3 on the raw runs: the decoder's last/first gradient ratio.

    python experiments/preln_vs_postln_warmup/grad_ratio.py runs/sweep runs/wide >> results.md

``diag/grad_ratio_last_first`` (logged every 25 steps by ``callbacks=diagnostics``) is not a
metric ``attnlab-compare`` tabulates, so this reads it from each run's ``metrics.csv``: per
setting the range over seeds at step 0, 25 and 475 and the largest value logged, the
geometric mean of each placement at step 475, and Post-LN against Pre-LN at step 0: Welch's
t-test with the difference of the means and its 95 % CI, over the three seeds a side (at step
0 the ratio depends on the initialisation only, so a seed's six settings are one sample).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from scipy import stats

COLUMN = "diag/grad_ratio_last_first"
STEPS = (0, 25, 475)
KEYS = ("model.norm", "optim.warmup_steps", "optim.lr")


def setting(summary: dict) -> tuple[str, ...]:
    """The run's (norm, warmup, lr, seed) from its overrides."""
    overrides = dict(o.split("=", 1) for o in summary["overrides"] if "=" in o)
    return tuple(overrides[key] for key in (*KEYS, "seed"))


def ratios(metrics: Path) -> dict[int, float]:
    """The logged ratio by step."""
    with metrics.open() as f:
        return {int(row["step"]): float(row[COLUMN]) for row in csv.DictReader(f) if row[COLUMN]}


def main(sweeps: list[Path]) -> int:
    by_setting: dict[tuple[str, ...], list[dict[int, float]]] = defaultdict(list)
    by_seed: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for summary in sorted(s for sweep in sweeps for s in sweep.glob("*/summary.json")):
        *key, seed = setting(json.loads(summary.read_text()))
        run = ratios(summary.parent / "metrics.csv")
        by_setting[tuple(key)].append(run)
        by_seed[key[0]][seed].append(run[0])
    print(f"## Gradient ratio ({COLUMN}: decoder, last over first block)")
    print()
    heads = [f"step {s}: min–max" for s in STEPS] + ["largest, any step"]
    print("| model.norm | warmup | lr | n | " + " | ".join(heads) + " |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---" for _ in heads) + " |")
    for key in sorted(by_setting, key=lambda k: (k[0], float(k[2]), int(k[1]))):
        runs = by_setting[key]
        cells = [f"{min(r[s] for r in runs):.3g}–{max(r[s] for r in runs):.3g}" for s in STEPS]
        cells.append(f"{max(max(r.values()) for r in runs):.3g}")
        print(f"| {' | '.join(key)} | {len(runs)} | " + " | ".join(cells) + " |")
    print()
    at_start: dict[str, list[float]] = defaultdict(list)
    for key, runs in by_setting.items():
        at_start[key[0]] += [r[0] for r in runs]
    for norm in sorted(at_start):
        last = [r[STEPS[-1]] for key, runs in by_setting.items() if key[0] == norm for r in runs]
        geo = math.exp(sum(map(math.log, last)) / len(last))
        start = at_start[norm]
        print(f"model.norm={norm}: step 0 mean {sum(start) / len(start):.3g} "
              f"(min {min(start):.3g}, max {max(start):.3g}, n={len(start)}); "
              f"step {STEPS[-1]} geometric mean {geo:.3g}")  # fmt: skip
    post, pre = ([sum(v) / len(v) for v in by_seed[norm].values()] for norm in ("post", "pre"))
    test = stats.ttest_ind(post, pre, equal_var=False)
    ci = test.confidence_interval(0.95)
    diff = sum(post) / len(post) - sum(pre) / len(pre)
    print(f"Welch t-test on {COLUMN} at step 0 (one value per seed): model.norm=post vs "
          f"model.norm=pre: t={test.statistic:.3g}, p={test.pvalue:.2g} "
          f"(n={len(post)} vs {len(pre)} seeds); "
          f"A − B = {diff:.3g}, 95% CI [{ci.low:.3g}, {ci.high:.3g}]")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main([Path(a) for a in sys.argv[1:]]))
