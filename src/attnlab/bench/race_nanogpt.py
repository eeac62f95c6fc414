"""attnlab against nanoGPT on the baby GPT (Tiny Shakespeare, characters), whole processes in turns.

    python -m attnlab.bench.race_nanogpt          # 3 rounds, attnlab eager and compiled
    python -m attnlab.bench.race_nanogpt --rounds 1 --max-iters 50 --contenders nanogpt,attnlab

nanoGPT (``../shared/reference/nanogpt``, unmodified) runs from a copy in a temporary folder
with its own ``prepare.py`` over the shared Tiny Shakespeare (no download), with the CPU
setting of its README and attnlab's validation schedule (every 500 steps, 20 batches);
attnlab runs ``experiment=nanogpt_shakespeare_char_cpu``, the same shape and optimiser (no
biases, as nanoGPT's default), with ``test=false``: nanoGPT has no test pass.
Each round runs every contender once, in an order that rotates from round to round, and
times the whole process (start-up, compilation, validation, checkpoints). Printed: seconds
and final validation loss per run, the median per contender, and each attnlab contender's
ratio to nanoGPT within each round and over the medians. ``--json`` keeps all of it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # the checkout: src/attnlab/bench/race_nanogpt.py
NANOGPT_VAL = re.compile(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)")
NANOGPT_ITER = re.compile(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms")


def nanogpt_command(max_iters: int, compile: bool) -> list[str]:
    """nanoGPT README's CPU command for the baby GPT; validation as attnlab's experiment."""
    return [
        sys.executable, "train.py", "config/train_shakespeare_char.py", "--device=cpu",
        f"--compile={compile}", "--eval_iters=20", "--eval_interval=500", "--log_interval=50",
        "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
        f"--max_iters={max_iters}", f"--lr_decay_iters={max_iters}", "--dropout=0.0",
    ]  # fmt: skip


def attnlab_command(max_iters: int, compile: bool) -> list[str]:
    return [
        sys.executable, "-m", "attnlab.train", "experiment=nanogpt_shakespeare_char_cpu",
        f"model.compile={str(compile).lower()}", f"trainer.max_steps={max_iters}",
        f"optim.decay_steps={max_iters}", "trainer.enable_progress_bar=false",
        "test=false",  # nanoGPT has no test pass: only training and its validations are raced
    ]  # fmt: skip


SPEEDRUN = "speedrun_shakespeare_char_cpu"


def speedrun_command() -> list[str]:
    """``experiment=speedrun_shakespeare_char_cpu`` as it stands: its own optimiser, schedule
    and number of steps (:func:`speedrun_steps`)."""
    return [sys.executable, "-m", "attnlab.train", f"experiment={SPEEDRUN}",
            "trainer.enable_progress_bar=false", "test=false"]  # fmt: skip


def speedrun_steps() -> int:
    """The speedrun preset's ``trainer.max_steps``, read from its file."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(REPO / "conf" / "experiment" / f"{SPEEDRUN}.yaml").trainer.max_steps)


def prepare_nanogpt(source: Path, data_root: Path, work: Path) -> Path:
    """A copy of nanoGPT with its shakespeare_char data prepared from the shared text."""
    target = work / "nanogpt"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".git", "out-*", "*.bin"))
    folder = target / "data" / "shakespeare_char"
    shutil.copy(data_root / "tinyshakespeare" / "input.txt", folder / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True, capture_output=True)
    return target


def run(name: str, command: list[str], cwd: Path, env: dict[str, str]) -> dict:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"error: {name} exited with {done.returncode}:\n{tail}")
    summary = {} if name.startswith("nanogpt") else summary_of(done.stdout)
    return {"seconds": seconds, "val_loss": final_val_loss(name, done.stdout, summary),
            **step_times(name, done.stdout, summary)}  # fmt: skip


def step_times(name: str, stdout: str, summary: dict | None = None) -> dict[str, float]:
    """Training-step milliseconds. nanoGPT: the median of the iteration times it prints
    (every 50th; the first, with compilation, and those that ran an evaluation left out).
    attnlab: ``perf/train_s`` / steps, its mean measured step (validation excluded), and
    ``startup_s``, the seconds before its first step (``summary``: its summary.json, when
    already read)."""
    if name.startswith("nanogpt"):
        times = [float(ms) for it, ms in NANOGPT_ITER.findall(stdout) if int(it) % 500]
        return {"step_ms": statistics.median(times)} if times else {}
    summary = summary_of(stdout) if summary is None else summary
    train_s = summary.get("metrics", {}).get("perf/train_s")
    steps = summary.get("config", {}).get("trainer", {}).get("max_steps")
    out = {"step_ms": 1e3 * train_s / steps} if train_s and steps else {}
    if summary.get("startup_s") is not None:
        out["startup_s"] = summary["startup_s"]
    return out


def summary_of(stdout: str) -> dict:
    """The summary.json an attnlab run names on its console, or {} when it names none."""
    match = re.search(r"summary:\s+(\S+summary\.json)", stdout)
    return json.loads(Path(match.group(1)).read_text()) if match else {}


def final_val_loss(name: str, stdout: str, summary: dict | None = None) -> float | None:
    if name.startswith("nanogpt"):
        found = NANOGPT_VAL.findall(stdout)
        return float(found[-1][1]) if found else None
    summary = summary_of(stdout) if summary is None else summary
    return summary.get("metrics", {}).get("val/loss")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument(
        "--contenders",
        default="nanogpt,attnlab,attnlab_compiled",
        help="some of: nanogpt, nanogpt_compiled, attnlab, attnlab_compiled, attnlab_speedrun "
        "(experiment=speedrun_shakespeare_char_cpu, its own steps)",
    )
    parser.add_argument("--nanogpt", type=Path, default=REPO.parent / "shared/reference/nanogpt")
    data_root = os.environ.get("ATTNLAB_DATA_ROOT", REPO.parent / "shared/data")
    parser.add_argument("--data", type=Path, default=Path(data_root))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not (args.nanogpt / "train.py").is_file():
        print(f"error: no nanoGPT at {args.nanogpt}; pass --nanogpt DIR", file=sys.stderr)
        return 2
    if not (args.data / "tinyshakespeare" / "input.txt").is_file():
        print(f"error: no tinyshakespeare/input.txt under {args.data}; pass --data DIR",
              file=sys.stderr)  # fmt: skip
        return 2
    names = args.contenders.split(",")
    with tempfile.TemporaryDirectory(prefix="race_nanogpt_") as tmp:
        work = Path(tmp)
        nanogpt = prepare_nanogpt(args.nanogpt, args.data, work)
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ATTNLAB_LOG_DIR": str(work / "logs"),
               "ATTNLAB_DATA_ROOT": str(args.data), "WANDB_MODE": "disabled"}  # fmt: skip
        commands = {
            "nanogpt": (nanogpt_command(args.max_iters, False), nanogpt),
            "nanogpt_compiled": (nanogpt_command(args.max_iters, True), nanogpt),
            "attnlab": (attnlab_command(args.max_iters, False), work),
            "attnlab_compiled": (attnlab_command(args.max_iters, True), work),
            "attnlab_speedrun": (speedrun_command(), work),
        }
        rounds: list[dict[str, dict]] = []
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # A B C, B C A, …
            results = {}
            for name in order:
                command, cwd = commands[name]
                results[name] = run(name, command, cwd, env)
                step = results[name].get("step_ms")
                print(f"round {r + 1} {name:<17} {results[name]['seconds']:7.1f} s  "
                      f"val loss {results[name]['val_loss']}  step "
                      f"{f'{step:.1f} ms' if step else '?'}", flush=True)  # fmt: skip
            rounds.append(results)
    steps = {n: speedrun_steps() if n == "attnlab_speedrun" else args.max_iters for n in names}
    report = summarise(rounds, names, steps)
    report["config"] = {"max_iters": args.max_iters, "rounds": args.rounds,
                        "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def summarise(
    rounds: list[dict[str, dict]], names: list[str],
    steps_run: int | dict[str, int] | None = None,
) -> dict:  # fmt: skip
    """Medians per contender and attnlab's ratios to each nanoGPT. With ``steps_run`` (the
    training steps of each run, or of each contender) also each contender's time outside
    its training steps (median seconds − steps × median step time: start-up, evaluation,
    checkpoints, the test pass) and attnlab's ratio to the faster nanoGPT split into its two
    parts. The speedrun is also read against ``attnlab``, the baseline preset it shortens:
    its time ratio and whether it reached the baseline's validation loss."""
    medians = {n: statistics.median(r[n]["seconds"] for r in rounds) for n in names}
    steps = {n: statistics.median(r[n]["step_ms"] for r in rounds) for n in names
             if all("step_ms" in r[n] for r in rounds)}  # fmt: skip
    outside = {}
    if steps_run:  # nanoGPT's loop runs iterations 0 … max_iters: one more step
        per_name = steps_run if isinstance(steps_run, dict) else dict.fromkeys(names, steps_run)
        ran = {n: per_name[n] + n.startswith("nanogpt") for n in steps}
        outside = {n: medians[n] - ran[n] * steps[n] / 1e3 for n in steps}
    print(f"\n{'contender':<17} {'median s':>9} {'step ms':>8} {'outside steps s':>16} "
          f"{'val loss (each round)':>24}")  # fmt: skip
    for name in names:
        losses = ", ".join(f"{r[name]['val_loss']:.3f}" for r in rounds if r[name]["val_loss"])
        step = f"{steps[name]:8.1f}" if name in steps else f"{'?':>8}"
        rest = f"{outside[name]:16.1f}" if name in outside else f"{'?':>16}"
        print(f"{name:<17} {medians[name]:9.1f} {step} {rest} {losses:>24}")
    ratios: dict[str, dict] = {}
    bases = [n for n in names if n.startswith("nanogpt")]
    for name in (n for n in names if n.startswith("attnlab")):
        for base in bases:
            per_round = [r[name]["seconds"] / r[base]["seconds"] for r in rounds]
            key = name if base == "nanogpt" else f"{name}/{base}"  # against eager: the name
            ratios[key] = {"per_round": per_round, "of_medians": medians[name] / medians[base]}
            shown = " ".join(f"{x:.3f}" for x in per_round)
            print(f"{name} / {base}: per round {shown}; of the medians "
                  f"{medians[name] / medians[base]:.3f}")  # fmt: skip
        if bases:  # the reading: against the faster nanoGPT of the two
            faster = min(bases, key=lambda b: medians[b])
            of_medians = medians[name] / medians[faster]
            reading: dict = {"base": faster, "of_medians": of_medians}
            print(f"{name} / the faster nanoGPT ({faster}): {of_medians:.3f}")
            if name in outside and faster in outside:
                # the two parts of the ratio: the steps alone, and the whole run were its
                # time outside the steps the same as that nanoGPT's
                reading["step_ratio"] = steps[name] / steps[faster]
                reading["with_its_outside_time"] = (
                    medians[name] - outside[name] + outside[faster]
                ) / medians[faster]
                print(f"  per training step {reading['step_ratio']:.3f}; the whole run with "
                      f"{faster}'s time outside the steps {reading['with_its_outside_time']:.3f}")
            ratios[f"{name}/fastest_nanogpt"] = reading
    if "attnlab_speedrun" in names and "attnlab" in names:
        ratios["attnlab_speedrun/attnlab"] = speedrun_reading(rounds, medians)
    return {"rounds": rounds, "median_s": medians, "median_step_ms": steps,
            "outside_steps_s": outside, "ratios_to_nanogpt": ratios}


def speedrun_reading(rounds: list[dict[str, dict]], medians: dict[str, float]) -> dict:
    """The speedrun against the baseline preset in the same rounds: whole-process time
    ratios, and its final validation loss against the baseline's (the target)."""
    per_round = [r["attnlab_speedrun"]["seconds"] / r["attnlab"]["seconds"] for r in rounds]
    loss = {n: statistics.median(r[n]["val_loss"] for r in rounds) for n in
            ("attnlab", "attnlab_speedrun") if all(r[n]["val_loss"] for r in rounds)}  # fmt: skip
    reached = loss["attnlab_speedrun"] <= loss["attnlab"] if len(loss) == 2 else None
    of_medians = medians["attnlab_speedrun"] / medians["attnlab"]
    shown = " ".join(f"{x:.3f}" for x in per_round)
    print(f"attnlab_speedrun / attnlab: per round {shown}; of the medians {of_medians:.3f}; "
          f"median val loss {loss.get('attnlab_speedrun')} vs {loss.get('attnlab')} "
          f"({'reached' if reached else 'not reached'})")  # fmt: skip
    return {"per_round": per_round, "of_medians": of_medians, "val_loss": loss,
            "reached": reached}


if __name__ == "__main__":
    sys.exit(main())
