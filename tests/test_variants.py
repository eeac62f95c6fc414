"""Position schemes, prefix-LM attention, and every model option through the real configs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnlab.models import ModelConfig, build_model
from attnlab.nn.attention import apply_rotary
from attnlab.nn.positions import RotaryPositions, T5RelativePositions, alibi_slopes
from composed_runs import train_fast


def rotary_scores(q: torch.Tensor, k: torch.Tensor, q_pos: int, k_pos: int) -> torch.Tensor:
    """Per-head q·k after rotating q to position q_pos and k to k_pos; q, k: (1, H, 1, d)."""
    rope = RotaryPositions(d_model=32, n_heads=4, max_len=512, causal=True)
    q_rot = apply_rotary(q, *rope.rotary(torch.tensor([q_pos])))
    k_rot = apply_rotary(k, *rope.rotary(torch.tensor([k_pos])))
    return (q_rot * k_rot).sum(-1)


@pytest.mark.parametrize("shift", [1, 7, 100])
def test_rope_scores_depend_only_on_relative_offset(shift: int) -> None:
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8)
    for q_pos, k_pos in [(5, 2), (3, 3), (0, 9)]:
        torch.testing.assert_close(
            rotary_scores(q, k, q_pos, k_pos), rotary_scores(q, k, q_pos + shift, k_pos + shift),
            atol=1e-4, rtol=1e-4,
        )  # fmt: skip
    assert not torch.allclose(rotary_scores(q, k, 5, 2), rotary_scores(q, k, 5, 3))


def test_alibi_slopes_for_eight_heads_are_powers_of_one_half() -> None:
    expected = torch.tensor([2.0**-i for i in range(1, 9)])
    torch.testing.assert_close(alibi_slopes(8), expected)


def test_alibi_slopes_for_a_non_power_of_two_interleave_the_next_power() -> None:
    # Press et al. 2022, §3: 12 heads = the 8-head slopes, then every other 16-head slope
    sixteen = [2.0 ** (-0.5 * i) for i in range(1, 17)]
    expected = [2.0**-i for i in range(1, 9)] + sixteen[0::2][:4]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected))
    assert alibi_slopes(12)[8:].tolist() == pytest.approx([2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5])


def buckets(causal: bool, relative: list[int]) -> list[int]:
    t5 = T5RelativePositions(d_model=32, n_heads=4, max_len=512, causal=causal)
    return t5.bucket(torch.tensor(relative)).tolist()


def test_t5_causal_buckets_put_every_future_key_with_the_query_itself() -> None:
    assert set(buckets(True, [0, 1, 5, 300])) == {0}


def test_t5_bidirectional_buckets_tell_past_from_future() -> None:
    past, future = buckets(False, [-1, -4, -40]), buckets(False, [1, 4, 40])
    assert not set(past) & set(future)
    assert buckets(False, [0]) == [0]


@pytest.mark.parametrize("causal", [True, False])
def test_t5_buckets_grow_monotonically_with_distance(causal: bool) -> None:
    t5 = T5RelativePositions(d_model=32, n_heads=4, max_len=512, causal=causal)
    distances = list(range(0, 400))
    past = buckets(causal, [-d for d in distances])
    assert past == sorted(past)
    exact = t5.num_buckets // (2 if causal else 4)
    assert past[:exact] == distances[:exact]  # small offsets get a bucket each
    assert past[-1] == (t5.num_buckets if causal else t5.num_buckets // 2) - 1  # far ones share
    if not causal:
        future = buckets(causal, distances[1:])
        assert future == sorted(future)


# Raffel et al. 2020 bidirectional buckets (32 = 16 per direction, 8 exact, log-spaced
# to 128): 8 + ⌊ln(n/8) / ln(128/8) · 8⌋ past n ≥ 8, plus 16 for keys to the right.
BIDIRECTIONAL_BUCKETS = {
    0: 0, -1: 1, 1: 17, -7: 7, 7: 23,
    -12: 9, 12: 25,  # 8 + ⌊8·ln 1.5 / ln 16⌋ = 8 + ⌊1.17⌋
    -40: 12, 40: 28,  # 8 + ⌊8·ln 5 / ln 16⌋ = 8 + ⌊4.64⌋
    -200: 15, 200: 31,  # beyond max_distance: the last bucket of each direction
}  # fmt: skip


def test_t5_bidirectional_buckets_match_a_hand_computation() -> None:
    offsets = list(BIDIRECTIONAL_BUCKETS)
    assert buckets(False, offsets) == list(BIDIRECTIONAL_BUCKETS.values())


def t5_offsets_with_distinct_bias(prefix_lm: bool) -> int:
    """How many of the offsets −3…+2 around query 3 of six tokens get a bias of their own."""
    values = dict(name="decoder_only", vocab_size=20, d_model=32, n_heads=4, n_layers=2,
                  dropout=0.0, pos="t5_relative", prefix_lm=prefix_lm)  # fmt: skip
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict(values))
    pos = torch.arange(6)  # with prefix_lm, all of it prefix
    row = model.decoder.positions.bias(pos, pos)[0, :, 3]  # (H, Tk)
    return len({tuple(row[:, j].tolist()) for j in range(6)})


def test_prefix_lm_t5_bias_tells_apart_every_offset_inside_the_prefix() -> None:
    # Mesh TF buckets both directions unless attention is fully autoregressive
    # (Unitransformer.fully_autoregressive); a prefix-LM sees keys to its right
    assert t5_offsets_with_distinct_bias(prefix_lm=True) == 6


def test_causal_decoder_t5_bias_puts_future_keys_with_the_query_itself() -> None:
    assert t5_offsets_with_distinct_bias(prefix_lm=False) == 4  # −3, −2, −1, and 0…+2


def prefix_lm_hidden(prefix_lm: bool, tokens: torch.Tensor) -> torch.Tensor:
    values = dict(name="decoder_only", vocab_size=20, d_model=32, n_heads=4, n_layers=2,
                  dropout=0.0, prefix_lm=prefix_lm)  # fmt: skip
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict(values)).eval()
    with torch.no_grad():
        return model.hidden(tokens, prefix_len=torch.tensor([6]) if prefix_lm else None)


SOURCE_SEP_TARGET = torch.tensor([[7, 8, 9, 10, 11, 3, 12, 13, 14, 15]])  # 5 source, SEP, 4 target


def test_prefix_lm_source_never_sees_the_target() -> None:
    changed = SOURCE_SEP_TARGET.clone()
    changed[0, 6:] = torch.tensor([16, 17, 18, 19])
    before, after = prefix_lm_hidden(True, SOURCE_SEP_TARGET), prefix_lm_hidden(True, changed)
    torch.testing.assert_close(before[:, :6], after[:, :6], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(before[:, 6:], after[:, 6:])


@pytest.mark.parametrize("prefix_lm", [True, False])
def test_only_prefix_lm_lets_earlier_source_positions_see_later_source(prefix_lm: bool) -> None:
    changed = SOURCE_SEP_TARGET.clone()
    changed[0, 4] = 16  # the last source token
    before = prefix_lm_hidden(prefix_lm, SOURCE_SEP_TARGET)
    after = prefix_lm_hidden(prefix_lm, changed)
    moved = not torch.allclose(before[:, :4], after[:, :4], atol=1e-5, rtol=1e-5)
    assert moved == prefix_lm


VARIANTS = [
    *[f"model.pos={pos}" for pos in
      ("rope", "alibi", "t5_relative", "sinusoidal_concat", "learned", "none")],
    "model.norm=sandwich", "model.norm=deepnorm", "model.norm=olmo2", "model.norm_type=rmsnorm",
    "model.norm_type=dyt model.dyt_alpha0=1.0", "model.ffn=swiglu", "model.ffn=geglu",
    "model.ffn=gelu", "model.ffn=relu2", "model.init=gpt2", "model.init=xavier",
    "model.zero_init_residual=true",
    "model=decoder_only model.prefix_lm=true",
    "model.tie_embeddings=output", "model.tie_embeddings=false", "model.attn_impl=math",
    "model.attention=mla model.kv_latent_rank=8 model.q_latent_rank=8",  # no RoPE: no k^R
]  # fmt: skip


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_option_trains_a_fast_dev_run_through_the_configs(
    variant: str, tmp_path: Path
) -> None:
    result = train_fast(["data=reverse", *variant.split()], tmp_path)
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])
