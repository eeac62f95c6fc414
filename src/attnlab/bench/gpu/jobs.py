"""The GPU suite's jobs: settings, one subprocess per job, its result.

``run_job`` runs a job in its own process group, so that a timeout ends it and every
process it started (compile workers, the benchmark's own subprocesses), and logs its
output to ``work/logs/<label>.log``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIN_START_S = 20.0  # a job that would start with less of the budget left is skipped
ERROR_HINT = re.compile(r"error|exception|traceback|killed|out of memory", re.IGNORECASE)


@dataclass
class Settings:
    tiny: bool
    out: Path
    work: Path
    nanogpt: Path
    batch: int
    root: Path
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return not self.tiny and bool(self.environment.get("cuda"))

    def module(self, name: str, *args: str) -> list[str]:
        """``python -m attnlab.bench.gpu.<name> args…``."""
        return [sys.executable, "-m", f"attnlab.bench.gpu.{name}", *args]

    def probe(self, *args: str) -> list[str]:
        return self.module("probes", *args, *(["--tiny"] if self.tiny else []))

    def train(self, label: str, *overrides: str) -> list[str]:
        """``python -m attnlab.train`` into ``work/runs/<label>``, no test phase."""
        return [
            sys.executable, "-m", "attnlab.train", f"hydra.run.dir={self.work / 'runs' / label}",
            "overwrite=true", "test=false", "trainer.enable_progress_bar=false",
            "trainer.limit_val_batches=2", "trainer.log_every_n_steps=5", *overrides,
        ]  # fmt: skip


@dataclass
class Job:
    label: str
    argv: list[str]
    timeout: float = 120.0
    cwd: Path | None = None


@dataclass
class Ran:
    label: str
    command: str
    returncode: int | None = None  # None: it did not finish (timed out or never started)
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    timeout: float = 0.0
    timed_out: bool = False
    skipped: str | None = None

    def last_error(self) -> str:
        """The last line that looks like an error (stderr first), else the last line."""
        if self.timed_out:
            return f"timed out after {self.timeout:.0f} s; last output: {self.last_line()}"
        for text in (self.stderr, self.stdout):
            hits = [line.strip() for line in text.splitlines() if ERROR_HINT.search(line)]
            if hits:
                return hits[-1]
        return self.last_line() if self.returncode == 0 else f"exit {self.returncode}"

    def last_line(self) -> str:
        lines = [line.strip() for line in (self.stderr + "\n" + self.stdout).splitlines()]
        return next((line for line in reversed(lines) if line), "no output")

    def last_json(self) -> dict[str, Any]:
        return json.loads(self.stdout.strip().splitlines()[-1])


@dataclass
class StepResult:
    status: str  # ok | failed | skipped (<why>)
    summary: str = ""
    target: str = ""
    error: str | None = None
    name: str = ""  # a part's name (one run of several)
    metrics: dict[str, Any] = field(default_factory=dict)
    parts: list[StepResult] = field(default_factory=list)
    wall_s: float = 0.0
    commands: list[str] = field(default_factory=list)


@dataclass
class Step:
    number: int
    name: str
    what: str
    plan: Callable[[Settings], list[Job] | StepResult]
    read: Callable[[Settings, list[Ran], dict[int, StepResult]], StepResult]


def run_job(job: Job, s: Settings, deadline: float) -> Ran:
    """Run ``job`` with its timeout cut to what is left of the suite's budget; log it."""
    command = " ".join(job.argv) + (f"   (in {job.cwd})" if job.cwd else "")
    left = deadline - time.perf_counter()
    if left < MIN_START_S:
        return Ran(job.label, command, skipped="suite time budget spent")
    timeout = min(job.timeout, left - 5.0)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(s.root / "src"), env.get("PYTHONPATH")) if p
    )
    env.setdefault("WANDB_MODE", "offline")
    started = time.perf_counter()
    proc = subprocess.Popen(
        job.argv, cwd=job.cwd or s.root, env=env, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # its group: compile workers, bench's children
        stdout, stderr = proc.communicate()
    ran = Ran(
        job.label, command, None if timed_out else proc.returncode, stdout, stderr,
        round(time.perf_counter() - started, 1), timeout, timed_out,
    )  # fmt: skip
    logs = s.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{job.label}.log").write_text(
        f"$ {command}\n# exit {ran.returncode}, {ran.seconds} s"
        f"{', timed out' if timed_out else ''}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n"
    )
    return ran


def failure(ran: Ran) -> StepResult | None:
    """The result of a job that was skipped, timed out or failed; None when it succeeded."""
    if ran.skipped:
        return StepResult(status=f"skipped ({ran.skipped})", name=ran.label)
    if ran.timed_out or ran.returncode != 0:
        return StepResult(status="failed", error=ran.last_error(), name=ran.label)
    return None
