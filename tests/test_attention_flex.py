"""The FlexAttention path of the sparse kinds (attnlab.nn.flex): each kind's ``pattern()``
is its ``mask()``, and FlexAttention with that pattern as ``mask_mod`` equals the explicit
reference. On CPU torch computes only FlexAttention's forward pass, so these run under
no_grad; on CUDA the same code is compiled (model.attn_impl=sdpa picks it there)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn import flex
from attnlab.nn.attention_kinds import ATTENTION_KINDS, _positions, reference_attention

pytestmark = pytest.mark.skipif(not flex.available(), reason="torch without FlexAttention")

SOFTMAX_KINDS = ["full", "sliding_window", "longformer", "bigbird"]
CASES = [(n, c) for n in SOFTMAX_KINDS for c in (True, False)]
D_HEAD = 8


def make(name: str, causal: bool) -> object:
    cfg = ModelConfig(d_model=2 * D_HEAD, n_heads=2, window=16, attn_block=8, n_global=2,
                      n_random=2)  # fmt: skip
    kind = ATTENTION_KINDS.get(name)(cfg, causal)
    kind.seed = 3  # bigbird's random blocks
    return kind


def test_only_the_softmax_kinds_have_a_pattern() -> None:
    with_pattern = [n for n, cls in ATTENTION_KINDS.items() if cls.pattern is not None]
    assert sorted(with_pattern) == sorted(SOFTMAX_KINDS)


@pytest.mark.parametrize(("name", "causal"), CASES)
@pytest.mark.parametrize(("Tq", "Tk", "q_offset"), [(40, 40, 0), (1, 57, 56), (9, 70, 61)])
def test_the_pattern_rule_is_the_mask(
    name: str, causal: bool, Tq: int, Tk: int, q_offset: int
) -> None:
    kind = make(name, causal)
    expected = kind.mask(Tq, Tk, q_offset)
    if expected is None:
        expected = torch.ones(Tq, Tk, dtype=torch.bool)
    rule = kind.pattern(Tq, Tk, q_offset)
    assert torch.equal(_positions(Tq, Tk, q_offset, None, rule).expand(Tq, Tk), expected)


def qkv(Tq: int, Tk: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 2, t, D_HEAD, generator=g) for t in (Tq, Tk, Tk))


@pytest.mark.parametrize(("name", "causal"), CASES)
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_flex_attention_equals_the_reference(name: str, causal: bool, padded: bool) -> None:
    T = 70  # not a multiple of FlexAttention's 128-row tiles, nor of the kinds' blocks
    kind, (q, k, v) = make(name, causal), qkv(T, T)
    key_real = None
    if padded:  # row 0 right-padded; row 1 left-padded, so its first queries see no key
        key_real = torch.ones(2, T, dtype=torch.bool)
        key_real[0, 50:] = False
        key_real[1, :30] = False
    with torch.no_grad():
        expected = reference_attention(kind, q, k, v, key_real)
        got = flex.flex_attend(kind, q, k, v, key_real)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["sliding_window", "longformer", "bigbird"])
def test_flex_attention_of_a_decoding_step_equals_the_reference(name: str) -> None:
    kind, (q, k, v) = make(name, True), qkv(3, 75)  # 3 new queries after 72 cached keys
    with torch.no_grad():
        expected = reference_attention(kind, q, k, v, None, 72)
        got = flex.flex_attend(kind, q, k, v, None, 72)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("arch", "kind"), [("decoder_only", "sliding_window"),
                                            ("encoder_only", "bigbird"),
                                            ("encoder_only", "longformer")])  # fmt: skip
def test_a_model_on_attn_impl_flex_equals_the_blocked_kernels(arch: str, kind: str) -> None:
    settings = dict(name=arch, vocab_size=40, d_model=32, n_heads=4, n_layers=2, dropout=0.0,
                    attention=kind, window=12, attn_block=8, n_global=2, max_len=64)  # fmt: skip
    models = {}
    for impl in ("sdpa", "flex"):
        torch.manual_seed(0)
        values = {**settings, "attn_impl": impl}  # the kinds' sizes at once: unread ones dropped
        models[impl] = build_model(ModelConfig.from_dict(values, strict=False), "lm")
    tokens = torch.randint(6, 40, (2, 50))
    tokens[1, 40:] = 0  # padding
    with torch.no_grad():
        blocked, flexed = (models[i].eval()(tokens) for i in ("sdpa", "flex"))
    torch.testing.assert_close(flexed, blocked, atol=1e-5, rtol=1e-5)


def test_the_cpu_path_of_attn_impl_sdpa_is_the_blocked_kernel() -> None:
    q = torch.zeros(1, 1, 256, D_HEAD)
    assert not flex.uses_flex(make("sliding_window", True), "sdpa", q, 0.0)
    assert flex.uses_flex(make("sliding_window", True), "flex", q, 0.0)


def test_training_on_attn_impl_flex_on_cpu_is_refused_with_the_fix() -> None:
    kind, (q, k, v) = make("sliding_window", True), qkv(16, 16)
    with pytest.raises(ConfigError, match="no backward pass on CPU.*attn_impl=sdpa"):
        flex.flex_attend(kind, q.requires_grad_(), k, v)


def three_layers(impl: str, arch: str = "decoder_only", kind: str = "sliding_window") -> nn.Module:
    settings = dict(name=arch, vocab_size=40, d_model=32, n_heads=4, n_layers=3, dropout=0.0,
                    attention=kind, window=12, attn_block=8, n_global=2, max_len=64,
                    attn_impl=impl)  # fmt: skip
    torch.manual_seed(0)
    return build_model(ModelConfig.from_dict(settings, strict=False), "lm").eval()


def count_block_masks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(T_q, T_k) of every BlockMask built from now on."""
    import torch.nn.attention.flex_attention as torch_flex

    built, create = [], torch_flex.create_block_mask

    def counted(mask_mod: object, B: object, H: object, Tq: int, Tk: int, **kw: object) -> object:
        built.append((Tq, Tk))
        return create(mask_mod, B, H, Tq, Tk, **kw)

    monkeypatch.setattr(torch_flex, "create_block_mask", counted)
    return built


def test_a_stack_builds_one_block_mask_per_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokens = three_layers("flex"), torch.randint(6, 40, (2, 50))
    built = count_block_masks(monkeypatch)
    with torch.no_grad():
        model(tokens)
        model(tokens)
    assert built == [(50, 50), (50, 50)]  # the 3 layers share one mask per forward


@pytest.mark.parametrize(("arch", "kind"), [("decoder_only", "sliding_window"),
                                            ("encoder_only", "bigbird")])  # fmt: skip
def test_the_shared_block_mask_gives_the_per_layer_masks_outputs(
    monkeypatch: pytest.MonkeyPatch, arch: str, kind: str
) -> None:
    model, tokens = three_layers("flex", arch, kind), torch.randint(6, 40, (2, 50))
    tokens[1, 40:] = 0  # padding
    attend = flex.flex_attend
    with torch.no_grad():
        shared = model(tokens)
        monkeypatch.setattr(flex, "flex_attend", lambda *a, **kw: attend(*a[:6]))
        per_layer = model(tokens)  # every layer builds its own mask, as before
    torch.testing.assert_close(shared, per_layer, atol=0, rtol=0)


def test_one_token_decoding_steps_on_attn_impl_flex_take_the_blocked_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from decoding_inputs import step_logits

    prompts = torch.randint(6, 40, (3, 20), generator=torch.Generator().manual_seed(1))
    expected = step_logits(three_layers("sdpa"), prompts, use_cache=True)
    flex_queries = []
    attend = flex.flex_attend
    monkeypatch.setattr(flex, "flex_attend", lambda *a, **kw: flex_queries.append(a[1].size(2))
                        or attend(*a, **kw))  # fmt: skip
    built = count_block_masks(monkeypatch)
    got = step_logits(three_layers("flex"), prompts, use_cache=True)
    assert flex_queries == [20] * 3 and built == [(20, 20)]  # the prompt only, one mask
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_decoding_step_of_many_queries_on_attn_impl_flex_stays_on_flex() -> None:
    kind = make("sliding_window", True)
    one, many = torch.zeros(1, 1, 1, D_HEAD), torch.zeros(1, 1, flex.MIN_QUERIES, D_HEAD)
    assert not flex.uses_flex(kind, "flex", one, 0.0, decoding=True)
    assert flex.uses_flex(kind, "flex", many, 0.0, decoding=True)
    assert flex.uses_flex(kind, "flex", one, 0.0)  # no cached keys: a whole sequence


def test_attention_dropout_takes_the_blocked_kernel_with_either_impl() -> None:
    """FlexAttention has no dropout: with attn_dropout > 0 it would silently be skipped."""
    q = torch.zeros(1, 1, 256, D_HEAD)
    for impl in ("flex", "sdpa"):
        assert not flex.uses_flex(make("sliding_window", True), impl, q, 0.1)
