"""``model.attention=hybrid``: each layer its own kind (``model.layer_pattern``), the local
layers rotated by their own RoPE base (``model.rope_theta_local``), a window cache for the
local layers and a full one for the global layers (Gemma 3 §2; ModernBERT §2.1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from attnlab import generate as attnlab_generate
from attnlab import train as attnlab_train
from attnlab.components.attention import layer_kinds
from attnlab.errors import ConfigError
from attnlab.inference import start_decoding
from attnlab.models import ModelConfig, build_model
from composed_runs import TINY_MODEL, sized
from decoding_inputs import left_padded_prompts, sources, step_logits

VOCAB = 20


BASE = {"vocab_size": VOCAB, "d_model": 16, "n_heads": 2, "n_layers": 3, "dropout": 0.0,
        "pos": "rope", "max_len": 64}


def config(**overrides: object) -> ModelConfig:
    values = {"name": "decoder_only", **BASE, "attention": "hybrid", **overrides}
    return ModelConfig.from_dict({k: v for k, v in values.items() if v is not None})


def uniform(name: str, kind: str, theta: float) -> torch.nn.Module:
    """Every layer ``kind``, rotated by ``theta``."""
    window = {"window": 3} if kind == "sliding_window" else {}
    values = {"name": name, **BASE, "n_layers": 2, "attention": kind, "rope_theta": theta}
    return build_model(ModelConfig.from_dict({**values, **window})).eval().double()


def tokens(B: int = 2, T: int = 13) -> torch.Tensor:
    return torch.randint(6, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))


def test_the_pattern_repeats_to_the_layers_as_gemma3_and_modernbert_lay_them_out() -> None:
    # Gemma 3 (transformers' Gemma3TextConfig.layer_types): layer i slides unless (i + 1) % 6 == 0
    gemma = layer_kinds(config(layer_pattern=["sliding_window*5", "full"]), 26)
    assert gemma == ["sliding_window" if (i + 1) % 6 else "full" for i in range(26)]
    # ModernBERT (global_attn_every_n_layers=3): layer i is global when i % 3 == 0
    modernbert = config(name="encoder_only", layer_pattern=["full", "sliding_window*2"])
    assert layer_kinds(modernbert, 22) == ["full" if i % 3 == 0 else "sliding_window"
                                           for i in range(22)]  # fmt: skip


@pytest.mark.parametrize("name", ["decoder_only", "encoder_only"])
def test_each_layer_is_its_kind_rotated_by_its_own_base(name: str) -> None:
    """A local-then-global hybrid equals layer 0 of an all-sliding-window model with
    θ = rope_theta_local followed by layer 1 of an all-full model with θ = rope_theta."""
    hybrid = build_model(config(name=name, n_layers=2, layer_pattern=["sliding_window", "full"],
                                window=3, rope_theta=1000.0, rope_theta_local=10.0))
    hybrid = hybrid.eval().double()
    state = hybrid.state_dict()
    local, whole = uniform(name, "sliding_window", 10.0), uniform(name, "full", 1000.0)
    local.load_state_dict(state)
    whole.load_state_dict(state)
    x = tokens()
    (stack_l,), (stack_g,) = local.stacks().values(), whole.stacks().values()
    with torch.no_grad():
        positions, inputs_l = stack_l.attention_inputs(x, None, None, None)
        _, inputs_g = stack_g.attention_inputs(x, None, None, None)
        h = stack_l.dropout(stack_l.positions.embed(stack_l.embedding(x), positions))
        h = stack_g.layers[1](stack_l.layers[0](h, inputs_l), inputs_g)
        expected = hybrid.lm_head(stack_g.final_norm(h))
        torch.testing.assert_close(hybrid(x), expected)
        # and the local base is used: one θ for every layer gives other logits
        one_base = config(name=name, n_layers=2, layer_pattern=["sliding_window", "full"],
                          window=3, rope_theta=1000.0)
        same = build_model(one_base).eval().double()
        same.load_state_dict(state)
        assert not torch.allclose(same(x), expected)


def test_a_local_layer_caches_its_window_and_a_global_layer_every_key() -> None:
    model = build_model(config(layer_pattern=["sliding_window*2", "full"], window=4)).eval()
    state = start_decoding(model, tokens(2, 3), use_cache=True)
    for _ in range(12):
        state.append(state.logits().argmax(-1))
    state.logits()  # the last token read
    kept = [layer.self_attn.past.k.size(2) for layer in state.cache.layers]
    assert kept == [4, 4, 3 + 12]


PATTERNS = [
    ("decoder_only", {"layer_pattern": ["sliding_window*2", "full"], "rope_theta_local": 10.0,
                      "n_kv_heads": 1, "window": 3}),
    ("decoder_only", {"layer_pattern": ["longformer", "full", "differential"], "window": 3}),
    ("decoder_only", {"layer_pattern": ["mamba2", "full"], "ssm_state": 8, "ssm_chunk": 4,
                      "window": None}),
    # Qwen3-Next's layout: three Gated DeltaNet layers to one softmax layer
    ("decoder_only", {"layer_pattern": ["gated_deltanet*3", "full"], "delta_chunk": 4,
                      "n_layers": 4, "window": None}),
    ("encoder_decoder", {"layer_pattern": ["sliding_window", "full"], "rope_theta_local": 10.0,
                         "window": 3}),
]  # fmt: skip


@pytest.mark.parametrize("name,overrides", PATTERNS)
def test_cached_decoding_past_the_window_equals_recomputation(name: str, overrides: dict) -> None:
    model = build_model(config(name=name, **overrides)).eval().double()
    inputs = sources() if name == "encoder_decoder" else left_padded_prompts()
    forced = torch.randint(6, 16, (3, 9), generator=torch.Generator().manual_seed(2))
    cached = step_logits(model, inputs, use_cache=True, forced=forced)  # 6 + 9 > window 3
    recomputed = step_logits(model, inputs, use_cache=False, forced=forced)
    torch.testing.assert_close(cached, recomputed, atol=1e-7, rtol=1e-7)


def test_the_soft_cap_applies_to_a_pattern_of_softmax_kinds() -> None:
    cfg = config(layer_pattern=["sliding_window", "full"], window=3, attn_impl="math",
                 attn_softcap=50.0)
    layers = build_model(cfg).decoder.layers
    assert [layer.self_attn.kernel.softcap for layer in layers] == [50.0] * 3


@pytest.mark.parametrize("overrides,needle", [
    ({"layer_pattern": ["full", "nope"]}, "model.layer_pattern entry nope is not"),
    ({"layer_pattern": ["hybrid"]}, "model.layer_pattern entry hybrid is not"),
    ({"layer_pattern": ["full*0"]}, "count >= 1"),
    ({"layer_pattern": []}, "non-empty list"),
    ({"layer_pattern": "full"}, "model.layer_pattern=full must be a list"),
    ({"layer_pattern": ["full"], "window": 3},  # no kind of it reads the window
     "model.window=3 applies to model.attention=longformer, sliding_window, not the kinds of "
     "model.layer_pattern; remove it, or name one of those there"),
    ({"layer_pattern": ["sliding_window", "full"], "pos": "alibi"},
     "model.layer_pattern has sliding_window: model.attention=sliding_window"),
    ({"layer_pattern": ["linformer", "full"]}, "model.layer_pattern has linformer"),
    ({"layer_pattern": ["mla", "full"]}, "mixes mla"),
    ({"rope_theta_local": 10.0, "pos": "learned"}, "model.pos=learned rotates nothing"),
    ({"layer_pattern": ["full", "sigmoid"], "rope_theta_local": 10.0},
     "has none (sliding_window, longformer)"),
    ({"layer_pattern": ["linear", "full"], "attn_impl": "math", "attn_softcap": 50.0},
     "model.layer_pattern has linear: model.attn_softcap caps the logits"),
    ({"attention": "full", "layer_pattern": ["full"]},
     "model.layer_pattern=['full'] applies to model.attention=hybrid"),
])  # fmt: skip
def test_a_bad_pattern_is_refused_in_one_line(overrides: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(needle)) as refusal:
        config(**overrides)
    assert "\n" not in str(refusal.value)


def test_a_hybrid_decoder_trains_and_generates_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    overrides = ["model=decoder_only", "model.attention=hybrid", "model.pos=rope",
                 "model.layer_pattern=[sliding_window*2,full]", "model.window=4",
                 "model.rope_theta=10000", "model.rope_theta_local=100", "model.n_layers=3",
                 "data=reverse", "data.train_size=32", "data.val_size=8", "data.test_size=8",
                 "data.batch_size=8", "trainer.max_epochs=1", "trainer.enable_progress_bar=false"]
    args = [*sized(TINY_MODEL, overrides), *overrides, f"hydra.run.dir={run_dir}"]
    assert attnlab_train.main(args) == 0  # fmt: skip
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1 2 3 4 5 6\n")
    capsys.readouterr()
    assert attnlab_generate.main([f"run_dir={run_dir}", f"prompt_file={prompts}",
                                  "max_new_tokens=8", "seed=1"]) == 0  # fmt: skip
    (line,) = capsys.readouterr().out.splitlines()
    assert len(line.split()) <= 8
