"""The training-stability keys, each against a hand computation.

``model.attn_softcap``: softmax(c·tanh(QKᵀ/(√d·c)) + M)V (Gemma 2, §2 "logit soft-capping")
on every path that computes a softmax over the keys, and refused where none can cap.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn import flex
from attnlab.nn.attention import AttentionInputs, MultiHeadAttention
from attnlab.nn.attention_kinds import ATTENTION_KINDS
from attnlab.nn.kernels import soft_cap

D, H = 16, 2


def test_soft_cap_is_c_tanh_of_the_logits_over_c() -> None:
    x = torch.tensor([-1000.0, -50.0, -1.0, 0.0, 0.5, 50.0, 1000.0], dtype=torch.float64)
    by_hand = torch.tensor([50 * math.tanh(v / 50) for v in x.tolist()], dtype=torch.float64)
    torch.testing.assert_close(soft_cap(x, 50.0), by_hand)
    assert soft_cap(x, 50.0).abs().max() <= 50.0  # bounded by c
    assert abs(soft_cap(torch.tensor(0.5), 50.0).item() - 0.5) < 1e-4  # ≈ x for |x| ≪ c


def capped_by_hand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float,
                   visible: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """softmax(c·tanh(q·k/(√d·c)), masked) v, one (batch, head, query) at a time."""
    out = torch.zeros_like(q)
    for b, h, i in torch.cartesian_prod(*(torch.arange(n) for n in q.shape[:3])).tolist():
        logits = [cap * math.tanh(float(q[b, h, i] @ k[b, h, j]) / math.sqrt(q.size(-1)) / cap)
                  if visible[i, j] else -math.inf for j in range(k.size(2))]  # fmt: skip
        weights = torch.softmax(torch.tensor(logits, dtype=q.dtype), dim=0)
        out[b, h, i] = weights @ v[b, h]
    return out


def attention(impl: str, cap: float | None, kind: str = "full", causal: bool = True) -> tuple:
    cfg = ModelConfig(d_model=D, n_heads=H, window=3, attn_block=4, attention=kind)
    built = None if kind == "full" else ATTENTION_KINDS.get(kind)(cfg, causal)
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, impl=impl, kind=built, softcap=cap).double().eval(), built


def heads_of(layer: MultiHeadAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    B, T, _ = x.shape
    return tuple(t.view(B, T, H, D // H).transpose(1, 2)
                 for t in layer.in_proj(x).split(layer.split_sizes, dim=-1))  # fmt: skip


@pytest.mark.parametrize("kind", ["full", "sliding_window"])
@pytest.mark.parametrize("impl", ["math", "flex", "sdpa"])
def test_capped_attention_is_the_softmax_of_the_capped_logits(impl: str, kind: str) -> None:
    """Every kernel a capped layer can take (the layer itself is built by any impl; the
    config refuses sdpa) computes the capped logits: the written-out softmax, or the
    blocked kind's fallback to it, or FlexAttention's score_mod (forward, on a CPU)."""
    if impl == "flex" and not flex.available():
        pytest.skip("torch without FlexAttention")
    cap = 0.5  # far below the logits here: capping changes the output
    layer, built = attention(impl, cap, kind)
    x = torch.randn(2, 7, D, dtype=torch.float64) * 4
    T = x.size(1)
    visible = torch.ones(T, T).tril().bool() if built is None else built.mask(T, T)
    inputs = AttentionInputs(is_causal=True) if built is None else AttentionInputs()
    with torch.no_grad():
        by_hand = capped_by_hand(*heads_of(layer, x), cap, visible)
        got = layer(x, inputs)
        expected = layer.out_proj(by_hand.transpose(1, 2).reshape(2, T, D))
        uncapped = attention(impl, None, kind)[0](x, inputs)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, uncapped, atol=1e-3)  # the cap was not dropped


def test_flex_score_mod_caps_each_score() -> None:
    score = torch.tensor([-80.0, -3.0, 0.0, 2.0, 120.0])
    zero = torch.tensor(0)
    capped = flex.soft_cap_mod(30.0)(score, zero, zero, zero, zero)
    torch.testing.assert_close(capped, 30.0 * torch.tanh(score / 30.0))


@pytest.mark.skipif(not flex.available(), reason="torch without FlexAttention")
def test_flex_attention_with_the_score_mod_equals_the_capped_reference() -> None:
    cfg = ModelConfig(d_model=D, n_heads=H, window=16, attn_block=8)
    kind = ATTENTION_KINDS.get("sliding_window")(cfg, True)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, H, 70, 8, generator=g) * 3 for _ in range(3))
    visible = kind.mask(70, 70)
    with torch.no_grad():
        got = flex.flex_attend(kind, q, k, v, softcap=2.0)
    from attnlab.nn.kernels import math_attention

    expected = math_attention(q, k, v, visible, softcap=2.0)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def model_config(**values: object) -> ModelConfig:
    return ModelConfig.from_dict({"name": "decoder_only", "vocab_size": 20, "d_model": D,
                                  "n_heads": H, **values})  # fmt: skip


@pytest.mark.parametrize(("values", "named"), [
    ({"attn_softcap": 50.0}, "model.attn_softcap=50.0 applies to model.attn_impl=flex, math"),
    ({"attn_impl": "math", "attn_softcap": 50.0, "attention": "linear"},
     "model.attention=linear does not compute"),
    ({"attn_impl": "math", "attn_softcap": 0.0}, "must be a finite number > 0"),
    # c·tanh(x/c) with c = inf (or beyond float32) is inf·0: every logit NaN
    ({"attn_impl": "math", "attn_softcap": math.inf}, "must be a finite number > 0"),
    ({"attn_impl": "math", "attn_softcap": 1e300}, "that float32 holds"),
    ({"attn_impl": "math", "attn_softcap": math.nan}, "must be a finite number > 0"),
])  # fmt: skip
def test_attn_softcap_is_refused_where_nothing_caps_it(values: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        model_config(**values)


def test_attn_softcap_reaches_every_attention_layer() -> None:
    model = build_model(model_config(name="encoder_decoder", attn_impl="flex", attn_softcap=7.0))
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(layers) == 6 and all(layer.kernel.softcap == 7.0 for layer in layers)


# model.final_softcap -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["decoder_only", "encoder_only", "encoder_decoder"])
def test_final_softcap_caps_the_lm_heads_logits(name: str) -> None:
    torch.manual_seed(0)
    plain = build_model(model_config(name=name)).eval()
    capped = build_model(model_config(name=name, final_softcap=0.3)).eval()
    capped.load_state_dict(plain.state_dict())
    tokens = torch.randint(4, 20, (2, 6))
    args = (tokens, tokens) if name == "encoder_decoder" else (tokens,)
    with torch.no_grad():
        logits = plain(*args)
        torch.testing.assert_close(capped(*args), 0.3 * torch.tanh(logits / 0.3))
    assert logits.abs().max() > 0.3  # the cap changed something


def test_generation_reads_the_capped_logits() -> None:
    from decoding_inputs import left_padded_prompts, step_logits

    model = build_model(model_config(final_softcap=0.05)).eval()
    logits = step_logits(model, left_padded_prompts(), use_cache=True)
    assert logits.abs().max() <= 0.05


@pytest.mark.parametrize(("values", "named"), [
    ({"name": "vit", "final_softcap": 30.0}, "model.final_softcap=30.0 applies to"),
    ({"name": "rnn", "final_softcap": 30.0}, "model.final_softcap=30.0 applies to"),
    ({"name": "decoder_only", "final_softcap": -3.0}, "must be a finite number > 0"),
    ({"name": "decoder_only", "final_softcap": math.inf}, "must be a finite number > 0"),
])  # fmt: skip
def test_final_softcap_is_refused_without_an_lm_head(values: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        ModelConfig.from_dict(values)


# task.z_loss ---------------------------------------------------------------------------------
def test_z_loss_is_the_mean_square_log_normaliser_over_real_labels() -> None:
    from attnlab.tasks.base import z_loss

    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [5.0, -1.0, 2.0]]])
    labels = torch.tensor([[2, -100, 0]])  # the middle position is ignored
    log_z = [math.log(sum(math.exp(v) for v in row)) for row in ([1, 2, 3], [5, -1, 2])]
    by_hand = (log_z[0] ** 2 + log_z[1] ** 2) / 2
    assert z_loss(logits, labels).item() == pytest.approx(by_hand, rel=1e-6)


def test_the_training_objective_adds_z_loss_and_logs_it_apart() -> None:
    from attnlab.tasks.language_modeling import LanguageModelTask

    model = {"name": "decoder_only", "vocab_size": 20, "d_model": D, "n_heads": H}
    task = LanguageModelTask(model=model, task={"z_loss": 0.5})
    logged: dict[str, float] = {}
    task.log = lambda name, value, **kw: logged.__setitem__(name, float(value))  # type: ignore[method-assign]
    logits = torch.randn(2, 5, 20) * 3
    labels = torch.randint(0, 20, (2, 5))
    objective = task.training_loss(logits, labels, 2)
    cross_entropy = torch.nn.functional.cross_entropy(logits.reshape(-1, 20), labels.reshape(-1))
    log_z = torch.logsumexp(logits, -1)
    assert logged["train/loss"] == pytest.approx(cross_entropy.item(), rel=1e-6)
    assert logged["train/z_loss"] == pytest.approx(0.5 * log_z.square().mean().item(), rel=1e-5)
    assert objective.item() == pytest.approx(logged["train/loss"] + logged["train/z_loss"])


@pytest.mark.parametrize("z", [-1e-4, math.inf, math.nan])
def test_a_negative_or_infinite_z_loss_is_refused(z: float) -> None:
    from attnlab.options import TaskConfig

    with pytest.raises(ConfigError, match="task.z_loss"):
        TaskConfig(z_loss=z)


def test_z_loss_on_a_classification_task_is_refused() -> None:
    from attnlab.tasks.classification import ClassificationTask

    model = {"name": "encoder_only", "vocab_size": 20, "d_model": D, "n_heads": H}
    with pytest.raises(ConfigError, match="task.z_loss=0.0001 .* this task is classification"):
        ClassificationTask(model=model, task={"z_loss": 1e-4}, num_classes=3)


def test_final_softcap_on_a_classification_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="model.final_softcap=30.0 applies to lm or seq2seq"):
        build_model(model_config(final_softcap=30.0), "classification")


# model.rope_theta, model.rotary_fraction -----------------------------------------------------
def rotated_by_hand(x: torch.Tensor, theta: float, rotated: int) -> torch.Tensor:
    """Pair (x_2i, x_2i+1) of the first ``rotated`` features of position m turned by
    m·theta^(−2i/rotated) (RoFormer eq. 34); the other features as they were."""
    out = x.clone()
    for m in range(x.size(-2)):
        for i in range(rotated // 2):
            angle = m * theta ** (-2 * i / rotated)
            a, b = x[..., m, 2 * i], x[..., m, 2 * i + 1]
            out[..., m, 2 * i] = a * math.cos(angle) - b * math.sin(angle)
            out[..., m, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


@pytest.mark.parametrize(("theta", "fraction", "rotated"),
                         [(10000.0, 1.0, 8), (500.0, 1.0, 8), (10000.0, 0.25, 2),
                          (1e6, 0.5, 4)])  # fmt: skip
def test_rope_rotates_the_first_fraction_of_each_head_by_m_theta_i(
    theta: float, fraction: float, rotated: int
) -> None:
    from attnlab.nn.positions import RotaryPositions, apply_rotary

    rope = RotaryPositions(D, H, 64, causal=True, theta=theta, fraction=fraction)
    x = torch.randn(1, H, 6, D // H, dtype=torch.float64)
    cos, sin = rope.rotary(torch.arange(6))
    got = apply_rotary(x, cos.double(), sin.double())
    torch.testing.assert_close(got, rotated_by_hand(x, theta, rotated), atol=1e-6, rtol=1e-6)


def test_the_default_rope_is_roformers_base_10000_over_every_feature() -> None:
    torch.manual_seed(0)
    default = build_model(model_config(pos="rope")).eval()
    explicit = build_model(model_config(pos="rope", rope_theta=10000, rotary_fraction=1.0)).eval()
    explicit.load_state_dict(default.state_dict())
    tokens = torch.randint(4, 20, (2, 9))
    with torch.no_grad():
        assert torch.equal(default(tokens), explicit(tokens))


@pytest.mark.parametrize(("values", "named"), [
    ({"rope_theta": 500000.0}, "model.rope_theta=500000.0 applies to model.pos=rope"),
    ({"rotary_fraction": 0.5}, "model.rotary_fraction=0.5 applies to model.pos=rope"),
    ({"pos": "rope", "rope_theta": 0}, "must be a finite number > 0"),
    ({"pos": "rope", "rope_theta": math.inf}, "must be a finite number > 0"),
    ({"pos": "rope", "rotary_fraction": 0.0}, r"must be in \(0, 1\]"),
    ({"pos": "rope", "rotary_fraction": 0.4}, "= 3 features of each head, and RoPE rotates"),
])  # fmt: skip
def test_rope_keys_are_refused_without_rope_or_out_of_range(values: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        model_config(**values)


NEOX = """
import json, sys, torch
from transformers import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import (
    GPTNeoXRotaryEmbedding, apply_rotary_pos_emb)
case = json.loads(sys.argv[1])
config = GPTNeoXConfig(hidden_size=case["d"], num_attention_heads=case["h"],
                       rotary_pct=case["fraction"], rotary_emb_base=case["theta"])
x = torch.tensor(case["x"], dtype=torch.float64)
cos, sin = GPTNeoXRotaryEmbedding(config)(x, torch.arange(x.size(2))[None])
print(json.dumps(apply_rotary_pos_emb(x, x, cos.double(), sin.double())[0].tolist()))
"""


@pytest.mark.slow  # ~10 s: a process that imports transformers
def test_rope_equals_gpt_neox_rotary_with_its_base_and_rotary_pct() -> None:
    """GPT-NeoX rotates the halves (x_i, x_i+r/2) of its first r features, attnlab the
    pairs (x_2i, x_2i+1): the same rotation once the first r features are reordered
    (0, 2, 4, …, 1, 3, 5, …)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from attnlab.nn.positions import RotaryPositions, apply_rotary

    parity = Path(os.environ.get("ATTNLAB_HF_PARITY",
                                 Path(__file__).parents[1] / ".venv" / "hf-parity"))  # fmt: skip
    if not (parity / "transformers").is_dir():
        pytest.skip(f"transformers for the parity tests not found at {parity}; run make setup")
    d, h, d_head, theta, fraction = 64, 2, 32, 500.0, 0.25  # one process: transformers loads slowly
    rope = RotaryPositions(d, h, 64, causal=True, theta=theta, fraction=fraction)
    r = rope.rotated
    x = torch.randn(1, h, 7, d_head, dtype=torch.float64)
    halves = torch.cat([torch.arange(0, r, 2), torch.arange(1, r, 2), torch.arange(r, d_head)])
    case = {"d": d, "h": h, "theta": theta, "fraction": fraction, "x": x[..., halves].tolist()}
    env = {**os.environ, "PYTHONPATH": str(parity), "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run([sys.executable, "-c", NEOX, json.dumps(case)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    neox = torch.tensor(json.loads(done.stdout), dtype=torch.float64)
    cos, sin = rope.rotary(torch.arange(7))
    ours = apply_rotary(x, cos.double(), sin.double())[..., halves]
    torch.testing.assert_close(ours, neox, atol=1e-5, rtol=1e-5)
