"""Training throughput of the study's five models side by side, in one process.

    python experiments/attention_vs_recurrence/throughput.py [--rounds 5] [--steps 5]

Each model is built from its experiment preset (the real Hydra configs and Multi30k
data, one batch of 64 pairs reused), then the models take turns: every round runs
``--steps`` training steps (forward, backward, AdamW) of each model in a row, so a
slow moment of a shared machine hits all of them. Prints the median seconds per step
and target tokens per second of each model and their ratio to the Transformer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

EXPERIMENTS = ("study_recurrence_transformer", "study_recurrence_lstm_bahdanau",
               "study_recurrence_lstm_luong", "study_recurrence_lstm_none",
               "study_recurrence_conv")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    import torch
    from hydra import compose, initialize_config_dir

    from attnlab.cli import pipeline
    from attnlab.cli.common import config_dir, register_resolvers

    register_resolvers()
    tasks, batch = {}, None
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for name in EXPERIMENTS:
            cfg = compose("config", overrides=[f"experiment={name}"])
            datamodule = pipeline.build_data(cfg)
            if batch is None:
                batch = next(iter(datamodule.train_dataloader()))
            torch.manual_seed(0)
            task = pipeline.build_task(cfg, datamodule)
            tasks[name] = (task, torch.optim.AdamW(task.parameters(), lr=1e-4))
    target_tokens = int((batch["tgt"] != 0).sum()) + batch["tgt"].size(0)  # + EOS
    seconds: dict[str, list[float]] = {name: [] for name in tasks}
    for _ in range(args.rounds + 1):  # the first round warms up and is not counted
        for name, (task, optimizer) in tasks.items():
            task.train()
            start = time.perf_counter()
            for _ in range(args.steps):
                logits, labels = task(batch["src"], batch["tgt"])
                task.loss(logits, labels).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            seconds[name].append((time.perf_counter() - start) / args.steps)
    base = statistics.median(seconds[EXPERIMENTS[0]][1:])
    print(
        f"one batch of {batch['src'].size(0)} pairs ({target_tokens} target tokens), "
        f"{args.rounds} rounds × {args.steps} steps, {torch.get_num_threads()} threads\n"
    )
    print("| model | s / step (median) | target tokens / s | time / Transformer |")
    print("| --- | ---: | ---: | ---: |")
    for name, values in seconds.items():
        median = statistics.median(values[1:])
        print(f"| {name.removeprefix('study_recurrence_')} | {median:.3f} | "
              f"{target_tokens / median:.0f} | {median / base:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    sys.exit(main())
