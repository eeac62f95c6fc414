"""The language model's baseline gate: the unmodified nanoGPT at the study's shape and budget.

    python experiments/efficient_attention/nanogpt_gate.py [--out runs/gate/nanogpt.json] \
        [-- --n_embd=256 …]

nanoGPT (``../shared/reference/nanogpt``, run as its own process on a copy with its
shakespeare_char data prepared from the shared Tiny Shakespeare) with
``experiment=study_efficient_lm``'s shape and schedule: 2 layers of width 64, 4 heads
(d_ff 256), blocks of 1024 characters, batch 4, 600 steps, lr 2e-3 with 50 warmup steps
and cosine decay to 1e-4, AdamW (0.9, 0.99), weight decay 0.1, clipping at 1, no dropout.
Its own choices stay: learned absolute positions (the study uses RoPE), no biases, its
fixed seed. Validation loss every 150 steps on 100 random batches (400 blocks). The
printed losses are written as JSON, the raw record the study's README reads its gate from,
with where they were made: nanoGPT's source (its git commit, or the SHA-256 of its
``train.py`` and ``model.py`` when the copy is not a git checkout), attnlab's commit, torch,
the CPU and the thread settings (``attnlab.studies.provenance``).

nanoGPT flags after ``--`` come after these and override them (its configurator reads its
arguments in order): other studies run the same gate at their own shape and budget.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from attnlab.bench.race_nanogpt import NANOGPT_VAL, REPO, prepare_nanogpt
from attnlab.callbacks.summary import git_sha
from attnlab.studies import provenance

STEPS = 600


def command(extra: list[str] | None = None) -> list[str]:
    return [
        sys.executable, "train.py", "config/train_shakespeare_char.py", "--device=cpu",
        "--compile=False", "--eval_iters=100", "--eval_interval=150", "--log_interval=150",
        "--block_size=1024", "--batch_size=4", "--n_layer=2", "--n_head=4", "--n_embd=64",
        "--dropout=0.0", f"--max_iters={STEPS}", f"--lr_decay_iters={STEPS}",
        "--learning_rate=2e-3", "--min_lr=1e-4", "--warmup_iters=50", "--beta2=0.99",
        "--weight_decay=0.1", "--grad_clip=1.0", "--gradient_accumulation_steps=1",
        "--always_save_checkpoint=False", *(extra or []),
    ]  # fmt: skip


def nanogpt_source(nanogpt: Path) -> dict[str, str | None]:
    """Which nanoGPT ran: its git commit when it is a checkout, and its two files' SHA-256."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=nanogpt, capture_output=True,
                          text=True, check=False).stdout.strip()  # fmt: skip
    files = {name: hashlib.sha256((nanogpt / name).read_bytes()).hexdigest()
             for name in ("train.py", "model.py")}  # fmt: skip
    return {"git_sha": head or None, **{f"{name}_sha256": h for name, h in files.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent
    parser.add_argument("--out", type=Path, default=here / "runs" / "gate" / "nanogpt.json")
    parser.add_argument("--nanogpt", type=Path, default=REPO.parent / "shared/reference/nanogpt")
    data = Path(os.environ.get("ATTNLAB_DATA_ROOT", REPO.parent / "shared/data"))
    parser.add_argument("--data", type=Path, default=data)
    parser.add_argument("flags", nargs="*", help="nanoGPT flags after --, e.g. --n_embd=256")
    args = parser.parse_args(argv)
    bad = [flag for flag in args.flags if not flag.startswith("--") or "=" not in flag]
    if bad:
        print(f"error: {bad[0]} is not a nanoGPT flag; write --name=value after --",
              file=sys.stderr)  # fmt: skip
        return 2
    if not (args.nanogpt / "train.py").is_file():
        print(f"error: no nanoGPT at {args.nanogpt}; pass --nanogpt DIR", file=sys.stderr)
        return 2
    if not (args.data / "tinyshakespeare" / "input.txt").is_file():
        print(f"error: no tinyshakespeare/input.txt under {args.data}; pass --data DIR",
              file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="nanogpt_gate_") as tmp:
        nanogpt = prepare_nanogpt(args.nanogpt, args.data, Path(tmp))
        done = subprocess.run(command(args.flags), cwd=nanogpt, capture_output=True, text=True)
    if done.returncode:
        print(f"error: nanoGPT exited with {done.returncode}:\n{done.stderr[-2000:]}",
              file=sys.stderr)  # fmt: skip
        return 1
    curve = {int(step): float(loss) for step, loss in NANOGPT_VAL.findall(done.stdout)}
    record = {"command": " ".join(command(args.flags)[1:]), "val_loss_by_step": curve,
              "val_loss": curve[max(curve)], "nanogpt": nanogpt_source(args.nanogpt),
              "provenance": provenance([str(git_sha())])}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"nanoGPT at the study's shape: val loss {record['val_loss']:.4f} at step {max(curve)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
