"""model.attention kinds: each efficient path equals its explicit reference, and the
patterns, decoding, causality and padding behave as the papers define them."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.model_config import ModelConfig
from attnlab.nn.attention_kinds import (
    ATTENTION_KINDS,
    AttentionKind,
    LinearAttention,
    reference_attention,
)

KINDS = ATTENTION_KINDS.names()
# mamba2 is a whole token mixer (tests/test_mamba2.py), not a kernel of q, k and v
KERNEL_KINDS = [name for name in KINDS if not getattr(ATTENTION_KINDS.get(name), "mixer", False)]
DECODING_KINDS = [name for name in KERNEL_KINDS if ATTENTION_KINDS.get(name).causal_ok]
D_HEAD = 8


def make(name: str, causal: bool, seed: int = 0, **overrides: int) -> AttentionKind:
    keys = dict(d_model=2 * D_HEAD, n_heads=2, window=16, attn_block=8, n_global=2,
                linformer_k=32, max_len=300)  # fmt: skip
    cfg = ModelConfig(**{**keys, **overrides})
    torch.manual_seed(0)
    kind = ATTENTION_KINDS.get(name)(cfg, causal).double()
    kind.seed = seed  # bigbird's random blocks
    return kind


def qkv(T: int, Tq: int | None = None, seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 2, T if Tq is None else Tq, D_HEAD)] + [(2, 2, T, D_HEAD)] * 2
    return tuple(torch.randn(s, generator=g, dtype=torch.float64) for s in shapes)


def padding(T: int) -> torch.Tensor:
    """Row 0 right-padded, row 1 left-padded (so early queries of a window see no key)."""
    key_real = torch.ones(2, T, dtype=torch.bool)
    key_real[0, T - T // 4 :] = False
    key_real[1, : (T + 2) // 3] = False
    return key_real


def test_every_kind_is_registered() -> None:
    assert KINDS == ["bigbird", "differential", "full", "gated_deltanet", "hybrid", "linear",
                     "linformer",
                     "longformer", "mamba2", "mla", "sigmoid", "sliding_window"]


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("T", [1, 7, 130, 257])
@pytest.mark.parametrize(
    ("name", "causal"),
    [(n, c) for n in KERNEL_KINDS for c in (True, False) if not c or n in DECODING_KINDS],
)  # linformer has no causal form (test_linformer_cannot_be_causal)
def test_efficient_path_equals_reference(name: str, causal: bool, T: int, padded: bool) -> None:
    kind, (q, k, v) = make(name, causal), qkv(T)
    key_real = padding(T) if padded else None
    expected = reference_attention(kind, q, k, v, key_real)
    torch.testing.assert_close(kind.attend(q, k, v, key_real), expected, atol=1e-10, rtol=1e-10)


def test_linformer_cannot_be_causal() -> None:
    with pytest.raises(ConfigError, match="model.attention=linformer .* cannot be causal"):
        make("linformer", causal=True)


def test_sliding_window_mask_by_hand() -> None:
    causal = make("sliding_window", True, window=2).mask(6, 6)
    bidirectional = make("sliding_window", False, window=2).mask(6, 6)
    band = torch.tensor([[int(i - j in (0, 1)) for j in range(6)] for i in range(6)]).bool()
    assert torch.equal(causal, band)  # i − 2 < j ≤ i: itself and the previous key
    assert torch.equal(bidirectional, band | band.T)  # |i − j| < 2: tridiagonal


def test_longformer_global_rows_and_columns_are_all_true() -> None:
    mask = make("longformer", False, window=2, n_global=2).mask(10, 10)
    assert mask[:2].all() and mask[:, :2].all()
    assert not mask[5, 8] and mask[5, 6]
    causal = make("longformer", True, window=2, n_global=2).mask(10, 10)
    assert torch.equal(causal, mask.tril())


def test_bigbird_pattern_is_seeded_and_keeps_the_diagonal_blocks() -> None:
    mask = make("bigbird", False, seed=0).mask(128, 128)
    assert torch.equal(mask, make("bigbird", False, seed=0).mask(128, 128))
    assert not torch.equal(mask, make("bigbird", False, seed=1).mask(128, 128))
    blocks = mask.view(16, 8, 16, 8).all(3).all(1)  # (query block, key block) fully visible
    assert blocks.diagonal().all() and blocks[:, 0].all() and blocks[0].all()
    assert (blocks.sum(1)[1:] <= 4 + 2).all()  # window 3 + global + n_random=2
    causal = make("bigbird", True, seed=0).mask(128, 128)
    assert not causal.triu(1).any()
    lower = torch.ones(8, 8, dtype=torch.bool).tril()
    assert all(torch.equal(causal[b : b + 8, b : b + 8], lower) for b in range(0, 128, 8))


@pytest.mark.parametrize(
    ("name", "causal"),
    [(n, c) for n in KERNEL_KINDS for c in (True, False) if not c or n in DECODING_KINDS],
)  # linformer has no causal form (its ConfigError has its own test)
def test_one_query_at_an_offset_equals_its_row_of_the_full_computation(
    name: str, causal: bool
) -> None:
    kind, (q, k, v) = make(name, causal), qkv(70)
    key_real = padding(70)
    full = kind.attend(q, k, v, key_real)
    for t in (0, 5, 8, 31, 69):
        seen = t + 1 if causal else 70  # a decoding step has the keys so far in its cache
        step = kind.attend(q[:, :, t : t + 1], k[:, :, :seen], v[:, :, :seen],
                           key_real[:, :seen], q_offset=t)  # fmt: skip
        torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-10, rtol=1e-10)


def test_sliding_window_decoding_needs_only_cache_window_keys() -> None:
    kind, (q, k, v) = make("sliding_window", True), qkv(70)
    full, w = kind.attend(q, k, v), kind.cache_window
    assert w == 16 and make("full", True).cache_window is None
    for t in (20, 69):  # the cache trimmed to its last w keys; the query is its last position
        kept = slice(t + 1 - w, t + 1)
        step = kind.attend(q[:, :, t : t + 1], k[:, :, kept], v[:, :, kept], q_offset=w - 1)
        torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-10, rtol=1e-10)


def test_linear_state_decoding_equals_the_causal_form_token_by_token() -> None:
    kind, (q, k, v) = make("linear", True), qkv(150)
    assert isinstance(kind, LinearAttention)
    key_real = padding(150)
    full = kind.attend(q, k, v, key_real)
    S, Z = kind.linear_state(k[:, :, :0], v[:, :, :0], key_real[:, :0])
    for t in range(150):
        dS, dZ = kind.linear_state(k[:, :, t : t + 1], v[:, :, t : t + 1], key_real[:, t : t + 1])
        S, Z = S + dS, Z + dZ
        step = kind.attend_with_state(q[:, :, t : t + 1], S, Z)
        torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-10, rtol=1e-10)


def test_linformer_is_eq_7_of_the_paper() -> None:
    kind, (q, k, v) = make("linformer", False), qkv(130)
    key_real = padding(130)
    real = key_real[:, None, :, None].double()
    E, F = kind.E[:, :130].detach().double(), kind.F[:, :130].detach().double()
    scores = q @ (E @ (k * real)).transpose(-2, -1) / math.sqrt(D_HEAD)
    expected = torch.softmax(scores, dim=-1) @ (F @ (v * real))
    torch.testing.assert_close(kind.attend(q, k, v, key_real), expected)
    assert kind.has_params and sum(p.numel() for p in kind.parameters()) == 2 * 32 * 300


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_sigmoid_attention_by_hand(causal: bool) -> None:
    """out_i = Σ_j σ(q_i·k_j/√d − log n) v_j over the keys query i sees, unnormalised
    (Ramapuram et al. 2025, §2), n = model.max_len = 300; padded keys count 0."""
    kind, (q, k, v), key_real = make("sigmoid", causal), qkv(6), padding(6)
    expected = torch.zeros_like(q)
    for b, h, i in itertools.product(range(2), range(2), range(6)):
        for j in range(6):
            if key_real[b, j] and (j <= i or not causal):
                score = float(q[b, h, i] @ k[b, h, j]) / math.sqrt(D_HEAD) - math.log(300)
                expected[b, h, i] += v[b, h, j] / (1 + math.exp(-score))
    torch.testing.assert_close(kind.attend(q, k, v, key_real), expected)
    torch.testing.assert_close(kind.reference(q, k, v, key_real), expected)


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_differential_attention_is_the_papers_computation_pair_by_pair(
    causal: bool, padded: bool
) -> None:
    """Ye et al. 2025, §2.1, step by step as their multihead_diffattn.py: pair i takes
    heads 2i, 2i + 1 as (Q₁, K₁), (Q₂, K₂) and their values side by side as V (2d);
    (A₁ − λA₂)V, RMSNorm over the 2d outputs, × (1 − λ_init); λ_init at layer 3."""
    kind = make("differential", causal, d_model=4 * D_HEAD, n_heads=4)
    kind.layer_number = 3
    with torch.no_grad():
        kind.head_norm.weight.uniform_(0.5, 1.5)  # a learned scale, not the identity
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 9, D_HEAD, generator=g, dtype=torch.float64) for _ in range(3))
    key_real = padding(9) if padded else torch.ones(2, 9, dtype=torch.bool)
    lambda_init = 0.8 - 0.6 * math.exp(-0.3 * 2)
    lq1, lk1, lq2, lk2 = (p.detach() for p in (kind.lambda_q1, kind.lambda_k1,
                                               kind.lambda_q2, kind.lambda_k2))  # fmt: skip
    lam = math.exp(float(lq1 @ lk1)) - math.exp(float(lq2 @ lk2)) + lambda_init
    allowed = key_real[:, None, :] & (torch.ones(9, 9).tril().bool() if causal else True)

    def softmax_map(head: int) -> torch.Tensor:  # (B, T, T), rows without keys all 0
        scores = q[:, head] @ k[:, head].transpose(-2, -1) / math.sqrt(D_HEAD)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        return torch.nan_to_num(weights)

    expected = torch.empty_like(q)
    for i in range(2):
        values = torch.cat([v[:, 2 * i], v[:, 2 * i + 1]], dim=-1)  # (B, T, 2d)
        head = (softmax_map(2 * i) - lam * softmax_map(2 * i + 1)) @ values
        rms = torch.sqrt(head.pow(2).mean(-1, keepdim=True) + 1e-5)
        head = head / rms * kind.head_norm.weight.detach() * (1 - lambda_init)
        expected[:, 2 * i], expected[:, 2 * i + 1] = head[..., :D_HEAD], head[..., D_HEAD:]
    key_real = key_real if padded else None
    torch.testing.assert_close(kind.reference(q, k, v, key_real), expected)
    torch.testing.assert_close(kind.attend(q, k, v, key_real), expected)


@pytest.mark.parametrize("name", DECODING_KINDS)
def test_future_keys_do_not_change_earlier_outputs(name: str) -> None:
    kind, (q, k, v) = make(name, True), qkv(130)
    before = kind.attend(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 77:], v2[:, :, 77:] = 5.0, -5.0
    after = kind.attend(q, k2, v2)
    torch.testing.assert_close(after[:, :, :77], before[:, :, :77], atol=1e-12, rtol=0)
    assert not torch.allclose(after[:, :, 77:], before[:, :, 77:])


@pytest.mark.parametrize(
    ("name", "causal"),
    [(n, c) for n in KERNEL_KINDS for c in (True, False) if not c or n in DECODING_KINDS],
)  # linformer has no causal form (its ConfigError has its own test)
def test_padded_keys_do_not_change_outputs(name: str, causal: bool) -> None:
    kind, (q, k, v), key_real = make(name, causal), qkv(130), padding(130)
    junk = (~key_real)[:, None, :, None]
    before = kind.attend(q, k, v, key_real)
    after = kind.attend(q, k.masked_fill(junk, 7.0), v.masked_fill(junk, -7.0), key_real)
    torch.testing.assert_close(after, before, atol=1e-12, rtol=0)


def test_rows_without_keys_give_zero_output_and_finite_gradients() -> None:
    kind, (q, k, v) = make("sliding_window", True), qkv(130)
    key_real = padding(130)  # row 1: the first 44 keys are padding, w = 16
    q.requires_grad_(True)
    out = kind.attend(q, k, v, key_real)
    assert torch.all(out[1, :, :44] == 0) and out[1, :, 44:].abs().sum() > 0
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_sliding_window_never_builds_a_sequence_by_sequence_matrix() -> None:
    """At T = 16384 a (T, T) float32 score matrix alone would take 1 GiB."""
    T = 16384
    kind = ATTENTION_KINDS.get("sliding_window")(ModelConfig(d_model=16, n_heads=1), causal=True)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, 16, generator=g) for _ in range(3))
    with torch.profiler.profile(profile_memory=True) as profile:
        out = kind.attend(q, k, v)
    largest = max(event.cpu_memory_usage for event in profile.key_averages())
    assert largest < T * T * 4 // 8  # the scores are (T, block + w − 1), not (T, T)
    for first in (0, T - 100):  # spot-check rows against the explicit mask, 100 at a time
        rows = reference_attention(kind, q[:, :, first : first + 100], k, v, q_offset=first)
        torch.testing.assert_close(out[:, :, first : first + 100], rows)


# --- linear attention with RoPE: the rotation acts on the features (RoFormer §3.4.3) ---


def rotation(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of RoPE at ``positions`` for heads of D_HEAD, as the stack builds them."""
    from attnlab.nn.positions import RotaryPositions

    rope = RotaryPositions(2 * D_HEAD, 2, 300, causal=True)
    return tuple(t.double() for t in rope.rotary(positions))  # type: ignore[return-value]


def roformer_eq_19(q, k, v, causal: bool, key_real=None) -> torch.Tensor:  # noqa: ANN001
    """Eq. 19 of RoFormer by hand: 2×2 rotation matrices R_m of angle m·10000^(−2i/d),
    Σ_n (R_m φ(q_m))ᵀ(R_n φ(k_n)) v_n / Σ_n φ(q_m)ᵀφ(k_n), one (m, n) at a time."""

    def rotate(x: torch.Tensor, m: int) -> torch.Tensor:
        out = x.clone()
        for i in range(D_HEAD // 2):
            angle = m * 10000.0 ** (-2 * i / D_HEAD)
            c, s = math.cos(angle), math.sin(angle)
            R = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
            out[..., 2 * i : 2 * i + 2] = x[..., 2 * i : 2 * i + 2] @ R.T
        return out

    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    B, H, T, _ = q.shape
    out = torch.zeros_like(v)
    for m in range(T):
        numerator, denominator = torch.zeros_like(v[:, :, 0]), torch.zeros(B, H, 1).double()
        for n in range(m + 1 if causal else T):
            real = 1.0 if key_real is None else key_real[:, n].double()[:, None, None]
            weight = (rotate(phi(q[:, :, m]), m) * rotate(phi(k[:, :, n]), n)).sum(-1, keepdim=True)
            numerator += real * weight * v[:, :, n]
            denominator += real * (phi(q[:, :, m]) * phi(k[:, :, n])).sum(-1, keepdim=True)
        out[:, :, m] = numerator / denominator.clamp_min(1e-300)  # no key: output 0
    return out


@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_linear_attention_with_rope_is_eq_19_of_roformer(causal: bool, padded: bool) -> None:
    kind, (q, k, v) = make("linear", causal), qkv(20)
    key_real = padding(20) if padded else None
    rope = rotation(torch.arange(20))
    expected = roformer_eq_19(q, k, v, causal, key_real)
    torch.testing.assert_close(kind.reference(q, k, v, key_real, rope=rope), expected)
    torch.testing.assert_close(kind.attend(q, k, v, key_real, rope=rope), expected)


@pytest.mark.parametrize("T", [7, 130, 257])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_linear_attention_with_rope_chunked_equals_reference(causal: bool, T: int) -> None:
    """Chunks of 64: the denominator inside a chunk is no longer its scores' row sum."""
    kind, (q, k, v), key_real = make("linear", causal), qkv(T), padding(T)
    rope = rotation(torch.arange(T))
    expected = kind.reference(q, k, v, key_real, rope=rope)
    torch.testing.assert_close(kind.attend(q, k, v, key_real, rope=rope), expected)
    weights = kind.features(q, rope)[0] @ kind.features(k, rope)[0].transpose(-2, -1)
    assert (weights < 0).any()  # rotated numerator weights can be negative; the output is finite
    assert torch.isfinite(expected).all()


@pytest.mark.parametrize("impl", ["sdpa", "math"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_linear_attention_with_rope_depends_only_on_relative_positions(
    causal: bool, impl: str
) -> None:
    """Through the layer: the same sequence placed at positions 0… or 37… gives the same
    output, since R_mᵀR_n = R_{n−m} (to RoPE's float32 angles). Rotating q and k before φ
    (not the features) fails this."""
    from attnlab.nn.attention import MultiHeadAttention
    from attnlab.nn.kernels import AttentionInputs

    torch.manual_seed(0)
    layer = MultiHeadAttention(2 * D_HEAD, 2, impl=impl, kind=make("linear", causal)).double()
    x = torch.randn(2, 90, 2 * D_HEAD, dtype=torch.float64)
    at_zero = layer(x, AttentionInputs(rope=rotation(torch.arange(90))))
    shifted = layer(x, AttentionInputs(rope=rotation(torch.arange(37, 127))))
    torch.testing.assert_close(shifted, at_zero, atol=1e-6, rtol=1e-5)
    unrotated = layer(x, AttentionInputs())
    assert not torch.allclose(unrotated, at_zero)  # the rotation is applied at all


def test_linear_state_decoding_with_rope_equals_the_causal_form_token_by_token() -> None:
    """S sums the rotated φ(K_j)V_jᵀ, Z the unrotated φ(K_j) (the two running sums)."""
    kind, (q, k, v), key_real = make("linear", True), qkv(150), padding(150)
    rope = rotation(torch.arange(150))
    full = kind.attend(q, k, v, key_real, rope=rope)
    S, Z = kind.linear_state(k[:, :, :0], v[:, :, :0], key_real[:, :0], rope=None)
    for t in range(150):
        now = slice(t, t + 1)
        at_t = tuple(r[:, :, now] for r in rope)
        dS, dZ = kind.linear_state(k[:, :, now], v[:, :, now], key_real[:, now], at_t)
        S, Z = S + dS, Z + dZ
        step = kind.attend_with_state(q[:, :, t : t + 1], S, Z, at_t)
        torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-10, rtol=1e-10)
