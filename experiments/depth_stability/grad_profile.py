"""Per-layer gradient norms at initialisation: Post-LN, Pre-LN, DeepNorm at depths 6, 12, 24.

One backward pass on one training batch, no update, dropout off — the setting of
Xiong et al. 2020 (§3.3, Fig. 3) — for the model and data of the depth study
(conf/experiment/study_depth.yaml). Prints a Markdown table of the last/first-layer
gradient-norm ratio of each stack (mean and range over seeds)::

    python experiments/depth_stability/grad_profile.py
    python experiments/depth_stability/grad_profile.py --depths 6 12 --seeds 0 --per-layer
    python experiments/depth_stability/grad_profile.py data=reverse   # any extra override
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from attnlab.callbacks.diagnostics import initial_gradient_profile, last_first_ratio  # noqa: E402
from attnlab.cli import pipeline  # noqa: E402
from attnlab.cli.common import config_dir, register_resolvers  # noqa: E402


def profile(overrides: list[str], depth: int, norm: str, seed: int) -> dict[str, float]:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[
            "experiment=study_depth", *overrides, f"model.n_layers={depth}", f"model.norm={norm}",
            f"seed={seed}",
        ])  # fmt: skip
    torch.manual_seed(seed)
    data = pipeline.build_data(cfg)
    batch = next(iter(data.train_dataloader()))
    return initial_gradient_profile(pipeline.build_task(cfg, data), batch)


def span(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.3g}"
    return f"{mean:.3g} ({min(values):.3g}–{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[6, 12, 24])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--norms", nargs="+", default=["post", "pre", "deepnorm"])
    parser.add_argument("--per-layer", action="store_true", help="also print every layer's norm")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model.d_model=128")
    args = parser.parse_args()
    register_resolvers()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    started = time.perf_counter()
    rows, layers = [], []
    for depth in args.depths:
        for norm in args.norms:
            runs = [profile(args.overrides, depth, norm, seed) for seed in args.seeds]
            stacks = sorted({k.split(".")[0] for k in runs[0] if k.endswith(".block")})
            ratios = {s: [last_first_ratio(r, s) for r in runs] for s in stacks}
            rows.append(f"| {depth} | {norm} | "
                        + " | ".join(span(ratios[s]) for s in stacks) + " |")  # fmt: skip
            for s in stacks:
                blocks = [runs[0][f"{s}.{i}.block"] for i in range(depth)]
                layers.append(f"{depth:>3} {norm:8} {s:7} " + " ".join(f"{b:.2g}" for b in blocks))
    print(f"| layers per stack | norm | {' | '.join(f'{s} ‖∇‖ last/first' for s in stacks)} |")
    print("|---:|---|" + "---:|" * len(stacks))
    print("\n".join(rows))
    print(f"\nmean (min–max) over seeds {args.seeds}; {time.perf_counter() - started:.0f} s")
    if args.per_layer:
        print(f"\nblock gradient norm per layer, first to last (seed {args.seeds[0]}):")
        print("\n".join(layers))


if __name__ == "__main__":
    main()
