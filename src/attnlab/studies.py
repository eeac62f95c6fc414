"""attnlab-reproduce: rerun a study of ``experiments/``, or only its analysis, and check it.

Usage:
    attnlab-reproduce STUDY --check        the analysis from the committed raw runs, into a
                                           temporary folder, compared with the committed
                                           tables and plots and with the README's quoted
                                           results (exit 1 where they differ;
                                           attnlab.study_readme)
    attnlab-reproduce STUDY                the same analysis, written into the study's folder
    attnlab-reproduce STUDY --train [-- OVERRIDE ...]
                                           rerun the study's training sweeps (its run.sh),
                                           save their raw runs and regenerate everything
    attnlab-reproduce STUDY --measure      also rerun the hardware measurements (step times,
                                           memory, decoding speed), written into the folder
    attnlab-reproduce --list               the studies and whether their raw runs are committed

A study is a folder of ``experiments/`` with a ``run.sh`` (which sources
``experiments/study.sh``). Its raw runs are ``runs/<sweep>/<job>/`` with each run's
``summary.json`` and ``metrics.csv`` (what ``attnlab-compare`` reads; no checkpoints) and
``runs/<sweep>/provenance.json`` (attnlab's commit, torch, CPU/GPU, threads).

Tolerance of ``--check``: in a table every number agrees within one unit of its last
printed digit (integers exactly) and all other text is identical up to spacing; a plot
has the same size and at most 0.1 % of its pixels differ by more than 16 of 255 in a
channel. The hardware measurements are not checked: they belong to the machine that made
them (their files name it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from attnlab.errors import UserError
from attnlab.study_tables import table_differences

RUNS = "runs"
PROVENANCE = "provenance.json"
RAW_FILES = ("summary.json", "metrics.csv")
PIXEL_LEVEL, PIXEL_SHARE = 16, 0.001  # a pixel differs: a channel by > 16/255; ≤ 0.1 % may


def studies_root() -> Path:
    """``experiments/`` of the checkout: above the working directory, else beside the package
    (an editable install)."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents, Path(__file__).resolve().parents[2]):
        if (folder / "experiments" / "study.sh").is_file():
            return folder / "experiments"
    raise UserError(
        "no experiments/study.sh above the working directory; run attnlab-reproduce inside "
        "an attnlab checkout"
    )


def studies(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/run.sh"))


def study_folder(name: str) -> Path:
    root = studies_root()
    folder = root / name
    if not (folder / "run.sh").is_file():
        raise UserError(f"no study {name!r} in {root}; choose one of: {', '.join(studies(root))}")
    return folder


# ---- raw runs ---------------------------------------------------------------------------


def save_runs(sweep: Path, dest: Path) -> int:
    """Copy every run's raw files under ``sweep`` to ``dest`` (same relative layout) and
    write ``dest/provenance.json``; the previous contents of ``dest`` are replaced only
    once the new copy is complete."""
    from attnlab.compare.runs import find_run_dirs

    run_dirs = find_run_dirs([str(sweep)])
    staging = dest.with_name(f".{dest.name}.saving")
    shutil.rmtree(staging, ignore_errors=True)
    shas, threads = set(), set()
    for run_dir in run_dirs:
        target = staging / run_dir.relative_to(sweep)
        target.mkdir(parents=True, exist_ok=True)
        for name in RAW_FILES:
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, target / name)
        summary = json.loads((run_dir / "summary.json").read_text())
        shas.add(summary.get("git_sha"))
        threads.add(summary.get("torch_threads"))
    record = provenance(sorted(map(str, shas)), sorted(t for t in threads if t is not None))
    (staging / PROVENANCE).write_text(json.dumps(record, indent=2))
    if dest.exists():
        shutil.rmtree(dest)
    staging.rename(dest)
    return len(run_dirs)


def provenance(git_shas: list[str], run_threads: list[int] | None = None) -> dict:
    """Where the runs were made: attnlab's commit(s), library versions, CPU/GPU, threads.

    ``run_threads``: the intra-op thread counts the runs' summary.json files record
    (``runs_torch_threads``; empty for runs that predate the field); ``omp_num_threads``
    and ``torch_threads`` are those of the process that saved them."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "attnlab_git_sha": git_shas,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "gpu": gpu,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "runs_torch_threads": run_threads or [],
        "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def machine_line() -> str:
    """One line naming what a measurement ran on."""
    p = provenance([_head_sha()])
    gpu = p["gpu"] or "no GPU"
    omp = p["omp_num_threads"] or "unset"
    threads = f"OMP_NUM_THREADS={omp}, torch threads {p['torch_threads']}"
    return (
        f"Measured on {p['cpu']} ({p['cpu_count']} CPUs), {gpu}; torch {p['torch']}, "
        f"{threads}; attnlab {p['attnlab_git_sha'][0]}, {p['saved'][:10]}."
    )


def _head_sha() -> str:
    from attnlab.callbacks.summary import git_sha

    return (git_sha() or "unknown")[:12]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---- comparing outputs ------------------------------------------------------------------


def image_differences(expected: Path, produced: Path) -> list[str]:
    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(expected).convert("RGB"), dtype=np.int16)
    b = np.asarray(Image.open(produced).convert("RGB"), dtype=np.int16)
    if a.shape != b.shape:
        return [f"size {a.shape[1]}×{a.shape[0]} vs {b.shape[1]}×{b.shape[0]}"]
    share = float((np.abs(a - b).max(axis=-1) > PIXEL_LEVEL).mean())
    return [] if share <= PIXEL_SHARE else [f"{share:.2%} of the pixels differ"]


def differences(expected_dir: Path, produced_dir: Path) -> dict[str, list[str]]:
    """File name → its differences, for every file the analysis produced."""
    report = {}
    for produced in sorted(p for p in produced_dir.rglob("*") if p.is_file()):
        name = str(produced.relative_to(produced_dir))
        expected = expected_dir / name
        if not expected.is_file():
            report[name] = ["not committed in the study's folder"]
        elif produced.suffix == ".png":
            report[name] = image_differences(expected, produced)
        elif produced.suffix in (".md", ".txt", ".csv"):
            report[name] = table_differences(expected.read_text(), produced.read_text())
        else:
            report[name] = [] if expected.read_bytes() == produced.read_bytes() else ["differs"]
    return report


# ---- running a study --------------------------------------------------------------------


def run_study(folder: Path, out: Path, *, train: bool, measure: bool, extra: list[str]) -> None:
    """The study's run.sh: its analysis (from the committed raw runs unless ``train``) into
    ``out``; ``measure``: its hardware measurements too."""
    if not train and not (folder / RUNS).is_dir():
        raise UserError(
            f"{folder.name} has no committed raw runs ({folder / RUNS}); rerun it with "
            f"attnlab-reproduce {folder.name} --train"
        )
    env = {**os.environ, "PY": sys.executable, "OUT": str(out)}
    if not train:
        env["SKIP_TRAIN"] = "1"
    if measure:
        env["MEASURE"] = "1"
    else:
        env.pop("MEASURE", None)
    result = subprocess.run(["bash", str(folder / "run.sh"), *extra], env=env, check=False)
    if result.returncode:
        raise SystemExit(result.returncode)


def check(folder: Path) -> bool:
    from attnlab.study_readme import readme_differences

    with tempfile.TemporaryDirectory(prefix=f"attnlab-reproduce-{folder.name}-") as tmp:
        run_study(folder, Path(tmp), train=False, measure=False, extra=[])
        report = differences(folder, Path(tmp))
        readme = folder / "README.md"
        if readme.is_file():
            report[readme.name] = readme_differences(readme, Path(tmp))
    failed = {name: problems for name, problems in report.items() if problems}
    for name, problems in failed.items():
        if name == "README.md":  # one line each: <study>/README.md: line 12: …
            print("\n".join(f"{folder.name}/{name}: {problem}" for problem in problems))
            continue
        shown = problems[:5] + ([f"… {len(problems) - 5} more"] if len(problems) > 5 else [])
        print(f"{folder.name}/{name}: " + "; ".join(shown))
    ok = sorted(set(report) - set(failed))
    print(f"{folder.name}: {len(ok)} of {len(report)} files reproduce ({', '.join(ok) or 'none'})")
    return not failed


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="attnlab-reproduce", description="Rerun a study of experiments/ or its analysis."
    )
    parser.add_argument("study", nargs="?", help="a folder of experiments/")
    parser.add_argument("--check", action="store_true", help="compare with the committed files")
    parser.add_argument("--train", action="store_true", help="rerun the training sweeps")
    parser.add_argument("--measure", action="store_true", help="rerun the hardware measurements")
    parser.add_argument("--list", action="store_true", help="list the studies")
    args = parser.parse_args(argv)
    if not args.list and not args.study:
        parser.error("name a study (attnlab-reproduce --list shows them)")
    if args.check and (args.train or args.measure):
        parser.error("--check compares the analysis of the committed runs; run --train first")
    return args, extra


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit code (2 for bad input, with one line)."""
    from attnlab.cli.common import user_errors

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--save-runs"] and len(argv) == 3:  # study.sh, after a training sweep
        print(f"saved the raw files of {save_runs(Path(argv[1]), Path(argv[2]))} runs to {argv[2]}")
        return 0
    if argv == ["--machine"]:  # study.sh, above a hardware measurement
        print(machine_line())
        return 0
    try:
        with user_errors():
            args, extra = parse(argv)
            if args.list:
                root = studies_root()
                for name in studies(root):
                    raw = (root / name / RUNS).is_dir()
                    state = "raw runs committed" if raw else "no raw runs (needs --train)"
                    print(f"{name}: {state}")
                return 0
            folder = study_folder(args.study)
            if args.check:
                return 0 if check(folder) else 1
            run_study(folder, folder, train=args.train, measure=args.measure, extra=extra)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
