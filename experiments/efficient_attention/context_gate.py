"""The context gate: does the baseline use context beyond the shortest window?

    python experiments/efficient_attention/context_gate.py RUNS [--kind full] \
        [--near loss_pos_065-128] [--far loss_pos_513+] [--against sliding_window]

RUNS holds the language-model runs trained with ``task.loss_by_position`` (their last
validation's loss per context-length bucket). For each run of ``--kind``, the drop of its
validation loss from the tokens predicted from 65–128 tokens of context (``--near``: inside
the sparse kinds' window of 128) to those predicted from 513+ (``--far``); the gate is met
when the 95 % Student-t interval of the mean drop over the seeds lies above 0, i.e. the
baseline predicts better with more than a window's context, so a window could lose something.
Then ``--kind`` against ``--against`` in every bucket (Welch, Holm over the buckets).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from attnlab.compare import compare_pairs, format_comparison, holm, load_runs, t_interval


def span(bucket: str) -> str:
    """``loss_pos_065-128`` → ``65–128``, ``loss_pos_513+`` → ``513+``."""
    lo, _, hi = bucket.removeprefix("loss_pos_").partition("-")
    return f"{int(lo.rstrip('+'))}–{int(hi)}" if hi else f"{int(lo.rstrip('+'))}+"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs")
    parser.add_argument("--kind", default="full")
    parser.add_argument("--near", default="loss_pos_065-128")
    parser.add_argument("--far", default="loss_pos_513+")
    parser.add_argument("--against", default="sliding_window")
    args = parser.parse_args(argv)
    every = [r for r in load_runs([args.runs]) if r.status == "completed"]
    runs = [r for r in every if r.config.get("model", {}).get("attention") == args.kind]
    near, far = f"val/{args.near}", f"val/{args.far}"
    drops = sorted((int(r.config["seed"]), r.metrics[near] - r.metrics[far]) for r in runs)
    if len(drops) < 2:
        print(f"error: {args.runs} has {len(drops)} completed {args.kind} runs with {near}; "
              "the gate needs two seeds or more", file=sys.stderr)  # fmt: skip
        return 2
    values = [d for _, d in drops]
    mean = sum(values) / len(values)
    low, high = t_interval(values) or (mean, mean)
    print(f"Context gate: model.attention={args.kind}, the validation loss of the tokens "
          f"predicted from {span(args.near)} tokens of context minus from {span(args.far)} "
          f"({near} − {far}), per seed:\n")
    for seed, drop in drops:
        print(f"- seed {seed}: {drop:.4f}")
    verdict = "met" if low > 0 else "not met"
    print(f"\nMean drop {mean:.4f} nats, 95 % t CI [{low:.4f}, {high:.4f}] (n = {len(values)}): "
          f"gate {verdict} (met when the interval lies above 0).")
    buckets = sorted({m for r in runs for m in r.metrics if m.startswith("val/loss_pos_")})
    against = [r for r in every if r.config.get("model", {}).get("attention") == args.against]
    if not against:
        return 0
    tests = [compare_pairs([(args.kind, [r.metrics[b] for r in runs], args.against,
                             [r.metrics[b] for r in against])], b, lower_is_better=True)[0]
             for b in buckets]  # fmt: skip
    adjusted = holm([t.welch.p for t in tests])
    print(f"\n{args.kind} against {args.against} in each context-length bucket (Welch; Holm "
          f"over the {len(tests)} buckets):\n")
    for test, p_holm in zip(tests, adjusted, strict=True):
        print(format_comparison(dataclasses.replace(test, p_holm=p_holm)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
