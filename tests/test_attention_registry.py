"""``model.attention``: every kind inside the three architectures and the ViT.

The efficient path (attn_impl=sdpa) equals the explicit reference path (attn_impl=math:
softmax with the kind's explicit mask, or the kind's dense formula); causality, padding
invariance and cached decoding hold for each kind where it applies; a causal sliding
window's decoding cache keeps only the window.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.components.attention import ATTENTION_KINDS as KIND_CONFIGS
from attnlab.errors import ConfigError
from attnlab.inference import start_decoding
from attnlab.models import ModelConfig, build_model
from attnlab.nn.attention_kinds import ATTENTION_KINDS
from composed_runs import train_fast
from decoding_inputs import left_padded_prompts, sources, step_logits

VOCAB = 20
SMALL = {"window": 3, "attn_block": 4, "n_global": 1, "n_random": 1, "linformer_k": 5}
# the kernels between W_Q, W_K, W_V and W_O; a whole token mixer (mamba2, gated_deltanet)
# decodes below and has its own tests (tests/test_mamba2.py, tests/test_gated_deltanet.py)
MIXERS = [k for k in ATTENTION_KINDS.names() if getattr(ATTENTION_KINDS.get(k), "mixer", False)]
KINDS = [k for k in ATTENTION_KINDS.names() if k not in MIXERS]
CAUSAL_KINDS = [k for k in KINDS if ATTENTION_KINDS.get(k).causal_ok]
OWN_KEYS = {"mamba2": {"pos": "none", "ssm_state": 8, "ssm_chunk": 4},  # a mixer's sizes
            "gated_deltanet": {"pos": "none", "delta_chunk": 4},
            "hybrid": {"layer_pattern": ["sliding_window", "full"], "rope_theta_local": 100.0}}


def make(name: str, attention: str, **overrides: object) -> torch.nn.Module:
    cfg = {"name": name, "vocab_size": VOCAB, "d_model": 16, "n_heads": 2, "n_layers": 2,
           "dropout": 0.0, "attention": attention, "pos": "rope", "max_len": 64, **SMALL,
           **overrides}  # fmt: skip
    # every kind's sizes at once: the keys a kind does not read are dropped
    return build_model(ModelConfig.from_dict(cfg, strict=False)).eval().double()


def pair(name: str, attention: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights on the efficient and the reference path."""
    fast = make(name, attention)
    slow = make(name, attention, attn_impl="math")
    slow.load_state_dict(fast.state_dict())
    return fast, slow


def tokens(B: int = 2, T: int = 19) -> torch.Tensor:
    return torch.randint(6, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("attention", KINDS)
@pytest.mark.parametrize("name", ["encoder_only", "decoder_only", "encoder_decoder"])
def test_the_efficient_path_equals_the_explicit_one(name: str, attention: str) -> None:
    if name != "encoder_only" and attention not in CAUSAL_KINDS:
        with pytest.raises(ConfigError, match="cannot be causal"):
            make(name, attention)
        return
    fast, slow = pair(name, attention)
    x = tokens()
    x[1, 13:] = 0  # right padding in one row
    args = (x, x[:, :11]) if name == "encoder_decoder" else (x,)
    torch.testing.assert_close(fast(*args), slow(*args), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("attention", CAUSAL_KINDS)
def test_a_causal_kind_never_sees_the_future(attention: str) -> None:
    model = make("decoder_only", attention)
    x = tokens()
    changed = x.clone()
    changed[:, 12:] = 7
    torch.testing.assert_close(model(x)[:, :12], model(changed)[:, :12])


@pytest.mark.parametrize("attention", KINDS)
def test_padding_changes_nothing_for_the_real_tokens(attention: str) -> None:
    model = make("encoder_only", attention)
    x = tokens(1, 12)
    padded = torch.cat([x, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded)[:, :12], model(x), atol=1e-9, rtol=1e-9)


CAPPABLE = [k for k in CAUSAL_KINDS if KIND_CONFIGS.get(k).softcap_ok]
BOTH_STACKS = ("decoder_only", "encoder_decoder")


@pytest.mark.parametrize("name,attention,options", [
    *[(name, kind, {}) for kind in CAUSAL_KINDS for name in BOTH_STACKS],
    # capped logits (Gemma 2 §2): the prompt through FlexAttention, each step written out
    *[(name, kind, {"attn_impl": "flex", "attn_softcap": 1.0}) for kind in CAPPABLE
      for name in BOTH_STACKS],
    *[("decoder_only", mixer, {}) for mixer in MIXERS],
])  # fmt: skip
def test_cached_decoding_equals_recomputation(name: str, attention: str, options: dict) -> None:
    model = make(name, attention, **OWN_KEYS.get(attention, {}), **options)
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    cached = step_logits(model, inputs, use_cache=True)
    recomputed = step_logits(model, inputs, use_cache=False)
    torch.testing.assert_close(cached.double(), recomputed.double(), atol=1e-7, rtol=1e-7)


def test_a_sliding_window_cache_keeps_only_the_window() -> None:
    model = make("decoder_only", "sliding_window", window=4)
    state = start_decoding(model, tokens(2, 3), use_cache=True)
    for _ in range(12):
        state.append(state.logits().argmax(-1))
    layer = state.cache.layers[0].self_attn.past
    assert layer.k.size(2) == layer.v.size(2) == 4  # not 3 + 12


def test_linear_attention_decodes_with_a_constant_state() -> None:
    model = make("decoder_only", "linear")
    state = start_decoding(model, tokens(2, 3), use_cache=True)
    state.append(state.logits().argmax(-1))

    def kept() -> dict[str, torch.Size]:  # the running sums are all the cache holds
        cache = state.cache.layers[0].self_attn
        return {name: t.shape for name, t in zip("SZ", cache.state, strict=True)}

    sizes = kept()
    for _ in range(5):
        state.append(state.logits().argmax(-1))
    assert (
        set(sizes) == {"S", "Z"} and kept() == sizes
    )


def test_the_vit_takes_every_bidirectional_kind() -> None:
    for attention in KINDS:
        cfg = {"name": "vit", "d_model": 16, "n_heads": 2, "n_layers": 1, "image_size": 8,
               "channels": 1, "patch_size": 2, "attention": attention, **SMALL}  # fmt: skip
        model = build_model(ModelConfig.from_dict(cfg, strict=False), "image_classification")
        assert model.pooled(torch.randn(2, 1, 8, 8)).shape == (2, 16)


@pytest.mark.parametrize("overrides,needle", [
    ({"name": "decoder_only", "attention": "linformer"}, "cannot be causal"),
    ({"name": "encoder_only", "attention": "longformer", "pos": "alibi"}, "model.pos=alibi"),
    ({"name": "decoder_only", "attention": "linear", "prefix_lm": True}, "prefix"),
    ({"name": "rnn", "attention": "linear"}, "applies to Transformer architectures"),
    ({"name": "encoder_only", "attention": "sparse"}, "model.attention=sparse"),
    ({"name": "encoder_only", "attention": "sliding_window", "window": 0}, "model.window=0"),
    ({"name": "decoder_only", "attention": "differential", "n_heads": 3, "d_model": 12},
     "model.n_heads=3 is odd"),
    ({"name": "decoder_only", "attention": "differential", "n_kv_heads": 2},
     "model.n_kv_heads=2"),
    ({"name": "decoder_only", "attention": "differential", "lambda_init": 1.0},
     "model.lambda_init=1.0"),
    ({"name": "decoder_only", "attention": "full", "lambda_init": 0.5}, "model.lambda_init"),
    ({"name": "decoder_only", "attention": "full", "kv_latent_rank": 8}, "model.kv_latent_rank"),
    ({"name": "decoder_only", "attention": "sigmoid", "q_latent_rank": 8}, "model.q_latent_rank"),
    ({"name": "decoder_only", "attention": "full", "rope_head_dim": 4}, "model.rope_head_dim"),
    ({"name": "decoder_only", "attention": "mla", "pos": "learned", "rope_head_dim": 4},
     "model.pos=learned rotates nothing"),
    ({"name": "decoder_only", "attention": "mla", "rope_head_dim": 3}, "must be even"),
    ({"name": "decoder_only", "attention": "mla", "kv_latent_rank": 0},
     "model.kv_latent_rank=0"),
    ({"name": "decoder_only", "attention": "mla", "norm": "deepnorm"}, "model.norm=deepnorm"),
    ({"name": "decoder_only", "attention": "mla", "param": "mup"}, "model.param=mup"),
    ({"name": "decoder_only", "attention": "mla", "pos": "rope", "d_model": 24, "n_heads": 4},
     "d_head/2 = 3"),
])  # fmt: skip
def test_bad_attention_settings_are_one_line(overrides: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        ModelConfig.from_dict({"vocab_size": VOCAB, **overrides})


@pytest.mark.parametrize("attention",
                         ["sliding_window", "linear", "sigmoid", "differential", "mamba2",
                          "gated_deltanet", "mla"])
def test_kinds_train_through_the_configs(attention: str, tmp_path) -> None:
    own = {"sliding_window": ["model.window=4"],  # its keys only
           "mamba2": ["model.ssm_state=16", "model.ssm_chunk=8"],
           "gated_deltanet": ["model.delta_chunk=8"]}.get(attention, [])
    pos = "none" if attention in MIXERS else "rope"  # a recurrence takes no positions
    result = train_fast(["model=decoder_only", f"model.attention={attention}", f"model.pos={pos}",
                         *own, "data=reverse"], tmp_path)  # fmt: skip
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["test/loss"])


@pytest.mark.parametrize("fixed", [None, 0.5])
def test_differential_lambda_init_follows_the_layer_or_the_fixed_value(fixed: float | None) -> None:
    """λ_init = 0.8 − 0.6·exp(−0.3·(l − 1)) for layer l of each stack (Ye et al. 2025, §2.1),
    or model.lambda_init in every layer."""
    model = make("encoder_decoder", "differential", n_layers=3, lambda_init=fixed)
    for stack in (model.encoder, model.decoder):
        got = [layer.self_attn.kind.lambda_init for layer in stack.layers]
        paper = [0.8 - 0.6 * math.exp(-0.3 * (layer - 1)) for layer in (1, 2, 3)]
        assert got == pytest.approx(paper if fixed is None else [fixed] * 3)
