"""Decoding speed of the study's models side by side, in one process.

    python experiments/attention_vs_recurrence/decoding.py [--rounds 5] [--new 32]

Gehring et al. (2017) report that ConvS2S translates "an order of magnitude faster" than a deep
LSTM. This script measures generated tokens per second for the study's Transformer,
LSTM + Bahdanau attention and ConvS2S. Each model is built from its experiment preset (the
real Hydra configs, with Multi30k test sources). Every model decodes exactly ``--new`` tokens
(no EOS, so all of them do the same amount of work whatever their weights), with its cache:
greedy over a batch of 64 sources, greedy over one source at a time, and beam 4 over 16
sources. The models take turns in each round, so a slow moment of a shared machine hits all
of them. The first round warms up and is not counted. Prints the median tokens per second and
each model's ratio to the Transformer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

EXPERIMENTS = ("study_recurrence_transformer", "study_recurrence_lstm_bahdanau",
               "study_recurrence_conv")  # fmt: skip
# (setting, strategy, sources per call, calls per measurement)
SETTINGS = (("greedy, batch 64", "greedy", 64, 1), ("greedy, batch 1", "greedy", 1, 8),
            ("beam 4, batch 16", "beam", 16, 1))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new", type=int, default=32, help="tokens generated per source")
    args = parser.parse_args(argv)
    import torch
    from hydra import compose, initialize_config_dir

    from attnlab.cli import pipeline
    from attnlab.cli.common import config_dir, register_resolvers
    from attnlab.inference.generation import generate
    from attnlab.options import DecodeConfig

    register_resolvers()
    models, sources = {}, None
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for name in EXPERIMENTS:
            cfg = compose("config", overrides=[f"experiment={name}"])
            datamodule = pipeline.build_data(cfg)
            if sources is None:
                datamodule.setup("test")
                sources = next(iter(datamodule.test_dataloader()))["src"]
            torch.manual_seed(0)
            models[name] = pipeline.build_task(cfg, datamodule).model.eval()
    seconds = {(s, m): [] for s, *_ in SETTINGS for m in models}
    for _ in range(args.rounds + 1):
        for setting, strategy, batch, calls in SETTINGS:
            decode = DecodeConfig(strategy=strategy, max_new_tokens=args.new, beam_size=4)
            for name, model in models.items():
                start = time.perf_counter()
                for call in range(calls):
                    rows = sources[call * batch : (call + 1) * batch]
                    out = generate(model, rows, decode, eos_id=None)
                    assert out.shape == (batch, args.new), out.shape
                seconds[setting, name].append(time.perf_counter() - start)
    print(f"{args.new} new tokens per source, {args.rounds} rounds (median), "
          f"{torch.get_num_threads()} threads\n")  # fmt: skip
    print("| setting | model | parameters | tokens / s | speed / Transformer |")
    print("| --- | --- | ---: | ---: | ---: |")
    for setting, _, batch, calls in SETTINGS:
        tokens = batch * calls * args.new
        base = statistics.median(seconds[setting, EXPERIMENTS[0]][1:])
        for name, model in models.items():
            median = statistics.median(seconds[setting, name][1:])
            params = sum(p.numel() for p in model.parameters()) / 1e6
            print(f"| {setting} | {name.removeprefix('study_recurrence_')} | {params:.2f} M | "
                  f"{tokens / median:.0f} | {base / median:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
