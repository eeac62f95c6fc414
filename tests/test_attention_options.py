"""The modern block axes: grouped-query attention, QK-norm, parallel blocks, GPT-2's GELU.

Each is checked against a hand computation or an equivalent model: GQA against
multi-head attention whose key/value heads are repeated (Ainslie et al. 2023, §2),
QK-norm by its invariance to the scale of W_Q and W_K, the parallel block against
x + Attn(LN(x)) + FFN(LN(x)) (PaLM §2), gelu_tanh against its formula.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.inference import start_decoding
from attnlab.models import ModelConfig, build_model
from attnlab.models.flops import transformer_flops
from attnlab.nn import kernels
from attnlab.nn.attention import AttentionInputs, MultiHeadAttention
from attnlab.nn.feedforward import FEEDFORWARDS, gelu_tanh
from attnlab.nn.layers import ParallelLayer
from composed_runs import train_fast
from decoding_inputs import left_padded_prompts, sources, step_logits

VOCAB = 20


def make(name: str, **overrides: object) -> torch.nn.Module:
    cfg = {"name": name, "vocab_size": VOCAB, "d_model": 32, "n_heads": 4, "n_layers": 2,
           "dropout": 0.0, **overrides}  # fmt: skip
    return build_model(ModelConfig.from_dict(cfg)).eval()


def test_gelu_tanh_is_the_tanh_approximation() -> None:
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    formula = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    torch.testing.assert_close(gelu_tanh(x), formula)
    assert not torch.allclose(gelu_tanh(x), torch.nn.functional.gelu(x))  # exact erf form
    assert "gelu_tanh" in FEEDFORWARDS


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_query_attention_equals_mha_with_repeated_kv_heads(n_kv_heads: int) -> None:
    torch.manual_seed(0)
    d, H = 32, 4
    gqa = MultiHeadAttention(d, H, impl="math", n_kv_heads=n_kv_heads).double()
    mha = MultiHeadAttention(d, H, impl="math").double()
    d_head, group = d // H, H // n_kv_heads
    with torch.no_grad():
        wq, wk, wv = gqa.in_proj.weight.split(gqa.split_sizes)
        bq, bk, bv = gqa.in_proj.bias.split(gqa.split_sizes)

        def repeat(t: torch.Tensor) -> torch.Tensor:  # each K/V head serves `group` query heads
            return (
                t.view(n_kv_heads, d_head, *t.shape[1:]).repeat_interleave(group, 0).flatten(0, 1)
            )

        mha.in_proj.weight.copy_(torch.cat([wq, repeat(wk), repeat(wv)]))
        mha.in_proj.bias.copy_(torch.cat([bq, repeat(bk), repeat(bv)]))
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(2, 5, d, dtype=torch.float64)
    causal = AttentionInputs(is_causal=True)
    torch.testing.assert_close(gqa(x, causal), mha(x, causal))
    assert gqa.in_proj.weight.shape == (d + 2 * n_kv_heads * d_head, d)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
@pytest.mark.parametrize("case", ["decoding step, padding mask and head bias", "no mask"])
def test_grouped_attention_reads_kv_heads_without_copying_them(
    n_kv_heads: int, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fused path folds each group of query heads into query rows of its K/V head;
    it equals the explicit path, which repeats the K/V heads, and never repeats them."""
    torch.manual_seed(0)
    d, H, B = 32, 4, 2
    fused = MultiHeadAttention(d, H, impl="sdpa", n_kv_heads=n_kv_heads).double().eval()
    explicit = MultiHeadAttention(d, H, impl="math", n_kv_heads=n_kv_heads).double().eval()
    explicit.load_state_dict(fused.state_dict())
    if case == "no mask":
        x, inputs = torch.randn(B, 5, d, dtype=torch.float64), AttentionInputs()
    else:  # one new token against 6 cached keys, the first key of row 0 padding
        x, Tk = torch.randn(B, 1, d, dtype=torch.float64), 6
        mask = torch.ones(B, 1, 1, Tk, dtype=torch.bool)
        mask[0, ..., 0] = False
        bias = torch.randn(1, H, 1, Tk, dtype=torch.float64)
        inputs = AttentionInputs(mask=mask, bias=bias)
    memory = torch.randn(B, 6, d, dtype=torch.float64) if case != "no mask" else None
    expected = explicit(x, inputs, memory=memory)

    def no_repeat(*args: object) -> None:
        raise AssertionError("K/V heads repeated")

    monkeypatch.setattr(kernels, "repeat_kv", no_repeat)
    torch.testing.assert_close(fused(x, inputs, memory=memory), expected)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_the_kv_cache_keeps_only_the_kv_heads(n_kv_heads: int) -> None:
    full, grouped = make("decoder_only"), make("decoder_only", n_kv_heads=n_kv_heads)
    sizes = {}
    for name, model in (("mha", full), ("gqa", grouped)):
        state = start_decoding(model, left_padded_prompts(), use_cache=True)
        state.logits()
        cache = state.cache.layers[0].self_attn.past
        sizes[name] = cache.k.numel() + cache.v.numel()
        assert cache.k.size(1) == (n_kv_heads if name == "gqa" else 4)
    assert sizes["gqa"] * 4 == sizes["mha"] * n_kv_heads  # the cache shrinks by H / H_kv


@pytest.mark.parametrize("name,options", [
    (name, options) for name in ("decoder_only", "encoder_decoder")
    for options in ({"n_kv_heads": 1}, {"n_kv_heads": 2, "qk_norm": True}, {"block": "parallel"},
                    {"n_kv_heads": 2, "pos": "alibi"}, {"n_kv_heads": 1, "pos": "t5_relative"},
                    {"attn_impl": "math", "attn_softcap": 1.0, "n_kv_heads": 2},
                    {"attn_impl": "flex", "attn_softcap": 1.0, "pos": "alibi"},
                    {"final_softcap": 0.5},
                    {"pos": "rope", "rope_theta": 500.0, "rotary_fraction": 0.5})
    if not (name == "encoder_decoder" and "block" in options)  # refused: no cross-attention
])  # fmt: skip
def test_cached_decoding_equals_recomputation(name: str, options: dict) -> None:
    model = make(name, **options)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    torch.testing.assert_close(step_logits(model, inputs, True), step_logits(model, inputs, False),
                               atol=1e-5, rtol=1e-5)  # fmt: skip


def test_qk_norm_makes_attention_invariant_to_the_scale_of_wq_and_wk() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, impl="math", qk_norm=True).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    before = attn(x, AttentionInputs())
    with torch.no_grad():
        attn.q_proj.weight.mul_(50.0)
        attn.in_proj.bias[:64].mul_(50.0)  # W_Q and W_K rows with their biases
        attn.k_proj.weight.mul_(50.0)
    # invariant up to LayerNorm's ε (1e-5 next to the variance)
    torch.testing.assert_close(attn(x, AttentionInputs()), before, atol=1e-4, rtol=0)
    plain = MultiHeadAttention(32, 4, impl="math").double()
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "norm" not in k})
    reference = MultiHeadAttention(32, 4, impl="math").double()
    reference.load_state_dict(plain.state_dict())
    with torch.no_grad():  # the same model without QK-norm, before the scaling
        reference.q_proj.weight.div_(50.0)
        reference.in_proj.bias[:64].div_(50.0)
        reference.k_proj.weight.div_(50.0)
    change = (plain(x, AttentionInputs()) - reference(x, AttentionInputs())).abs().max()
    assert change > 1e-2  # without it, the scale changes the softmax


def test_the_parallel_block_adds_attention_and_ffn_of_one_norm() -> None:
    model = make("decoder_only", block="parallel", norm="pre")
    layer = model.decoder.layers[0]
    assert isinstance(layer, ParallelLayer)
    x = torch.randn(2, 5, 32)
    inputs = AttentionInputs(is_causal=True)
    h = layer.norm(x)
    torch.testing.assert_close(layer(x, inputs), x + layer.self_attn(h, inputs) + layer.ffn(h))


@pytest.mark.parametrize(
    "options,needle",
    [
        ({"name": "decoder_only", "n_kv_heads": 3}, "model.n_kv_heads=3 must divide"),
        ({"name": "decoder_only", "block": "parallel", "norm": "post"}, "model.norm=post"),
        ({"name": "encoder_decoder", "block": "parallel"}, "cross-attention"),
        ({"name": "decoder_only", "block": "fused"}, "model.block=fused"),
    ],
)
def test_bad_options_are_one_line(options: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("=", "=").replace(".", r"\.")):
        ModelConfig.from_dict({"vocab_size": VOCAB, "n_heads": 4, **options})


def test_gqa_shrinks_the_counted_projection_flops() -> None:
    mha = ModelConfig(name="decoder_only", d_model=64, n_heads=4, vocab_size=10)
    mqa = ModelConfig(name="decoder_only", d_model=64, n_heads=4, n_kv_heads=1, vocab_size=10)
    saved = transformer_flops(mha, 10, 2) - transformer_flops(mqa, 10, 2)
    assert saved == 2 * 10 * 2 * 2 * 64 * (64 - 16)  # layers · tokens · 2 · (W_K + W_V) rows


@pytest.mark.parametrize("overrides", [
    ["model=decoder_only", "model.n_kv_heads=1", "model.ffn=gelu_tanh"],
    ["model=encoder_only", "model.block=parallel", "model.qk_norm=true"],
    ["model=decoder_only", "model.attn_impl=math", "model.attn_softcap=50"],
    ["model=encoder_decoder", "model.final_softcap=30", "data=reverse"],
    ["model=decoder_only", "task.z_loss=1e-4", "data=reverse"],
    ["model=decoder_only", "model.pos=rope", "model.rope_theta=500000",
     "model.rotary_fraction=0.5"],
])  # fmt: skip
def test_the_options_train_through_the_configs(overrides: list[str], tmp_path) -> None:
    result = train_fast(["data=majority", *overrides], tmp_path)  # an override's data wins
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])


def test_xl_relative_scores_are_the_papers_four_terms() -> None:
    """A_ij = q_iᵀk_j + q_iᵀW_R R_{i−j} + uᵀk_j + vᵀW_R R_{i−j}, all over √d (Dai et al. §3.3),
    computed term by term with explicit loops and compared with the recorded weights."""
    from attnlab.nn.positions import XLRelativePositions

    torch.manual_seed(0)
    d, H, T = 16, 2, 5
    pos = XLRelativePositions(d, H, 64, causal=True).double()
    torch.nn.init.normal_(pos.u)
    torch.nn.init.normal_(pos.v)
    attn = MultiHeadAttention(d, H, impl="math").double()
    attn.record_weights = True
    x = torch.randn(1, T, d, dtype=torch.float64)
    positions = torch.arange(T)
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    inputs = AttentionInputs(mask=mask, scores=lambda q, k: pos.scores(q, k, positions, positions))
    attn(x, inputs)
    q, k, _ = (t.view(T, H, d // H).transpose(0, 1) for t in attn.in_proj(x[0]).split(d, -1))
    expected = torch.full((H, T, T), float("-inf"), dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(i + 1):
                r = pos.r_proj(pos.encoding(torch.tensor([i - j])).double())[0].view(H, -1)[
                    h
                ]  # W_R R
                a, b = q[h, i] @ k[h, j], q[h, i] @ r
                c, e = pos.u[h] @ k[h, j], pos.v[h] @ r
                expected[h, i, j] = (a + b + c + e) / math.sqrt(d // H)
    torch.testing.assert_close(attn.last_weights[0], expected.softmax(-1))
