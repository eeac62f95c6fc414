"""attnlab's GPU suite: every fast-path check in one run, one table, one JSON file.

    scripts/gpu_suite.sh [--out DIR] [--nanogpt DIR] [--budget 480]   # one CUDA GPU
    scripts/gpu_suite.sh --tiny --out /tmp/suite                     # CPU dry-run

Steps (what each reports):

1. gpu_check: attnlab.bench.gpu.check, attnlab's decoder at GPT-2-124M shape with bf16,
   torch.compile and training's AdamW and clipping: ms/iter, tokens/s, MFU (target ≥ 50 %).
2. nanogpt: nanoGPT's bench.py at the same shape and batch, in its own process:
   ms/iter, tokens/s, MFU (target: attnlab's tokens/s ≥ nanoGPT's).
3. bench: attnlab-bench --device cuda: the ratio of every comparison.
4. train: attnlab.train for the 5 architectures, trainer=gpu, model.compile=true,
   20 steps: status, tokens/s and val/loss of each run.
5. sdpa: torch.profiler over a causal decoder's training pass: the fused SDPA kernels
   (flash or memory-efficient) that were dispatched.
6. checkpointing: peak memory with model.activation_checkpointing on and off.
7. strategies: trainer=fsdp and trainer=ddp with trainer.devices=1.
8. long_context: attnlab-bench --only long_context --device cuda.

Every step runs in subprocesses with its own timeout, inside one time budget for the
whole suite; a failed step is recorded (status failed and its last error line) and the
others go on. Steps that time things (1, 2, 3, 8) run alone; the others share the GPU
(``--jobs``). ``$OUT`` (or ``--out``) receives three files — gpu_suite.json,
gpu_suite.txt (the table) and logs.tar.gz (every step's output) — so that a lent device
machine, which returns only a few files, returns all of them. Run directories and
compiled kernels stay in ``--work``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tarfile
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab.bench.gpu.jobs import Job, Settings, StepResult, run_job
from attnlab.bench.gpu.steps import STEPS

ROOT = Path(__file__).resolve().parents[4]  # the checkout: src/attnlab/bench/gpu/suite.py

# the phases, in order: the two headline timings alone, then the checks that may share
# the GPU, then the long benchmarks with what is left of the budget
PHASES = ((1,), (2,), (4, 5, 6, 7), (3,), (8,))
COLUMNS = ("step", "check", "status", "result", "target")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="CPU dry-run: tiny shapes, no compile, 3 training steps")  # fmt: skip
    parser.add_argument("--out", type=Path,
                        help="results folder (default: $OUT, else ./gpu_suite_out)")  # fmt: skip
    parser.add_argument("--work", type=Path,
                        help="run directories, logs (default: a new temporary folder)")  # fmt: skip
    parser.add_argument("--nanogpt", type=Path,
                        help="nanoGPT checkout (default: $NANOGPT_DIR, else "
                        "shared/reference/nanogpt in the repository, else beside it)")  # fmt: skip
    parser.add_argument("--batch", type=int, default=16,
                        help="sequences per step for steps 1, 2 and 6 (default 16)")  # fmt: skip
    parser.add_argument("--budget", type=float, default=480.0,
                        help="seconds for the whole suite (default 480); a step that would "
                        "start with under 20 s left is skipped")  # fmt: skip
    parser.add_argument("--jobs", type=int,
                        help="processes at once, steps 4-7 (default: 6; 1 tiny)")  # fmt: skip
    parser.add_argument("--only", help="comma-separated step numbers, e.g. 1,2 (default: all)")
    return parser.parse_args(argv)


def find_nanogpt(root: Path = ROOT) -> Path:
    """$NANOGPT_DIR, else the first nanoGPT folder holding a bench.py: the repository's own
    shared/reference/nanogpt (a lent machine gets only the repository, with its shared/),
    then ../shared/reference/nanogpt beside it; the last when neither has one (step 2 then
    reports it not found)."""
    if os.environ.get("NANOGPT_DIR"):
        return Path(os.environ["NANOGPT_DIR"])
    places = [base / "shared" / "reference" / "nanogpt" for base in (root, root.parent)]
    return next((place for place in places if (place / "bench.py").is_file()), places[-1])


def settings_from(args: argparse.Namespace) -> Settings:
    out = args.out or Path(os.environ.get("OUT") or "gpu_suite_out")
    nanogpt = args.nanogpt or find_nanogpt(ROOT)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_suite_work_"))
    return Settings(
        tiny=args.tiny, out=out.resolve(), work=work.resolve(), nanogpt=nanogpt.resolve(),
        batch=args.batch, root=ROOT,
    )  # fmt: skip


@dataclass
class Phase:
    """The steps of one phase and the jobs each planned (or its result, when it needs none)."""

    steps: list[Any]
    planned: dict[int, list[Job] | StepResult] = field(default_factory=dict)


def run_phase(phase: Phase, s: Settings, deadline: float, jobs: int, done: dict) -> None:
    """Run every job of the phase (``jobs`` at a time), then let each step read its own."""
    work = [(n, job) for n, plan in phase.planned.items() if isinstance(plan, list) for job in plan]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        ran = list(pool.map(lambda item: run_job(item[1], s, deadline), work))
    for step in phase.steps:
        plan = phase.planned[step.number]
        if isinstance(plan, StepResult):
            done[step.number] = plan
            continue
        mine = [r for (n, _), r in zip(work, ran, strict=True) if n == step.number]
        try:
            result = step.read(s, mine, done)
        except Exception as error:  # a step's reader must not end the suite
            result = StepResult(status="failed", error=f"reading the output: {error!r}")
        result.wall_s = round(sum(r.seconds for r in mine) if jobs == 1 else max(
            (r.seconds for r in mine), default=0.0), 1)  # fmt: skip
        result.commands = [r.command for r in mine]
        done[step.number] = result


def table(rows: list[dict[str, str]], width: int = 80) -> str:
    """A plain-text table with a header rule; a long result wraps onto further lines."""
    at = COLUMNS.index("result")
    lines: list[list[str]] = []
    for row in rows:
        cells = [str(row.get(column, "")) for column in COLUMNS]
        wrapped = textwrap.wrap(cells[at], width) or [""]
        cells[at] = wrapped[0]
        lines.append(cells)
        lines += [[more if i == at else "" for i in range(len(COLUMNS))] for more in wrapped[1:]]
    widths = [max(len(c), *(len(cells[i]) for cells in lines)) for i, c in enumerate(COLUMNS)]

    def joined(cells: list[str] | tuple[str, ...]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(cells, widths, strict=True)).rstrip()

    rule = joined(["-" * w for w in widths])
    return "\n".join([joined(COLUMNS), rule, *(joined(cells) for cells in lines)])


def table_rows(results: dict[int, StepResult]) -> list[dict[str, str]]:
    """One row per step, in step order, and one indented row per part (a run, a config)."""
    rows = []
    for step in STEPS:
        if step.number not in results:
            continue
        result = results[step.number]
        shown = result.summary if result.status != "failed" else result.error or ""
        rows.append({"step": str(step.number), "check": step.name, "status": result.status,
                     "result": shown, "target": result.target})  # fmt: skip
        for part in result.parts:
            shown = part.summary if part.status != "failed" else part.error or ""
            rows.append({"step": "", "check": f"  {part.name}", "status": part.status,
                         "result": shown, "target": part.target})  # fmt: skip
    return rows


def report(results: dict[int, StepResult], s: Settings, environment: dict, wall: float) -> dict:
    """The JSON document: the settings, the environment and every step's result."""
    steps = []
    for step in STEPS:
        if step.number in results:
            fields = asdict(results[step.number])
            del fields["name"]  # a part's name; the step's own is the step's
            steps.append({"step": step.number, "name": step.name, "what": step.what, **fields})
    return {
        "suite": "attnlab gpu_suite", "tiny": s.tiny,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment, "batch": None if s.tiny else s.batch, "wall_s": round(wall, 1),
        "work": str(s.work), "steps": steps,
    }  # fmt: skip


def write_outputs(doc: dict, text: str, s: Settings) -> None:
    s.out.mkdir(parents=True, exist_ok=True)
    (s.out / "gpu_suite.json").write_text(json.dumps(doc, indent=2, default=str))
    (s.out / "gpu_suite.txt").write_text(text + "\n")
    with tarfile.open(s.out / "logs.tar.gz", "w:gz") as archive:
        for path in sorted((s.work / "logs").glob("*.log")):
            archive.add(path, arcname=f"logs/{path.name}")
        for path in sorted((s.work / "runs").glob("*/summary.json")):
            archive.add(path, arcname=f"runs/{path.parent.name}/summary.json")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    s = settings_from(args)
    begun = time.perf_counter()
    deadline = begun + args.budget
    environment = run_job(Job("env", s.probe("env")), s, deadline)
    if environment.returncode != 0:
        print(f"error: could not start torch: {environment.last_error()}", file=sys.stderr)
        return 2
    s.environment = json.loads(environment.stdout.strip().splitlines()[-1])
    if not s.tiny and not s.environment["cuda"]:
        print("error: no CUDA device is visible; run with --tiny for the CPU dry-run",
              file=sys.stderr)  # fmt: skip
        return 2
    only = {int(n) for n in args.only.split(",")} if args.only else None
    jobs = args.jobs or (1 if s.tiny else 6)
    print(f"gpu_suite: {s.environment['device_name']}, torch {s.environment['torch']}, "
          f"{'tiny CPU dry-run' if s.tiny else 'CUDA'}; budget {args.budget:.0f} s; "
          f"work {s.work}", flush=True)  # fmt: skip
    by_number = {step.number: step for step in STEPS}
    results: dict[int, StepResult] = {}
    for numbers in PHASES:
        phase = Phase([by_number[n] for n in numbers if only is None or n in only])
        for step in phase.steps:
            print(f"step {step.number} {step.name}: {step.what}", flush=True)
            try:
                phase.planned[step.number] = step.plan(s)
            except Exception as error:  # a step that cannot even be planned is a failed step
                phase.planned[step.number] = StepResult(status="failed", error=repr(error))
        run_phase(phase, s, deadline, jobs if len(phase.steps) > 1 else 1, results)
        for step in phase.steps:
            print(f"step {step.number} {step.name}: {results[step.number].status}", flush=True)
    text = table(table_rows(results))
    doc = report(results, s, s.environment, time.perf_counter() - begun)
    write_outputs(doc, text, s)
    print(f"\n{text}\n\nresults: {s.out / 'gpu_suite.json'} (logs: {s.out / 'logs.tar.gz'})")
    return 1 if any(r.status == "failed" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
