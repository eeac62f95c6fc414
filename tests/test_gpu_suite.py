"""The GPU suite (scripts/gpu_suite.sh, attnlab.bench.gpu): statuses, one table, one JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnlab.bench.gpu import check as gpu_check
from attnlab.bench.gpu import suite as gpu_suite
from attnlab.bench.gpu.jobs import Job, Ran, Settings, StepResult, failure, run_job
from attnlab.bench.gpu.steps import STEPS, nanogpt_metrics, parse_nanogpt

REPO = Path(__file__).resolve().parents[1]

# The tail of a real run of nanoGPT's unmodified bench.py, on this project's 2-core CPU:
#   cd ../shared/reference/nanogpt && python -c "import sys, runpy, torch;
#     torch.cuda.synchronize = lambda *a, **k: None; sys.argv = ['bench.py', *sys.argv[1:]];
#     runpy.run_path('bench.py', run_name='__main__')" --device=cpu --compile=False
#     --batch_size=1 --block_size=64 --real_data=False
# (bench.py calls torch.cuda.synchronize() on any device, hence the no-op in that one run)
NANOGPT_OUTPUT = """\
Overriding: device = cpu
Overriding: compile = False
Overriding: batch_size = 1
Overriding: block_size = 64
Overriding: real_data = False
number of parameters: 123.59M
num decayed parameter tensors: 50, with 123,617,280 parameters
num non-decayed parameter tensors: 25, with 19,200 parameters
using fused AdamW: False
0/10 loss: 11.0337
9/10 loss: 1.0946
0/20 loss: 0.7671
19/20 loss: 0.0355
time per iteration: 1797.5487ms, MFU: 0.01%
"""


def settings(tmp_path: Path, tiny: bool = True) -> Settings:
    return Settings(tiny=tiny, out=tmp_path / "out", work=tmp_path / "work",
                    nanogpt=tmp_path / "no-nanogpt", batch=16, root=REPO)  # fmt: skip


def test_parse_nanogpt_reads_the_time_and_mfu_of_bench_py() -> None:
    assert parse_nanogpt(NANOGPT_OUTPUT) == {"ms_per_iter": 1797.5487, "mfu_a100_basis": 0.0001}
    assert parse_nanogpt("Compiling model...\n0/10 loss: 10.9\n") is None


def test_nanogpt_mfu_is_moved_from_the_a100_peak_to_the_device_peak() -> None:
    parsed = {"ms_per_iter": 100.0, "mfu_a100_basis": 0.5}
    metrics = nanogpt_metrics(parsed, batch=16, block=1024, peak=989e12)
    assert metrics["tokens_per_sec"] == pytest.approx(16 * 1024 / 0.1)
    assert metrics["mfu"] == pytest.approx(0.5 * 312 / 989)
    assert nanogpt_metrics(parsed, 16, 1024, peak=None)["mfu"] is None


def make_nanogpt(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "bench.py").write_text("")
    return folder


def test_nanogpt_is_found_in_the_repositorys_own_shared_folder_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NANOGPT_DIR", raising=False)
    root = tmp_path / "checkout"
    root.mkdir()
    beside = tmp_path / "shared" / "reference" / "nanogpt"
    assert gpu_suite.find_nanogpt(root) == beside  # neither: the default step 2 reports
    make_nanogpt(beside)
    assert gpu_suite.find_nanogpt(root) == beside
    inside = make_nanogpt(root / "shared" / "reference" / "nanogpt")  # what a lent machine gets
    assert gpu_suite.find_nanogpt(root) == inside
    monkeypatch.setenv("NANOGPT_DIR", str(tmp_path / "elsewhere"))
    assert gpu_suite.find_nanogpt(root) == tmp_path / "elsewhere"


@pytest.mark.parametrize("tf32,key", [(True, "tf32"), (False, "fp32")])
def test_fp32_runs_are_measured_against_the_tf32_peak_when_tf32_is_on(
    tf32: bool, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the flag itself cannot be monkeypatched (torch's cuBLASModule); its holder can
    monkeypatch.setattr(torch.backends.cuda, "matmul", SimpleNamespace(allow_tf32=tf32))
    assert gpu_check.peak_key("fp32") == key
    assert gpu_check.peak_key("bf16") == "bf16"


def test_the_gpu_check_steps_the_optimizer_and_clipping_that_training_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check's task chooses its AdamW, autocast and clipping under a Trainer with
    trainer=gpu's precision and clipping, as it does in an attnlab-train run."""
    from attnlab.tasks import LanguageModelTask
    from cli_runs import compose_run

    seen: dict = {}
    choose = LanguageModelTask.configure_optimizers
    clip = LanguageModelTask.configure_gradient_clipping

    def chosen(task: LanguageModelTask) -> dict:
        seen["trainer"] = (task.trainer.precision, task.trainer.gradient_clip_val)
        seen["optimizers"] = choose(task)
        return seen["optimizers"]

    def clipped(task: LanguageModelTask, optimizer: object, *args: object) -> None:
        seen.setdefault("clipped", []).append((optimizer is seen["optimizers"]["optimizer"], args))
        clip(task, optimizer, *args)

    monkeypatch.setattr(LanguageModelTask, "configure_optimizers", chosen)
    monkeypatch.setattr(LanguageModelTask, "configure_gradient_clipping", clipped)
    out = tmp_path / "check.json"
    assert gpu_check.main(["--tiny", "--device", "cpu", "--precision", "bf16", "--steps", "1",
                           "--warmup", "1", "--json", str(out)]) == 0  # fmt: skip
    training = compose_run(["trainer=gpu"], tmp_path).trainer
    assert seen["trainer"] == (training.precision, training.gradient_clip_val)
    assert seen["clipped"] == [(True, (training.gradient_clip_val, "norm"))] * 2  # each step
    fused = seen["optimizers"]["optimizer"].defaults["fused"]
    assert json.loads(out.read_text())["fused_adamw"] is fused


def test_a_failed_job_records_its_last_error_line() -> None:
    stderr = "Traceback (most recent call last):\n  File 'x.py'\nRuntimeError: CUDA out of memory\n"
    result = failure(Ran("train_vit", "python x.py", returncode=1, stderr=stderr))
    assert result is not None and result.status == "failed"
    assert result.error == "RuntimeError: CUDA out of memory"
    assert failure(Ran("ok", "python y.py", returncode=0, stdout="{}")) is None


def test_a_job_past_its_timeout_is_killed_and_recorded(tmp_path: Path) -> None:
    job = Job("sleeper", [sys.executable, "-c", "print('started', flush=True); "
                          "import time; time.sleep(60)"], timeout=1.0)  # fmt: skip
    started = time.perf_counter()
    ran = run_job(job, settings(tmp_path), deadline=time.perf_counter() + 100)
    assert time.perf_counter() - started < 30
    assert ran.timed_out and ran.returncode is None
    assert failure(ran).error == "timed out after 1 s; last output: started"
    assert "started" in (tmp_path / "work" / "logs" / "sleeper.log").read_text()


def test_a_job_without_enough_budget_left_is_skipped(tmp_path: Path) -> None:
    ran = run_job(
        Job("late", [sys.executable, "-c", "pass"]), settings(tmp_path), time.perf_counter()
    )
    assert failure(ran).status == "skipped (suite time budget spent)"


def test_steps_that_cannot_run_here_say_why(tmp_path: Path) -> None:
    s = settings(tmp_path)
    by_name = {step.name: step for step in STEPS}
    assert by_name["nanogpt"].plan(s).status == "skipped (not found)"
    (s.nanogpt).mkdir()
    (s.nanogpt / "bench.py").write_text("")
    assert by_name["nanogpt"].plan(s).status == "skipped (needs CUDA)"  # tiny: on the CPU
    labels = [job.label for job in by_name["strategies"].plan(s)]
    assert labels == ["strategy_ddp"]  # FSDP needs a GPU
    parts = by_name["strategies"].read(s, [Ran("strategy_ddp", "…", skipped="x")], {}).parts
    assert [(p.name, p.status) for p in parts] == [
        ("fsdp", "skipped (needs CUDA)"), ("ddp", "skipped (x)")]  # fmt: skip


def test_table_and_json_hold_every_step_with_its_status(tmp_path: Path) -> None:
    results = {step.number: StepResult(status="ok", summary=f"{step.name} result")
               for step in STEPS}  # fmt: skip
    results[2] = StepResult(status="failed", error="RuntimeError: boom")
    results[4].parts = [StepResult(status="ok", name="vit", summary="x " * 60)]
    rows = gpu_suite.table_rows(results)
    text = gpu_suite.table(rows)
    lines = text.splitlines()
    assert lines[0].split() == list(gpu_suite.COLUMNS)
    assert sum(1 for row in rows if row["step"]) == len(STEPS)
    assert "RuntimeError: boom" in text  # a failed step shows its error as its result
    vit = next(i for i, line in enumerate(lines) if "vit" in line)
    assert lines[vit + 1].strip().startswith("x x")  # a long result wraps
    doc = gpu_suite.report(results, settings(tmp_path), {"cuda": False}, 1.0)
    expected = [(s.number, s.name, "failed" if s.number == 2 else "ok") for s in STEPS]
    assert [(d["step"], d["name"], d["status"]) for d in doc["steps"]] == expected
    assert doc["steps"][3]["parts"][0]["name"] == "vit"
    json.dumps(doc)


@pytest.mark.slow
def test_tiny_suite_runs_every_step_on_the_cpu(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    env.pop("OUT", None)
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_suite.sh"), "--tiny", "--out", str(tmp_path / "out"),
         "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "gpu_suite.json").read_text())
    statuses = {step["name"]: step["status"] for step in doc["steps"]}
    assert list(statuses) == [step.name for step in STEPS]
    assert statuses["nanogpt"] in ("skipped (needs CUDA)", "skipped (not found)")
    assert all(statuses[name] == "ok" for name in statuses if name != "nanogpt"), statuses
    assert doc["steps"][0]["metrics"]["tokens_per_sec"] > 0
    table = (tmp_path / "out" / "gpu_suite.txt").read_text()
    assert table.splitlines()[0].split() == list(gpu_suite.COLUMNS)
    assert table in done.stdout  # the same table is printed at the end
    assert (tmp_path / "out" / "logs.tar.gz").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "gpu_suite.json", "gpu_suite.txt", "logs.tar.gz"]  # fmt: skip
