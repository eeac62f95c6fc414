"""The GPU suite's steps: what each runs (jobs) and how it reads the output.

A step's ``plan`` returns the jobs to run (subprocesses, :mod:`gpu_suite_jobs`) or, when
it cannot run here, its result at once (skipped, with the reason); its ``read`` turns
the finished jobs into a :class:`StepResult`.
"""

from __future__ import annotations

import json
import re
import sys

from attnlab.bench.gpu.jobs import Job, Ran, Settings, Step, StepResult, failure

NANOGPT_LINE = re.compile(r"time per iteration: ([\d.]+)ms, MFU: (-?[\d.]+)%")
A100_BF16 = 312e12  # nanoGPT's estimate_mfu divides by this peak, whatever the device
POINT_LINE = re.compile(r"^(\S.*?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$")  # long_context's rows


def percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def one_part_step(parts: list[StepResult], summary: str) -> StepResult:
    """A step made of parts: failed when one failed (its error first), else ok."""
    failed = [p for p in parts if p.status == "failed"]
    if failed:
        error = f"{failed[0].name}: {failed[0].error}"
        return StepResult(status="failed", summary=summary, error=error, parts=parts)
    if parts and all(p.status.startswith("skipped") for p in parts):
        return StepResult(status=parts[0].status, summary=summary, parts=parts)
    return StepResult(status="ok", summary=summary, parts=parts)


# --- 1: attnlab at GPT-2-124M shape -------------------------------------------------------


def plan_gpu_check(s: Settings) -> list[Job]:
    args = ["--json", str(s.work / "gpu_check.json")]
    args += ["--tiny", "--device", "cpu"] if s.tiny else ["--batch", str(s.batch)]
    return [Job("gpu_check", s.module("check", *args), 120 if s.tiny else 240)]


def read_gpu_check(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    bad = failure(ran[0])
    if bad:
        return bad
    m = json.loads((s.work / "gpu_check.json").read_text())
    summary = (f"{m['ms_per_iter']:.1f} ms/iter, {m['tokens_per_sec']:,.0f} tokens/s, "
               f"MFU {percent(m['mfu'])} (batch {m['batch']} × {m['block']}, {m['precision']}, "
               f"compile={m['compile']}, AdamW fused={m['fused_adamw']})")  # fmt: skip
    target = "MFU ≥ 50 %: " + ("n/a (no peak known)" if m["mfu"] is None else
                               verdict(m["mfu"] >= 0.5))  # fmt: skip
    return StepResult(status="ok", summary=summary, target=target, metrics=m)


# --- 2: nanoGPT's bench.py, side by side ---------------------------------------------------


def parse_nanogpt(output: str) -> dict[str, float] | None:
    """bench.py's last 'time per iteration: 1797.5487ms, MFU: 0.01%' line, or None."""
    found = NANOGPT_LINE.findall(output)
    if not found:
        return None
    ms, mfu = found[-1]
    return {"ms_per_iter": float(ms), "mfu_a100_basis": float(mfu) / 100}


def nanogpt_metrics(parsed: dict[str, float], batch: int, block: int, peak: float | None) -> dict:
    """Tokens/s of bench.py's iteration; its MFU moved from the A100 peak it assumes to
    the device's (the same FLOP count: nanoGPT's 6N + 12·L·H·Q·T per token)."""
    tokens_per_sec = batch * block / (parsed["ms_per_iter"] / 1e3)
    mfu = parsed["mfu_a100_basis"] * A100_BF16 / peak if peak else None
    return {**parsed, "batch": batch, "block": block, "tokens_per_sec": tokens_per_sec,
            "mfu": mfu}  # fmt: skip


def plan_nanogpt(s: Settings) -> list[Job] | StepResult:
    if not (s.nanogpt / "bench.py").is_file():
        where = f"no bench.py in {s.nanogpt} (--nanogpt DIR or NANOGPT_DIR)"
        return StepResult(status="skipped (not found)", summary=where)
    if not s.cuda:
        why = "bench.py calls torch.cuda.synchronize() on every device"
        return StepResult(status="skipped (needs CUDA)", summary=why)
    args = [f"--batch_size={s.batch}", "--block_size=1024", "--compile=True", "--real_data=False"]
    return [Job("nanogpt_bench", [sys.executable, "bench.py", *args], 240, cwd=s.nanogpt)]


def read_nanogpt(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    bad = failure(ran[0])
    if bad:
        return bad
    parsed = parse_nanogpt(ran[0].stdout)
    if parsed is None:
        return StepResult(status="failed", error="no 'time per iteration' line in its output")
    from attnlab.callbacks.mfu import peak_flops

    m = nanogpt_metrics(parsed, s.batch, 1024, peak_flops(s.environment["device_name"], "bf16"))
    summary = (f"{m['ms_per_iter']:.1f} ms/iter, {m['tokens_per_sec']:,.0f} tokens/s, "
               f"MFU {percent(m['mfu'])} (batch {s.batch} × 1024, bf16, compile=True)")  # fmt: skip
    ours = done.get(1)
    target = "attnlab tokens/s ≥ nanoGPT: n/a (step 1 did not run)"
    if ours and ours.status == "ok":
        m["attnlab_over_nanogpt"] = ours.metrics["tokens_per_sec"] / m["tokens_per_sec"]
        ratio = m["attnlab_over_nanogpt"]
        target = f"attnlab / nanoGPT tokens/s {ratio:.3f} ≥ 1: {verdict(ratio >= 1)}"
    return StepResult(status="ok", summary=summary, target=target, metrics=m)


# --- 3 and 8: attnlab-bench ----------------------------------------------------------------

SHORT = {
    "decoder_only_vs_hf_gpt2": "vs HF GPT-2", "encoder_decoder_vs_torch_transformer":
    "vs nn.Transformer", "lightning_overhead": "Lightning", "lightning_overhead_minimal":
    "Lightning min", "kv_cache_speedup": "KV cache", "sdpa_vs_math": "sdpa/math",
    "decoder_only_generate_vs_hf": "generate vs HF",
}  # fmt: skip


def plan_bench(s: Settings) -> list[Job]:
    args = ["--json", str(s.work / "bench.json")]
    args += ["--quick", "--sizes", "tiny", "--device", "cpu", "--threads", "1"] if s.tiny else [
        "--device", "cuda"]  # fmt: skip
    # the decoding cases compile their step once per model (tens of seconds on a CPU)
    return [Job("bench", [sys.executable, "-m", "attnlab.bench", *args], 300 if s.tiny else 240)]


def read_bench(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    bad = failure(ran[0])
    if bad:
        return bad
    doc = json.loads((s.work / "bench.json").read_text())
    sizes = []
    for size, ratios in doc["ratios"].items():
        shown = [f"{SHORT.get(k, k)} {'skipped' if r is None else f'{r:.2f}'}"
                 for k, r in ratios.items()]  # fmt: skip
        sizes.append(f"{size}: " + ", ".join(shown))
    return StepResult(status="ok", summary="; ".join(sizes),
                      target="ratios only (its targets are for the 2-core CPU)",
                      metrics={"ratios": doc["ratios"], "wall_s": doc["wall_s"]})  # fmt: skip


def plan_long_context(s: Settings) -> list[Job]:
    args = ["--only", "long_context", "--json", str(s.work / "long_context.json")]
    args += ["--quick", "--device", "cpu", "--threads", "1"] if s.tiny else ["--device", "cuda"]
    return [Job("long_context", [sys.executable, "-m", "attnlab.bench", *args], 300)]


def read_long_context(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    points = [m.groups() for m in map(POINT_LINE.match, ran[0].stdout.splitlines()) if m]
    measured = [{"contender": n, "T": int(t), "step_s": float(sec), "peak_mib": float(mib)}
                for n, t, sec, mib in points]  # fmt: skip
    bad = failure(ran[0])
    if bad:
        bad.metrics = {"points": measured}  # what it measured before it stopped
        bad.summary = f"{len(measured)} point(s) measured before it stopped"
        return bad
    doc = json.loads((s.work / "long_context.json").read_text())["long_context"]
    longest = doc["lengths"][-1]
    kinds = ("sliding_window w=256", "linformer k=256", "linear")
    shown = ", ".join(f"{k.split()[0]} {doc['summary'][k]['memory_ratio'] or float('nan'):.3f}"
                      for k in kinds)  # fmt: skip
    summary = f"memory / full(math) at T={longest}: {shown}"
    target = f"≤ 1/8 and slope ≤ 1.2 at T={longest}: {verdict(doc['targets_met'])}"
    return StepResult(status="ok", summary=summary, target=target,
                      metrics={"summary": doc["summary"], "points": measured})  # fmt: skip


# --- 4 and 7: training runs through the real configs ---------------------------------------

ARCHITECTURE_DATA = {  # synthetic data each architecture trains on, no files needed
    "encoder_only": "majority", "decoder_only": "reverse", "encoder_decoder": "reverse",
    "vit": "digits", "rnn": "reverse",
}  # fmt: skip
STRATEGIES = ("fsdp", "ddp")


def fast_run(s: Settings) -> list[str]:
    """20 compiled steps on the GPU; 3 eager steps on the CPU with --tiny."""
    if s.tiny:
        return ["trainer=cpu", "model.compile=false", "trainer.max_steps=3"]
    return ["trainer=gpu", "model.compile=true", "trainer.max_steps=20"]


def read_run(s: Settings, ran: Ran, name: str) -> StepResult:
    """One training run: its summary.json (status, tokens/s, val/loss)."""
    path = s.work / "runs" / ran.label / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else None
    bad = failure(ran)
    if summary and summary.get("status") != "completed":
        error = summary.get("error") or (bad.error if bad else "")
        return StepResult(status="failed", name=name, error=f"{summary['status']}: {error}")
    if bad or summary is None:
        bad = bad or StepResult(status="failed", error=f"no {path}")
        bad.name = name
        return bad
    rate = summary.get("tokens_per_sec")
    loss = summary.get("metrics", {}).get("val/loss")
    rate_text = "n/a" if rate is None else f"{rate:,.0f}"
    loss_text = "n/a" if loss is None else f"{loss:.3f}"
    shown = f"{rate_text} tokens/s, val/loss {loss_text}, {ran.seconds:.0f} s in all"
    metrics = {k: summary.get(k) for k in ("status", "tokens_per_sec", "wall_s", "params")}
    return StepResult(status="ok", name=name, summary=shown,
                      metrics={**metrics, "metrics": summary.get("metrics", {})})  # fmt: skip


def plan_train(s: Settings) -> list[Job]:
    jobs = []
    for arch, data in ARCHITECTURE_DATA.items():
        small = ["data.train_size=256"] if s.tiny and data != "digits" else []
        argv = s.train(f"train_{arch}", f"model={arch}", f"data={data}", *fast_run(s), *small)
        jobs.append(Job(f"train_{arch}", argv, 150 if s.tiny else 300))
    return jobs


def read_train(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    parts = [read_run(s, r, r.label.removeprefix("train_")) for r in ran]
    completed = sum(p.status == "ok" for p in parts)
    return one_part_step(parts, f"{completed}/{len(parts)} runs completed")


def strategy_skip(s: Settings, name: str) -> StepResult | None:
    if not (s.root / "conf" / "trainer" / f"{name}.yaml").is_file():
        return StepResult(status="skipped (no config)", name=name,
                          summary=f"conf/trainer/{name}.yaml does not exist")  # fmt: skip
    if s.tiny and name == "fsdp":
        return StepResult(status="skipped (needs CUDA)", name=name,
                          summary="Lightning's FSDP strategy requires a GPU")  # fmt: skip
    return None


def plan_strategies(s: Settings) -> list[Job] | StepResult:
    jobs = []
    for name in STRATEGIES:
        if strategy_skip(s, name) is None:
            where = (["trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.max_steps=3"]
                     if s.tiny else ["trainer.max_steps=20"])  # fmt: skip
            argv = s.train(f"strategy_{name}", f"trainer={name}", "trainer.devices=1",
                           "model=decoder_only", "data=copy", *where)  # fmt: skip
            jobs.append(Job(f"strategy_{name}", argv, 150 if s.tiny else 240))
    return jobs


def read_strategies(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    by_label = {r.label: r for r in ran}
    parts = []
    for name in STRATEGIES:
        skip = strategy_skip(s, name)
        parts.append(skip or read_run(s, by_label[f"strategy_{name}"], name))
    where = "CPU, 32-true" if s.tiny else "1 GPU, bf16-mixed"
    return one_part_step(parts, f"trainer.devices=1 ({where}), model=decoder_only data=copy")


# --- 5: the SDPA kernel; 6: activation checkpointing ---------------------------------------


def plan_sdpa(s: Settings) -> list[Job]:
    return [Job("sdpa_kernels", s.probe("sdpa-kernels"), 60 if s.tiny else 240)]


def read_sdpa(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    bad = failure(ran[0])
    if bad:
        return bad
    found = ran[0].last_json()
    outer = "aten::scaled_dot_product_attention"  # the dispatcher; the kernel is below it
    shown = "; ".join(
        f"{mode}: " + ", ".join(n for n in m["sdpa_ops"] if n != outer)
        for mode, m in found["modes"].items()
    )
    if found["device"] == "cpu":  # recorded only: the check that matters is on CUDA
        return StepResult(status="ok", summary=shown, target="recorded (CPU)", metrics=found)
    target = f"flash or memory-efficient kernel in every mode: {verdict(found['passed'])}"
    if not found["passed"]:
        return StepResult(status="failed", summary=shown, target=target, metrics=found,
                          error=f"no fused SDPA kernel in some mode: {shown}")  # fmt: skip
    return StepResult(status="ok", summary=shown, target=target, metrics=found)


def plan_checkpointing(s: Settings) -> list[Job]:
    batch = [] if s.tiny else ["--batch", str(s.batch)]
    return [
        Job(f"checkpointing_{x}", s.probe("peak-memory", "--checkpointing", x, *batch),
            60 if s.tiny else 180)
        for x in ("off", "on")
    ]  # fmt: skip


def read_checkpointing(s: Settings, ran: list[Ran], done: dict[int, StepResult]) -> StepResult:
    for r in ran:
        bad = failure(r)
        if bad:
            return bad
    off, on = (r.last_json() for r in ran)
    saving = 1 - on["peak_bytes"] / off["peak_bytes"]
    slower = on["step_s"] / off["step_s"]
    mib = 2**20
    summary = (
        f"peak {off['peak_bytes'] / mib:,.0f} → {on['peak_bytes'] / mib:,.0f} MiB "
        f"({'saves' if saving >= 0 else 'costs'} {100 * abs(saving):.1f} %; {off['measure']}), "
        f"step time × {slower:.2f}"
    )
    metrics = {"off": off, "on": on, "saving": saving, "step_time_ratio": slower}
    if off["device"] == "cpu":
        return StepResult(status="ok", summary=summary, metrics=metrics,
                          target="recorded (CPU: whole-process RSS)")  # fmt: skip
    target = f"less peak memory with checkpointing: {verdict(saving > 0)}"
    status = "ok" if saving > 0 else "failed"
    error = None if saving > 0 else "activation checkpointing did not lower the peak"
    return StepResult(status=status, summary=summary, target=target, metrics=metrics,
                      error=error)  # fmt: skip


STEPS = (
    Step(1, "gpu_check", "attnlab decoder at GPT-2-124M shape: ms/iter, tokens/s, MFU",
         plan_gpu_check, read_gpu_check),
    Step(2, "nanogpt", "nanoGPT bench.py at the same shape, its own process",
         plan_nanogpt, read_nanogpt),
    Step(3, "bench", "attnlab-bench: attnlab against HF GPT-2, nn.Transformer, a bare loop",
         plan_bench, read_bench),
    Step(4, "train", "5 architectures through attnlab.train (compiled on CUDA)",
         plan_train, read_train),
    Step(5, "sdpa", "the SDPA kernel a causal decoder dispatches (torch.profiler)",
         plan_sdpa, read_sdpa),
    Step(6, "checkpointing", "peak memory with model.activation_checkpointing on vs off",
         plan_checkpointing, read_checkpointing),
    Step(7, "strategies", "trainer=fsdp and trainer=ddp with trainer.devices=1",
         plan_strategies, read_strategies),
    Step(8, "long_context", "attnlab-bench --only long_context: attention kinds against T",
         plan_long_context, read_long_context),
)  # fmt: skip
