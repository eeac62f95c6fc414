"""What a training step of the speedrun's model costs with each optimiser, side by side.

    python experiments/speedrun/step_time.py [--rounds 7] [--steps 20]

The model and data of experiment=speedrun_shakespeare_char_cpu (the real Hydra configs and
Tiny Shakespeare; one batch reused), once with AdamW and once with Muon, each optimiser built
by the task itself (Muon's hidden matrices, AdamW for the rest). The two take turns: every
round runs ``--steps`` steps (forward, backward, optimiser step) of each, so a slow moment
of a shared machine hits both. Prints the median seconds per step of each and Muon's ratio
to AdamW: the ratio that sets the AdamW arm's step budget at equal wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

OPTIMISERS = ("adamw", "muon")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    import torch

    from attnlab.cli import pipeline
    from attnlab.cli.compose import compose_config

    warnings.filterwarnings("ignore", message=".*self.log.*")  # training_step outside a Trainer
    runs, batch = {}, None
    for name in OPTIMISERS:
        cfg = compose_config(["experiment=speedrun_shakespeare_char_cpu", f"optim.name={name}"])
        datamodule = pipeline.build_data(cfg)
        if batch is None:
            batch = next(iter(datamodule.train_dataloader()))
        torch.manual_seed(0)
        task = pipeline.build_task(cfg, datamodule)
        runs[name] = (task, task.configure_optimizers()["optimizer"])
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds + 1):  # the first round warms up and is not counted
        for name, (task, optimizer) in runs.items():
            task.train()
            start = time.perf_counter()
            for _ in range(args.steps):
                task.training_step(batch, 0).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            seconds[name].append((time.perf_counter() - start) / args.steps)
    print(f"{args.rounds} rounds × {args.steps} steps, {torch.get_num_threads()} threads\n")
    print("| optimiser | ms / step (median) | time / AdamW |")
    print("| --- | ---: | ---: |")
    base = statistics.median(seconds["adamw"][1:])
    for name, values in seconds.items():
        median = statistics.median(values[1:])
        print(f"| {name} | {1e3 * median:.1f} | {median / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    sys.exit(main())
