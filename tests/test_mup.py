"""model.param=mup (Tensor Programs V, Table 3/8): the base width is SP, the table's learning
rates, initialisation and multipliers, attention logits over d_head, the coordinate check."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab import coord_check
from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.models import parametrization as mup
from attnlab.tasks import LanguageModelTask
from attnlab.tasks.classification import ClassificationTask

TEXT = {"vocab_size": 40}
IMAGE = {"image_size": 8, "channels": 1, "patch_size": 2}
ARCHITECTURES = {
    "decoder_only": ("lm", TEXT),
    "encoder_only": ("lm", TEXT),
    "encoder_decoder": ("seq2seq", TEXT),
    "vit": ("image_classification", IMAGE),
}


def make(name: str, width: int, param: str, seed: int = 0, **keys: object) -> nn.Module:
    task, data = ARCHITECTURES[name]
    values = {"name": name, "d_model": width, "n_heads": 4, "n_layers": 2, "dropout": 0.0,
              "param": param, "mup_base_width": 32, **keys}  # fmt: skip
    if name == "vit":
        values["pos"] = "learned"
    cfg = ModelConfig.from_dict(values, strict=False).with_data(data)  # SP drops the base width
    torch.manual_seed(seed)
    return build_model(cfg, task).eval()


def inputs(name: str) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    if name == "vit":
        return (torch.rand(2, 1, 8, 8, generator=generator),)
    tokens = torch.randint(6, 40, (2, 9), generator=generator)
    return (tokens, tokens) if name == "encoder_decoder" else (tokens,)


VARIANTS = [{}, {"init": "gpt2", "tie_embeddings": False},
            {"norm": "deepnorm", "pos": "rope", "ffn": "swiglu"}]  # fmt: skip


@pytest.mark.parametrize("keys", VARIANTS)
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_mup_at_its_base_width_is_sp_bit_for_bit(name: str, keys: dict) -> None:
    if name == "vit" and keys.get("pos") == "rope":
        keys = {**keys, "pos": "learned"}
    sp, mp = make(name, 32, "sp", **keys), make(name, 32, "mup", **keys)
    for (n, a), (_, b) in zip(sp.named_parameters(), mp.named_parameters(), strict=True):
        assert torch.equal(a, b), n
    assert torch.equal(sp(*inputs(name)), mp(*inputs(name)))
    assert set(mp.lr_multipliers.values()) == {1.0}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_hidden_weights_learn_at_lr_over_m_and_everything_else_at_lr(name: str) -> None:
    model = make(name, 128, "mup")  # m = 128 / 32 = 4
    hidden = {n for n, m in model.lr_multipliers.items() if m != 1.0}
    assert hidden and set(model.lr_multipliers[n] for n in hidden) == {0.25}
    for n, p in model.named_parameters():
        is_hidden = n in hidden
        assert is_hidden == (p.dim() == 2 and any(s in n for s in ("in_proj", "out_proj",
                             "linear1", "linear2", "linear_gate"))), n  # fmt: skip
        if is_hidden:  # init ∝ fan_in^-½: the base width's spread / √m
            base = dict(make(name, 32, "mup").named_parameters())[n]
            assert p.std().item() == pytest.approx(base.std().item() / 2, rel=0.1), n


def test_the_optimizer_takes_the_multipliers_with_mup_adamw_weight_decay() -> None:
    model = {"name": "decoder_only", "vocab_size": 40, "d_model": 128, "n_heads": 4,
             "n_layers": 1, "param": "mup", "mup_base_width": 32}  # fmt: skip
    task = LanguageModelTask(model=model, optim={"lr": 0.01, "weight_decay": 0.1})
    groups = task.configure_optimizers()["optimizer"].param_groups
    names = {id(p): n for n, p in task.named_parameters()}
    by_name = {names[id(p)]: g for g in groups for p in g["params"]}
    assert len(by_name) == len(names)
    hidden = by_name["model.decoder.layers.0.self_attn.in_proj.weight"]
    assert hidden["initial_lr"] == pytest.approx(0.01 / 4)
    assert hidden["weight_decay"] == pytest.approx(0.4)
    embedding = by_name["model.embedding.weight_table.weight"]  # tied: an input weight
    assert embedding["initial_lr"] == 0.01 and embedding["weight_decay"] == 0.0
    assert by_name["model.decoder.layers.0.ffn.linear1.bias"]["initial_lr"] == 0.01


def test_the_readout_multiplies_logits_by_base_over_width_and_keeps_its_spread() -> None:
    model = make("decoder_only", 128, "mup", tie_embeddings=False)
    tokens = inputs("decoder_only")[0]
    hidden = model.hidden(tokens)
    expected = hidden @ model.lm_head.weight.T * (32 / 128)
    torch.testing.assert_close(model(tokens), expected)
    for n in ("lm_head.weight", "embedding.weight_table.weight"):
        wide = dict(make("decoder_only", 512, "mup", tie_embeddings=False).named_parameters())[n]
        base = dict(make("decoder_only", 32, "mup", tie_embeddings=False).named_parameters())[n]
        assert wide.std().item() == pytest.approx(base.std().item(), rel=0.1), n
    assert model.embedding.scale == math.sqrt(32)  # √d_model at the base width


def attention_by_hand(model: nn.Module, width: int, scale: float) -> None:
    """The first layer's causal attention weights on 5 random tokens against
    softmax(q·k·scale) computed from its own projections (4 heads)."""
    attention = model.decoder.layers[0].self_attn
    attention.record_weights = True
    x = torch.randn(1, 5, width)
    attention(x, model.decoder.attention_inputs(torch.ones(1, 5, dtype=torch.long), None,
                                                None, None)[1])  # fmt: skip
    d_head = width // 4
    q, k, _ = (t.view(1, 5, 4, d_head).transpose(1, 2)
               for t in attention.in_proj(x).split(width, -1))  # fmt: skip
    scores = q @ k.transpose(-1, -2) * scale
    scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(attention.last_weights, scores.softmax(-1))


def test_attention_logits_are_q_dot_k_over_d_head_scaled_to_sp_at_the_base_width() -> None:
    model = make("decoder_only", 256, "mup", attn_impl="math")  # d_head 64; at base 8
    attention_by_hand(model, 256, math.sqrt(8) / 64)


def test_the_base_multipliers_scale_the_readout_and_the_attention_logits() -> None:
    """α_output and α_attn (Tensor Programs V's tuned constants) by hand at width 128: the
    logits are α_output·(32/128)·h Wᵀ and the attention scores α_attn·q·k·√8/32."""
    alphas = {"mup_output_mult": 2.5, "mup_attn_mult": 0.5}
    model = make("decoder_only", 128, "mup", tie_embeddings=False, attn_impl="math", **alphas)
    tokens = inputs("decoder_only")[0]
    expected = model.hidden(tokens) @ model.lm_head.weight.T * (2.5 * 32 / 128)
    torch.testing.assert_close(model(tokens), expected)
    attention_by_hand(model, 128, 0.5 * math.sqrt(8) / 32)
    task_model = {"name": "encoder_only", "vocab_size": 40, "d_model": 128, "n_heads": 4,
                  "n_layers": 1, "param": "mup", "mup_base_width": 32, **alphas}  # fmt: skip
    head = ClassificationTask(model=task_model, num_classes=3).head[1]
    assert head.multiplier == 2.5 * 32 / 128


def test_a_classification_head_is_a_readout_under_mup() -> None:
    model = {"name": "encoder_only", "vocab_size": 40, "d_model": 128, "n_heads": 4,
             "n_layers": 1, "param": "mup", "mup_base_width": 32}  # fmt: skip
    head = ClassificationTask(model=model, num_classes=3).head[1]
    assert isinstance(head, mup.Readout) and head.multiplier == 32 / 128
    x = torch.randn(4, 128)
    torch.testing.assert_close(head(x), x @ head.weight.T / 4 + head.bias)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"name": "rnn"}, "model.param=mup applies to Transformer architectures"),
        ({"name": "conv"}, "model.param=mup applies to Transformer architectures"),
        ({"attention": "linear"}, "model.attention=linear has none"),
        ({"mup_base_width": 30}, "model.mup_base_width=30 is not divisible"),
        ({"mup_base_width": 12, "pos": "rope"}, "RoPE cannot rotate"),
        ({"param": "sp", "mup_output_mult": 2.0}, "applies to model.param=mup, not "),
        ({"mup_attn_mult": 0}, "model.mup_attn_mult=0 must be a finite number > 0"),
    ],
)
def test_what_mup_cannot_take_is_refused_in_one_line(keys: dict, message: str) -> None:
    values = {"name": "decoder_only", "d_model": 64, "n_heads": 4, "param": "mup", **keys}
    with pytest.raises(ConfigError, match=message) as error:
        ModelConfig.from_dict(values)
    assert "\n" not in str(error.value)


CHECK = coord_check.CoordCheck(widths=(64, 128, 256), steps=4, seeds=1, lr=1e-2)


def test_the_coordinate_check_is_flat_under_mup_and_grows_under_sp() -> None:
    slopes = coord_check.slopes(CHECK, coord_check.measure(CHECK))
    assert all(abs(s) < 0.25 for s in slopes["mup"].values()), slopes["mup"]
    assert slopes["sp"]["logits"] > 0.6 and slopes["sp"]["ffn"] > 0.6, slopes["sp"]


def test_the_coordinate_check_fails_without_the_output_multiplier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mup.Readout, "forward", nn.Linear.forward)
    check = coord_check.CoordCheck(widths=CHECK.widths, steps=4, seeds=1, params=("mup",))
    slopes = coord_check.slopes(check, coord_check.measure(check))["mup"]
    assert slopes["logits"] > 0.6, slopes


def test_the_command_writes_its_table_plot_and_numbers(tmp_path, capsys) -> None:
    out = tmp_path / "cc"
    argv = ["--widths", "32", "64", "--steps", "1", "--seeds", "1", "--out", str(out),
            "model.norm=post"]  # fmt: skip
    assert coord_check.main(argv) == 0
    assert "| mup |" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"coord_check.png", "coord_check.json",
                                               "coord_check.md"}  # fmt: skip
    assert coord_check.main(["--widths", "32", "--out", str(out)]) == 2
    assert coord_check.main(["norm=post", "--widths", "32", "64", "--out", str(out)]) == 2
    assert "expected model.KEY=VALUE" in capsys.readouterr().err
