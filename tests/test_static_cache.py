"""The static decoding cache and the compiled one-token step (``decode.cache``, ``decode.compile``).

Both must leave every output as it was: the same next-token logits as recomputing the
whole prefix, and the same tokens for greedy decoding, sampling and beam search.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.inference import decoding, start_decoding
from attnlab.inference.caches import DecodingCache, StaticCache
from attnlab.inference.generation import DecodeConfig, generate
from attnlab.nn.positions import sequence_positions
from decoding_inputs import FORCED, left_padded_prompts, sources, step_logits
from test_generation import CACHE_CASES, make


def static_step_logits(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """``step_logits`` with a static cache reserved for the forced tokens."""
    stepper = start_decoding(model, inputs, True)
    stepper.reserve(FORCED.size(1), compile=False)
    logits = [stepper.logits()]
    assert isinstance(stepper.cache, StaticCache)
    for token in FORCED.T:
        stepper.append(token)
        logits.append(stepper.logits())
    return torch.stack(logits, dim=1)


@pytest.mark.parametrize("name,pos,prefix_lm,ffn", CACHE_CASES)
def test_static_cache_gives_the_logits_of_full_recomputation(
    name: str, pos: str, prefix_lm: bool, ffn: dict
) -> None:
    model = make(name, pos=pos, prefix_lm=prefix_lm, max_len=64, **ffn)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    with torch.no_grad():
        static = static_step_logits(model, inputs)
    recomputed = step_logits(model, inputs, use_cache=False)
    torch.testing.assert_close(static, recomputed, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [dict(n_kv_heads=2), dict(n_kv_heads=1, pos="rope"), dict(block="parallel"),
     dict(qk_norm=True, pos="alibi"),
     dict(attn_impl="math", attn_softcap=1.0, final_softcap=0.5, pos="rope", rope_theta=500.0,
          rotary_fraction=0.5)],
    ids=["gqa", "mqa-rope", "parallel", "qk_norm-alibi", "softcaps-partial_rope"],
)  # fmt: skip
def test_static_cache_serves_grouped_queries_parallel_blocks_and_qk_norm(overrides) -> None:
    model = make("decoder_only", max_len=64, **overrides)
    with torch.no_grad():
        static = static_step_logits(model, left_padded_prompts())
    recomputed = step_logits(model, left_padded_prompts(), use_cache=False)
    torch.testing.assert_close(static, recomputed, atol=1e-5, rtol=1e-5)


STRATEGIES = [
    dict(strategy="greedy"),
    dict(strategy="sample", temperature=1.5, top_k=8),
    dict(strategy="sample", top_p=0.9),
    dict(strategy="beam", beam_size=3),
]


@pytest.mark.parametrize("name", ["decoder_only", "encoder_decoder"])
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: "-".join(map(str, s.values())))
def test_static_cache_generates_what_the_dynamic_cache_and_no_cache_generate(
    name: str, strategy: dict
) -> None:
    # EOS stops rows at different steps: finished rows are fed padding from then on
    model = make(name, max_len=64)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()

    def run(**cache: object) -> torch.Tensor:
        config = DecodeConfig(max_new_tokens=20, **strategy, **cache)  # type: ignore[arg-type]
        return generate(model, inputs, config, generator=torch.Generator().manual_seed(3))

    static = run(cache="static", compile=False)
    assert torch.equal(static, run(cache="dynamic"))
    assert torch.equal(static, run(use_cache=False))


def test_static_cache_writes_in_place_into_buffers_of_fixed_capacity() -> None:
    model = make("decoder_only", max_len=64)
    stepper = start_decoding(model, left_padded_prompts(), True)
    stepper.reserve(10, compile=False)
    stepper.logits()
    cache = stepper.cache
    assert isinstance(cache, StaticCache) and cache.capacity == 6 + 10
    addresses = [t.data_ptr() for t in cache.tensors()]
    with torch.no_grad():
        for token in FORCED.T:
            stepper.append(token)
            stepper.logits()
            assert [t.data_ptr() for t in cache.tensors()] == addresses
    assert int(cache.slot) == 6 + FORCED.size(1)
    assert not cache.key_real[:, int(cache.slot) :].any()


def test_a_reordered_static_cache_keeps_its_buffers_and_selects_rows() -> None:
    model = make("decoder_only", max_len=64)
    stepper = start_decoding(model, left_padded_prompts(), True)
    stepper.reserve(4, compile=False)
    with torch.no_grad():
        stepper.logits()
    cache = stepper.cache
    layer = cache.layers[0].self_attn
    before = layer.k_buffer.clone()
    address = layer.k_buffer.data_ptr()
    index = torch.tensor([2, 2, 0])
    stepper.select(index)
    assert layer.k_buffer.data_ptr() == address
    assert torch.equal(layer.k_buffer, before.index_select(0, index))


@pytest.mark.parametrize(
    "overrides,why",
    [
        (dict(attention="sliding_window", window=4), "the kinds keep their own cache"),
        (dict(pos="learned", max_len=12), "the position table ends before the capacity"),
    ],
)
def test_static_cache_falls_back_to_the_dynamic_cache_where_it_cannot_serve(
    overrides: dict, why: str
) -> None:
    model = make("decoder_only", **overrides)
    stepper = start_decoding(model, left_padded_prompts(), True)
    stepper.reserve(20, compile=False)  # 6 + 20 slots
    with torch.no_grad():
        stepper.logits()
    assert isinstance(stepper.cache, DecodingCache), why
    prompts = left_padded_prompts()
    config = dict(max_new_tokens=6)
    static = generate(model, prompts, DecodeConfig(**config, cache="static"))
    assert torch.equal(static, generate(model, prompts, DecodeConfig(**config, use_cache=False)))


def test_decode_cache_and_compile_are_checked() -> None:
    with pytest.raises(ConfigError, match="decode.cache=ring is not valid"):
        DecodeConfig(cache="ring")
    with pytest.raises(ConfigError, match="decode.compile=yes must be true, false or auto"):
        DecodeConfig(compile="yes")
    with pytest.raises(ConfigError, match="needs decode.cache=static"):
        DecodeConfig(cache="dynamic", compile=True)


def test_by_default_and_on_auto_a_cpu_decodes_eagerly_with_the_dynamic_cache(
    monkeypatch,
) -> None:
    model = make("decoder_only", max_len=64)
    seen: list[tuple[int, bool]] = []
    monkeypatch.setattr(decoding.FastSteps, "plan", lambda self, n, c: seen.append((n, c)))
    generate(model, left_padded_prompts(), DecodeConfig(max_new_tokens=4))
    generate(model, left_padded_prompts(), DecodeConfig(max_new_tokens=4, compile="auto"))
    assert seen == []  # not compiled on a CPU, so not static
    generate(model, left_padded_prompts(), DecodeConfig(max_new_tokens=4, cache="static"))
    assert seen == [(6 + 4, False)]


def compiled_frames() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["frames"].values())


def test_the_compiled_step_generates_todays_tokens_without_recompiling() -> None:
    # one compilation (a few seconds on a CPU) for every step of two generations
    torch._dynamo.reset()
    model = make("decoder_only", max_len=64)
    prompts = left_padded_prompts()
    expected = {
        "greedy": generate(model, prompts, DecodeConfig(max_new_tokens=12, use_cache=False)),
        "sample": generate(
            model, prompts, DecodeConfig(strategy="sample", max_new_tokens=12, use_cache=False),
            generator=torch.Generator().manual_seed(0),
        ),
    }  # fmt: skip
    compiled = generate(model, prompts, DecodeConfig(max_new_tokens=12, compile=True))
    frames = compiled_frames()
    sampled = generate(
        model, prompts, DecodeConfig(strategy="sample", max_new_tokens=12, compile=True),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert torch.equal(compiled, expected["greedy"]) and torch.equal(sampled, expected["sample"])
    assert compiled_frames() == frames  # the second generation reused the graph


def test_later_steps_skip_guards_yet_each_model_gets_its_own_graph() -> None:
    # Two models with the same tensor shapes whose graphs differ (ReLU, GELU): after the
    # first step of a generation only the guards that tell graphs apart run, so a second
    # model must still be caught by that first step's full check and compiled for.
    torch._dynamo.reset()
    prompts = left_padded_prompts()
    models = {ffn: make("decoder_only", max_len=64, ffn=ffn) for ffn in ("relu", "gelu")}
    expected = {
        ffn: generate(model, prompts, DecodeConfig(max_new_tokens=12, use_cache=False))
        for ffn, model in models.items()
    }
    assert not torch.equal(expected["relu"], expected["gelu"])  # the check can tell them apart
    for ffn in ("relu", "gelu", "relu"):
        compiled = generate(models[ffn], prompts, DecodeConfig(max_new_tokens=12, compile=True))
        assert torch.equal(compiled, expected[ffn]), ffn


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,overrides,strategy",
    [
        ("decoder_only", dict(pos="rope", n_kv_heads=2), dict(strategy="beam", beam_size=3)),
        ("decoder_only", dict(pos="t5_relative", prefix_lm=True), dict(strategy="greedy")),
        ("encoder_decoder", {}, dict(strategy="beam", beam_size=4)),
        ("encoder_decoder", dict(pos="alibi"), dict(strategy="sample", top_p=0.8)),
    ],
)
def test_the_compiled_step_generates_todays_tokens_for_every_strategy(
    name: str, overrides: dict, strategy: dict
) -> None:
    model = make(name, max_len=64, **overrides)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()

    def run(**cache: object) -> torch.Tensor:
        config = DecodeConfig(max_new_tokens=16, **strategy, **cache)  # type: ignore[arg-type]
        return generate(model, inputs, config, generator=torch.Generator().manual_seed(1))

    assert torch.equal(run(compile=True), run(use_cache=False))


def test_gpt2_weights_map_onto_hugging_face_and_generate_the_same_tokens() -> None:
    pytest.importorskip("transformers")
    from attnlab.bench.contenders import SIZES, gpt2_state_dict, hf_gpt2, our_decoder_only
    from attnlab.inference.generation import NEVER_GENERATED
    from attnlab.special_tokens import PAD

    size = SIZES["tiny"]
    ours = our_decoder_only(size, max_len=40, ffn="gelu_tanh", scale_embeddings=False).eval()
    theirs = hf_gpt2(size.__class__(**{**size.to_dict(), "block": 40})).eval()
    theirs.load_state_dict(gpt2_state_dict(ours))
    prompt = torch.randint(6, size.vocab, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(prompt), theirs(prompt).logits, atol=1e-5, rtol=1e-5)
        hf = theirs.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=24,
            min_new_tokens=24, suppress_tokens=list(NEVER_GENERATED), pad_token_id=PAD,
        )[:, 8:]  # fmt: skip
    assert torch.equal(generate(ours, prompt, DecodeConfig(max_new_tokens=24), eos_id=None), hf)


@pytest.mark.parametrize("pos", sequence_positions())
def test_static_cache_continues_left_padded_prompts_as_if_alone(pos: str) -> None:
    model = make("decoder_only", pos=pos, max_len=64)
    prompts = left_padded_prompts()
    config = DecodeConfig(max_new_tokens=8, cache="static", compile=False)
    batched = generate(model, prompts, config, eos_id=None)
    alone = generate(model, prompts[2:, 4:], config, eos_id=None)
    assert torch.equal(batched[2:], alone)


@pytest.mark.parametrize("name", ["decoder_only", "encoder_decoder"])
def test_a_later_generation_reuses_the_static_buffers_and_generates_the_same(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new generation of the same shapes (the next validation batch, the next prompt)
    writes into the buffers of the last instead of new ones, so a compiled step and its
    CUDA graph keep their addresses; its tokens are those of a fresh cache. (Pooled on
    CUDA; here on the CPU for the test.)"""
    monkeypatch.setattr(decoding, "POOLED_ON", {"cpu", "cuda"})
    model = make(name, max_len=64)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    config = DecodeConfig(max_new_tokens=12, cache="static", compile=False)
    other = torch.flip(inputs, dims=[0])  # other prompts, the same shapes

    def buffers() -> list[int]:
        (cache,) = decoding.runtime_of(model).static_caches.values()
        return [t.data_ptr() for t in cache.tensors()]

    first = generate(model, inputs, config)
    addresses = buffers()
    second = generate(model, other, config)
    assert buffers() == addresses
    assert torch.equal(first, generate(model, inputs, config))  # the buffers were emptied
    assert torch.equal(second, generate(model, other, DecodeConfig(max_new_tokens=12,
                                                                 use_cache=False)))  # fmt: skip
