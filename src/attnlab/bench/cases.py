"""The comparisons: each builds two contenders at one size and times them in turns.

Every case returns ``{"ratio": first / second, "contenders": {name: medians}, …}``
or ``{"skipped": reason}``; the ratio's direction is in ``RATIO_MEANING``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.bench.contenders import (
    BenchSize,
    TorchTransformerSeq2Seq,
    gpt2_state_dict,
    hf_gpt2,
    our_decoder_only,
    our_encoder_decoder,
    random_tokens,
    training_step,
)
from attnlab.bench.timing import Timing, interleave, kernel_shares, matmul_share, synchronize
from attnlab.inference.generation import NEVER_GENERATED, DecodeConfig, generate
from attnlab.special_tokens import PAD

RATIO_MEANING = {
    "decoder_only_vs_hf_gpt2": "ours / GPT2LMHeadModel, seconds per training step "
    "(lower is better)",
    "encoder_decoder_vs_torch_transformer": "ours / nn.Transformer, seconds per training step "
    "(lower is better)",
    "lightning_overhead": "Lightning Trainer / bare loop, seconds per step in steady state "
    "(default callbacks, CSV logger, rich progress bar)",
    "lightning_overhead_minimal": "Lightning Trainer / bare loop, seconds per step in steady state "
    "(no logger, no checkpointing, no progress bar)",
    "kv_cache_speedup": "uncached / cached, seconds to decode 256 tokens, batch 1; cached: "
    "the static cache and the compiled step, in steady state (higher is better)",
    "decoder_only_generate_vs_hf": "GPT2LMHeadModel.generate / attnlab generate, seconds to "
    "decode 256 tokens, batch 1, the same weights; attnlab: the static cache and the compiled "
    "step, in steady state (higher is better)",
    "sdpa_vs_math": "attn_impl=sdpa / attn_impl=math, seconds per training step (lower is better)",
    "no_bias_vs_bias": "model.bias=false / model.bias=true, seconds per training step (the same "
    "weights, lower is better)",
    "compiled_vs_eager_step": "model.compile() / eager, seconds per training step (AdamW, the "
    "loss outside the compiled model as in model.compile=true; lower is better)",
}

# the targets on a 2-core CPU; other ratios are reported without one
TARGETS = {
    "decoder_only_vs_hf_gpt2": ("<=", 0.8),
    "encoder_decoder_vs_torch_transformer": ("<=", 0.8),
    "lightning_overhead": ("<=", 1.05),
    "kv_cache_speedup": (">=", 8.0),
    "decoder_only_generate_vs_hf": (">=", 2.0),
}


def meets_target(key: str, ratio: float) -> bool | None:
    if key not in TARGETS:
        return None
    op, bound = TARGETS[key]
    return ratio <= bound if op == "<=" else ratio >= bound


@dataclass
class Effort:
    """Where and how long to time: rounds of turns, calls per turn, untimed warm-up calls."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    clock: str = "wall"
    rounds: int = 7
    calls: int = 3
    warmup: int = 2
    decode_rounds: int = 3
    decode_batches: tuple[int, ...] = (1,)
    new_tokens: int = 256
    lightning_steps: int = 60
    lightning_rounds: int = 3
    lightning_minimal: bool = True  # also time a Trainer without logger, checkpoints, bar


def _result(timing: Timing, first: str, second: str, **extra: Any) -> dict[str, Any]:
    """The ratio first / second of the medians; ``pair`` names them (there may be more
    contenders, reported with their own ratios in ``extra``)."""
    return {
        "ratio": timing.ratio(first, second), "pair": [first, second],
        "contenders": timing.summary(), **extra,
    }  # fmt: skip


def _time(steps: dict[str, Any], effort: Effort) -> Timing:
    return interleave(
        steps, effort.rounds, effort.calls, effort.warmup, effort.device, effort.clock
    )


NO_TRANSFORMERS = ("transformers is not installed (make setup puts it in .venv/hf-parity, "
                   "$ATTNLAB_HF_PARITY names another folder; or pip install 'attnlab[bench]')")


def decoder_only_vs_hf_gpt2(size: BenchSize, effort: Effort) -> dict[str, Any]:
    theirs = hf_gpt2(size)
    if theirs is None:
        return {"skipped": NO_TRANSFORMERS}
    ours = our_decoder_only(size)
    tokens = random_tokens(size, size.block + 1, effort.device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    steps = {
        "attnlab": training_step(ours.to(effort.device), (inputs,), labels),
        "hf_gpt2": training_step(theirs.to(effort.device), (inputs,), labels),
    }
    timing = _time(steps, effort)
    extra: dict[str, Any] = {}
    if effort.device.type == "cpu":
        extra = matmul_floor(steps, timing, "attnlab", "hf_gpt2")
    return _result(timing, "attnlab", "hf_gpt2", **extra)


def matmul_floor(steps: dict[str, Any], timing: Timing, ours: str, theirs: str) -> dict[str, Any]:
    """How far the ratio could fall if only the matrix products (and the attention kernel)
    cost anything.

    ``matmul_share`` and ``attention_share`` per contender (profiled); ``floor_ratio`` = our
    time in matrix products / their whole step: the ratio attnlab would reach if everything
    else in its step were free; ``kernel_floor_ratio`` the same with the fused attention
    kernel counted too. When both run the same products and the same attention kernel, no
    other change can go below them.
    """
    shares = {name: kernel_shares(step) for name, step in steps.items()}
    per_step = timing.median(ours) / timing.median(theirs)
    ours_shares = shares[ours]
    return {
        "matmul_share": {name: share["matmul"] for name, share in shares.items()},
        "attention_share": {name: share["attention"] for name, share in shares.items()},
        "floor_ratio": ours_shares["matmul"] * per_step,
        "kernel_floor_ratio": (ours_shares["matmul"] + ours_shares["attention"]) * per_step,
    }


def encoder_decoder_vs_torch_transformer(size: BenchSize, effort: Effort) -> dict[str, Any]:
    ours, theirs = our_encoder_decoder(size), TorchTransformerSeq2Seq(size)
    src = random_tokens(size, size.block, effort.device, seed=1)
    tgt = random_tokens(size, size.block + 1, effort.device, seed=2)
    inputs, labels = (src, tgt[:, :-1]), tgt[:, 1:]
    steps = {
        "attnlab": training_step(ours.to(effort.device), inputs, labels),
        "torch_transformer": training_step(theirs.to(effort.device), inputs, labels),
    }
    timing = _time(steps, effort)
    extra: dict[str, Any] = {}
    if effort.device.type == "cpu":  # the same products and attention kernel in both
        extra = matmul_floor(steps, timing, "attnlab", "torch_transformer")
    return _result(timing, "attnlab", "torch_transformer", **extra)


def _lm_steps(models: dict[str, nn.Module], size: BenchSize, effort: Effort) -> dict[str, Any]:
    """A training step of each causal LM on the same random batch (next-token labels)."""
    tokens = random_tokens(size, size.block + 1, effort.device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    return {name: training_step(model.to(effort.device), (inputs,), labels)
            for name, model in models.items()}  # fmt: skip


def sdpa_vs_math(size: BenchSize, effort: Effort) -> dict[str, Any]:
    fused = our_decoder_only(size, attn_impl="sdpa")
    explicit = our_decoder_only(size, attn_impl="math")
    explicit.load_state_dict(fused.state_dict())
    steps = _lm_steps({"sdpa": fused, "math": explicit}, size, effort)
    return _result(_time(steps, effort), "sdpa", "math")


def no_bias_vs_bias(size: BenchSize, effort: Effort) -> dict[str, Any]:
    """What ``model.bias=false`` (nanoGPT's configuration) saves a training step: the same
    seed draws the same weights, and the biased model's start at zero."""
    torch.manual_seed(0)
    plain = our_decoder_only(size, bias=False)
    torch.manual_seed(0)
    biased = our_decoder_only(size)
    steps = _lm_steps({"no_bias": plain, "bias": biased}, size, effort)
    return _result(_time(steps, effort), "no_bias", "bias")


def compiled_vs_eager_step(size: BenchSize, effort: Effort) -> dict[str, Any]:
    """What ``model.compile=true`` does to a training step: the same weights, eager and
    through ``Module.compile()``. Compilation is timed once before the rounds
    (``compile_s``); ``graphs`` and ``graph_breaks`` are ``torch._dynamo.explain``'s count
    for the training forward, and ``matmul_share`` the eager step's time in matrix
    products, which compiling leaves as they are."""
    import copy

    eager = our_decoder_only(size).to(effort.device)
    compiled = copy.deepcopy(eager)
    tokens = random_tokens(size, size.block + 1, effort.device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    eager.train()
    explained = torch._dynamo.explain(eager)(inputs)
    compiled.compile()
    steps = {
        "compiled": training_step(compiled, (inputs,), labels),
        "eager": training_step(eager, (inputs,), labels),
    }
    compile_s = _first_call_s(steps["compiled"], effort.device)
    extra = {"compile_s": compile_s, "graphs": explained.graph_count,
             "graph_breaks": explained.graph_break_count}  # fmt: skip
    timing = _time(steps, effort)
    if effort.device.type == "cpu":
        extra["matmul_share"] = {"eager": matmul_share(steps["eager"])}
    return _result(timing, "compiled", "eager", **extra)


DECODE_PROMPT = 16  # tokens before the generated ones in the decoding cases


def _decoding(
    model: nn.Module, prompt: Tensor, config: DecodeConfig, out: dict[str, Tensor], name: str
) -> Any:
    """A closure decoding ``config.max_new_tokens`` tokens into ``out[name]``, never stopping
    at EOS."""

    def run() -> None:
        out[name] = generate(model, prompt, config, eos_id=None)

    return run


def _first_call_s(run: Any, device: torch.device) -> float:
    """Seconds of one call: for a compiled step, mostly its compilation."""
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


def kv_cache_decoding(size: BenchSize, effort: Effort, batch: int) -> dict[str, Any]:
    """Greedy decoding of ``new_tokens`` tokens after a 16-token prompt, never stopping at EOS:
    without a cache, with the dynamic cache in eager mode, and with the static cache and
    the compiled step (``decode.compile=true``; its compilation is timed once before the
    rounds and reported as ``compile_s``, not in the medians).

    The model's position table is sized for prompt + new tokens; its weights are random,
    which costs the same as trained ones.
    """
    model = our_decoder_only(size, max_len=DECODE_PROMPT + effort.new_tokens)
    model = model.to(effort.device).eval()
    prompt = random_tokens(replace(size, batch=batch), DECODE_PROMPT, effort.device)
    outputs: dict[str, Tensor] = {}
    configs = {
        "uncached": DecodeConfig(max_new_tokens=effort.new_tokens, use_cache=False),
        "cached_eager": DecodeConfig(max_new_tokens=effort.new_tokens, compile=False),
        "cached": DecodeConfig(max_new_tokens=effort.new_tokens, compile=True),
    }
    steps = {name: _decoding(model, prompt, cfg, outputs, name) for name, cfg in configs.items()}
    compile_s = _first_call_s(steps["cached"], effort.device)
    timing = interleave(steps, effort.decode_rounds, 1, 1, effort.device, effort.clock)
    same = all(torch.equal(out, outputs["uncached"]) for out in outputs.values())
    return _result(
        timing, "uncached", "cached", eager_ratio=timing.ratio("uncached", "cached_eager"),
        compile_s=compile_s, new_tokens=effort.new_tokens, prompt_tokens=DECODE_PROMPT,
        batch=batch, outputs_match=same,
    )  # fmt: skip


def decoder_only_generate_vs_hf(size: BenchSize, effort: Effort) -> dict[str, Any]:
    """attnlab's ``generate`` against ``GPT2LMHeadModel.generate`` with the same weights:
    GPT-2's block (tanh GELU, no embedding scale), greedy, batch 1, a 16-token prompt,
    ``new_tokens`` new ones; Hugging Face with its KV cache and the three ids attnlab never
    generates suppressed, so both must produce the same tokens (``outputs_match``)."""
    length = DECODE_PROMPT + effort.new_tokens
    ours = our_decoder_only(size, max_len=length, ffn="gelu_tanh", scale_embeddings=False)
    theirs = hf_gpt2(replace(size, block=length))
    if theirs is None:
        return {"skipped": NO_TRANSFORMERS}
    theirs.load_state_dict(gpt2_state_dict(ours))
    ours, theirs = ours.to(effort.device).eval(), theirs.to(effort.device).eval()
    prompt = random_tokens(replace(size, batch=1), DECODE_PROMPT, effort.device)
    outputs: dict[str, Tensor] = {}
    compiled = DecodeConfig(max_new_tokens=effort.new_tokens, compile=True)
    eager = DecodeConfig(max_new_tokens=effort.new_tokens, compile=False)

    def hf_generate() -> None:
        with torch.inference_mode():
            out = theirs.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                max_new_tokens=effort.new_tokens, min_new_tokens=effort.new_tokens,
                use_cache=True, suppress_tokens=list(NEVER_GENERATED), pad_token_id=PAD,
            )  # fmt: skip
        outputs["hf"] = out[:, DECODE_PROMPT:]

    steps = {
        "hf_generate": hf_generate,
        "attnlab": _decoding(ours, prompt, compiled, outputs, "attnlab"),
        "attnlab_eager": _decoding(ours, prompt, eager, outputs, "attnlab_eager"),
    }
    compile_s = _first_call_s(steps["attnlab"], effort.device)
    timing = interleave(steps, effort.decode_rounds, 1, 1, effort.device, effort.clock)
    same = all(torch.equal(outputs["hf"], outputs[name]) for name in ("attnlab", "attnlab_eager"))
    return _result(
        timing, "hf_generate", "attnlab",
        eager_ratio=timing.ratio("hf_generate", "attnlab_eager"), compile_s=compile_s,
        new_tokens=effort.new_tokens, prompt_tokens=DECODE_PROMPT, outputs_match=same,
    )  # fmt: skip


def lightning_overhead(size: BenchSize, effort: Effort, minimal: bool = False) -> dict[str, Any]:
    from attnlab.bench.lightning_loop import compare_loops

    return compare_loops(
        size, effort.lightning_steps, effort.lightning_rounds, normal=not minimal,
        device=effort.device, clock=effort.clock,
    )  # fmt: skip


def run_all(
    size: BenchSize, effort: Effort, report: Any = None, only: set[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Every comparison at one size (or those in ``only``); ``report(key, result)`` as each
    one finishes."""
    # the Lightning loops first: measured after the other cases in the same process (the
    # profiler of the GPT-2 case, transformers' import), their ratio read up to 0.2 higher
    jobs: list[tuple[str, Any]] = [("lightning_overhead", lambda: lightning_overhead(size, effort))]
    if effort.lightning_minimal:
        jobs.append(("lightning_overhead_minimal", lambda: lightning_overhead(size, effort, True)))
    jobs += [
        ("decoder_only_vs_hf_gpt2", lambda: decoder_only_vs_hf_gpt2(size, effort)),
        ("encoder_decoder_vs_torch_transformer",
         lambda: encoder_decoder_vs_torch_transformer(size, effort)),
        ("sdpa_vs_math", lambda: sdpa_vs_math(size, effort)),
        ("no_bias_vs_bias", lambda: no_bias_vs_bias(size, effort)),
        ("compiled_vs_eager_step", lambda: compiled_vs_eager_step(size, effort)),
    ]  # fmt: skip
    for i, batch in enumerate(effort.decode_batches):
        key = "kv_cache_speedup" if i == 0 else f"kv_cache_speedup_batch{batch}"
        jobs.append((key, lambda b=batch: kv_cache_decoding(size, effort, b)))
    jobs.append(("decoder_only_generate_vs_hf", lambda: decoder_only_generate_vs_hf(size, effort)))
    results: dict[str, dict[str, Any]] = {}
    for key, job in jobs:
        if only is not None and key not in only:
            continue
        results[key] = job()
        if report is not None:
            report(key, results[key])
    return results
