"""Decoding: the KV cache, greedy, beam search and sampling filters."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch

from attnlab.data.base import BOS, EOS, MASK, PAD
from attnlab.inference.generation import (
    NEVER_GENERATED,
    DecodeConfig,
    filter_logits,
    generate,
    gnmt_length_penalty,
)
from attnlab.models import ModelConfig, build_model
from attnlab.nn.positions import sequence_positions
from decoding_inputs import FORCED, VOCAB, left_padded_prompts, sources, step_logits

MOE = {"ffn": "moe", "moe_experts": 4, "moe_top_k": 2, "moe_shared_experts": 1}
MLA = {"attention": "mla", "kv_latent_rank": 12, "q_latent_rank": 20}  # keeps c^KV, k^R


def make(name: str, vocab: int = VOCAB, **overrides: object) -> torch.nn.Module:
    values = dict(name=name, vocab_size=vocab, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    values.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig.from_dict(values, strict=False)).eval()  # prefix_lm: decoders


CACHE_CASES = [
    *[("decoder_only", pos, False, {}) for pos in sequence_positions()],
    *[("decoder_only", pos, True, {}) for pos in sequence_positions()],
    *[("encoder_decoder", pos, False, {}) for pos in sequence_positions()],
    *[(name, "rope", False, MOE) for name in ("decoder_only", "encoder_decoder")],
    *[(name, "rope", False, MLA) for name in ("decoder_only", "encoder_decoder")],
    ("decoder_only", "rope", True, MLA),
    ("decoder_only", "alibi", False, MLA),  # no decoupled RoPE part: c^KV alone
]


@pytest.mark.parametrize("name,pos,prefix_lm,ffn", CACHE_CASES)
def test_cached_decoding_gives_the_logits_of_full_recomputation(
    name: str, pos: str, prefix_lm: bool, ffn: dict
) -> None:
    model = make(name, pos=pos, prefix_lm=prefix_lm, **ffn)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    cached = step_logits(model, inputs, use_cache=True)
    recomputed = step_logits(model, inputs, use_cache=False)
    torch.testing.assert_close(cached, recomputed, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", sequence_positions())
def test_left_padding_does_not_change_a_prompts_logits(pos: str) -> None:
    model = make("decoder_only", pos=pos)
    prompts = left_padded_prompts()
    batched = step_logits(model, prompts, use_cache=True)
    alone = step_logits(model, prompts[2:, 4:], use_cache=True, forced=FORCED[2:])  # unpadded
    torch.testing.assert_close(batched[2:], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["decoder_only", "encoder_decoder"])
def test_beam_size_one_equals_greedy(name: str) -> None:
    # without a length penalty: with one, a finished hypothesis may lose to a longer one
    model = make(name)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    greedy = generate(model, inputs, DecodeConfig(strategy="greedy", max_new_tokens=8))
    beam_cfg = DecodeConfig(strategy="beam", beam_size=1, length_penalty=0.0, max_new_tokens=8)
    beam = generate(model, inputs, beam_cfg)
    width = max(greedy.size(1), beam.size(1))
    padded = [torch.nn.functional.pad(t, (0, width - t.size(1))) for t in (greedy, beam)]
    assert torch.equal(*padded)


def exhaustive_best(
    model: torch.nn.Module, inputs: torch.Tensor, max_new: int, alpha: float
) -> tuple[list[int], float]:
    """The best output by enumeration under beam search's score.

    score(Y) = log P(Y | X) / lp(|Y|), with lp the GNMT penalty, P renormalised
    after banning PAD/BOS/MASK; Y ends with EOS (which counts in |Y|), or is cut
    at ``max_new`` tokens without one.
    """
    allowed = [t for t in range(model.cfg.vocab_size) if t not in NEVER_GENERATED]

    @functools.cache
    @torch.no_grad()
    def next_logp(prefix: tuple[int, ...]) -> torch.Tensor:
        tokens = torch.tensor([prefix], dtype=torch.long).view(1, -1)
        if model.cfg.name == "encoder_decoder":
            logits = model(inputs, torch.cat([torch.tensor([[BOS]]), tokens], dim=1))
        else:
            logits = model(torch.cat([inputs, tokens], dim=1))
        logits = logits[0, -1].clone()
        logits[list(NEVER_GENERATED)] = float("-inf")
        return logits.log_softmax(-1)

    best: tuple[list[int], float] = ([], float("-inf"))
    words = [t for t in allowed if t != EOS]
    for length in range(max_new + 1):
        for y in itertools.product(words, repeat=length):
            logp = sum(float(next_logp(y[:i])[y[i]]) for i in range(length))
            if length < max_new:  # ends with EOS
                score = (logp + float(next_logp(y)[EOS])) / gnmt_length_penalty(length + 1, alpha)
            else:  # cut at max_new tokens
                score = logp / gnmt_length_penalty(max_new, alpha)
            if score > best[1]:
                best = (list(y), score)
    return best


@pytest.mark.parametrize(
    "name,prompt,alpha",
    [
        ("decoder_only", [8], 0.6),  # greedy says 8 8 3; the best is to stop at once
        ("decoder_only", [6, 8, 7], 0.0),
        ("encoder_decoder", [6, 8, 7], 1.0),
    ],
)
def test_wide_beam_search_returns_the_exhaustive_best(
    name: str, prompt: list[int], alpha: float
) -> None:
    vocab = 6 + 3  # specials + 3 symbols
    model = make(name, vocab=vocab, d_model=16, n_layers=1, tie_embeddings=False)
    inputs = torch.tensor([prompt])
    max_new = 3
    expected, _ = exhaustive_best(model, inputs, max_new, alpha)
    cfg = DecodeConfig(strategy="beam", beam_size=200, length_penalty=alpha, max_new_tokens=max_new)
    out = generate(model, inputs, cfg)[0].tolist()
    assert [t for t in out if t != PAD] == expected


def test_sampling_with_top_k_one_equals_greedy() -> None:
    model = make("decoder_only")
    prompts = left_padded_prompts()
    greedy = generate(model, prompts, DecodeConfig(strategy="greedy", max_new_tokens=8))
    sampled = generate(
        model, prompts, DecodeConfig(strategy="sample", top_k=1, max_new_tokens=8),
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert torch.equal(greedy, sampled)


def test_top_p_keeps_the_smallest_nucleus() -> None:
    logits = torch.tensor([[0.05, 0.5, 0.15, 0.3]]).log()
    kept = {p: (filter_logits(logits, None, p) > float("-inf"))[0].tolist()
            for p in (0.4, 0.7, 0.8, 0.9, 1.0)}  # fmt: skip
    assert kept[0.4] == [False, True, False, False]  # 0.5 ≥ 0.4 alone
    assert kept[0.7] == [False, True, False, True]  # 0.5 + 0.3 ≥ 0.7
    assert kept[0.8] == [False, True, False, True]  # 0.5 + 0.3 ≥ 0.8: nothing more
    assert kept[0.9] == [False, True, True, True]
    assert kept[1.0] == [True, True, True, True]


def nucleus(probs: list[float], p: float) -> list[bool]:
    return (filter_logits(torch.tensor([probs]).log(), None, p) > float("-inf"))[0].tolist()


EXACT = [0.0625, 0.5, 0.1875, 0.25]  # sixteenths: every partial sum is exact in binary


def test_top_p_stops_at_the_token_whose_mass_reaches_p_exactly() -> None:
    # Holtzman et al. 2020, §3.1: the smallest V⁽ᵖ⁾ with Σ P(x) ≥ p; 0.5 + 0.25 is 0.75
    assert nucleus(EXACT, 0.75) == [False, True, False, True]


def test_top_p_keeps_the_token_whose_mass_crosses_p() -> None:
    assert nucleus(EXACT, 0.7) == [False, True, False, True]  # 0.5 < 0.7 ≤ 0.75
    assert nucleus(EXACT, 0.8) == [False, True, True, True]  # 0.75 < 0.8 ≤ 0.9375


def test_top_k_keeps_the_k_most_likely_tokens() -> None:
    logits = torch.tensor([[0.1, 3.0, -1.0, 2.0, 0.5]])
    kept = filter_logits(logits, 2, None) > float("-inf")
    assert kept[0].tolist() == [False, True, False, True, False]


@pytest.mark.parametrize("seed", range(3))
def test_sampling_at_temperature_near_zero_is_greedy(seed: int) -> None:
    model = make("encoder_decoder")
    src = sources()
    greedy = generate(model, src, DecodeConfig(strategy="greedy", max_new_tokens=8))
    cold = generate(
        model, src, DecodeConfig(strategy="sample", temperature=1e-4, max_new_tokens=8),
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    assert torch.equal(greedy, cold)


def test_higher_temperature_flattens_the_sampling_distribution() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    entropy = [
        float(-(p * p.log()).sum()) for p in ((logits / t).softmax(-1) for t in (0.1, 1.0, 10.0))
    ]
    assert entropy[0] < entropy[1] < entropy[2] < math.log(3)


def test_generation_never_emits_pad_bos_or_mask() -> None:
    model = make("decoder_only")
    biased = torch.nn.Linear(32, VOCAB)  # the same projection, banned tokens made most likely
    with torch.no_grad():
        biased.weight.copy_(model.lm_head.weight)
        biased.bias.zero_()
        biased.bias[list(NEVER_GENERATED)] = 100.0
    model.lm_head = biased
    out = generate(
        model, left_padded_prompts(),
        DecodeConfig(strategy="sample", max_new_tokens=10), eos_id=None,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert not set(out.flatten().tolist()) & {PAD, BOS, MASK}


def test_cache_appends_in_place_and_grows_past_its_buffer() -> None:
    from attnlab.inference.caches import DynamicKV

    generator = torch.Generator().manual_seed(0)
    steps = [torch.randn(2, 3, n, 4, generator=generator) for n in (5, *[1] * 150, 7)]
    cache = DynamicKV()
    for i, new in enumerate(steps):
        k, v = cache.update(new, -new)[:2]
        expected = torch.cat(steps[: i + 1], dim=2)
        assert torch.equal(k, expected) and torch.equal(v, -expected)
    buffer = cache.buffers[0]
    assert buffer.size(2) >= 162 and cache.past.k.data_ptr() == buffer.data_ptr()  # a view


def test_reordered_cache_keeps_appending_to_the_selected_rows() -> None:
    from attnlab.inference.caches import DecodingCache, DynamicKV, LayerCaches

    generator = torch.Generator().manual_seed(0)
    cache = DecodingCache([LayerCaches(DynamicKV())])
    layer = cache.layers[0].self_attn
    history = [torch.randn(3, 2, n, 4, generator=generator) for n in (4, 1, 1)]
    for new in history:
        layer.update(new, new)
    index = torch.tensor([2, 2, 0, 1])  # beam search may repeat and drop rows
    cache.reorder(index)
    new = torch.randn(4, 2, 1, 4, generator=generator)
    k = layer.update(new, new).k
    expected = torch.cat([torch.cat(history, dim=2).index_select(0, index), new], dim=2)
    assert torch.equal(k, expected)


def test_long_cached_decoding_matches_recomputation() -> None:
    # 200 tokens: the cache buffer grows several times on the way
    model = make("decoder_only", max_len=256)
    prompt = left_padded_prompts()
    config = dict(strategy="greedy", max_new_tokens=200)
    cached = generate(model, prompt, DecodeConfig(**config, use_cache=True), eos_id=None)
    plain = generate(model, prompt, DecodeConfig(**config, use_cache=False), eos_id=None)
    assert cached.shape[1] == 200 and torch.equal(cached, plain)
