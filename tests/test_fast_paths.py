"""The fast paths: stacked Q/K/V projection, the fused causal kernel without masks or host
syncs, one compiled graph, activation checkpointing, and which parameters are decayed."""

from __future__ import annotations

import math
import warnings
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from attnlab.models import ModelConfig, build_model
from attnlab.nn.attention import AttentionInputs, MultiHeadAttention
from attnlab.tasks import LanguageModelTask, Seq2SeqTask


def make(name: str, **overrides: object) -> nn.Module:
    values = dict(name=name, vocab_size=30, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    values.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig.from_dict(values))


def run(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    return model(tokens, tokens) if model.cfg.name == "encoder_decoder" else model(tokens)


def test_q_k_v_projections_are_views_of_the_stacked_input_projection() -> None:
    attn = MultiHeadAttention(d_model=16, n_heads=4)
    rows = {"q_proj": slice(0, 16), "k_proj": slice(16, 32), "v_proj": slice(32, 48)}
    for name, part in rows.items():
        torch.testing.assert_close(getattr(attn, name).weight, attn.in_proj.weight[part])
        getattr(attn, name).bias.data.fill_(float(part.start))
    assert attn.in_proj.bias[16:32].eq(16).all() and attn.in_proj.bias[32:].eq(32).all()


def test_checkpoint_with_separate_q_k_v_projections_still_loads() -> None:
    attn = MultiHeadAttention(d_model=16, n_heads=4)
    old = {k: v for k, v in attn.state_dict().items() if not k.startswith("in_proj")}
    for name in ("q", "k", "v"):
        projection = getattr(attn, f"{name}_proj")
        old[f"{name}_proj.weight"] = projection.weight.detach().clone()
        old[f"{name}_proj.bias"] = projection.bias.detach().clone()
    fresh = MultiHeadAttention(d_model=16, n_heads=4)
    fresh.load_state_dict(old)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(fresh(x, AttentionInputs()), attn(x, AttentionInputs()))


def test_paper_init_draws_each_projection_as_a_square_matrix() -> None:
    model = make("decoder_only", d_model=256, n_heads=4, init="paper")
    attn = model.decoder.layers[0].self_attn
    xavier_std = math.sqrt(2.0 / (256 + 256))  # fan_in = fan_out = d_model, not 3·d_model
    for projection in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert projection.weight.std().item() == pytest.approx(xavier_std, rel=0.05)


def _attention_inputs(model: nn.Module, tokens: torch.Tensor) -> list[AttentionInputs]:
    """The AttentionInputs each self-attention layer received in one forward."""
    seen: list[AttentionInputs] = []
    hooks = [
        layer.self_attn.register_forward_pre_hook(lambda _, args: seen.append(args[1]))
        for stack in (getattr(model, "decoder", None), getattr(model, "encoder", None))
        if stack is not None and stack.causal
        for layer in stack.layers
    ]
    run(model, tokens)
    for hook in hooks:
        hook.remove()
    return seen


@pytest.mark.parametrize("name", ["decoder_only", "encoder_decoder"])
def test_causal_training_forward_uses_the_fused_causal_kernel_without_a_mask(name: str) -> None:
    tokens = torch.randint(6, 30, (2, 9))
    tokens[1, 6:] = 0  # right padding, as every training batch has it
    inputs = _attention_inputs(make(name), tokens)
    assert inputs and all(i.is_causal and i.mask is None for i in inputs)


def test_right_padding_does_not_change_real_positions_without_a_padding_mask() -> None:
    model = make("decoder_only").eval()
    tokens = torch.randint(6, 30, (2, 6))
    padded = torch.cat([tokens, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    explicit = padded != 0
    torch.testing.assert_close(model(padded)[:, :6], model(padded, key_real=explicit)[:, :6])


@pytest.mark.parametrize("name", ["decoder_only", "encoder_decoder"])
def test_training_forward_traces_as_one_graph_with_no_host_sync(name: str) -> None:
    import torch._dynamo as dynamo

    model = make(name, pos="learned")
    tokens = torch.randint(6, 30, (2, 9))
    explanation = dynamo.explain(model)(
        *((tokens, tokens) if name == "encoder_decoder" else (tokens,))
    )
    dynamo.reset()
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_learned_positions_beyond_max_len_are_refused() -> None:
    model = make("decoder_only", pos="learned", max_len=8)
    with pytest.raises(ValueError, match="exceeds model.max_len=8"):
        model(torch.randint(6, 30, (1, 9)))
    with pytest.raises(ValueError, match="position 8 exceeds"):
        model(torch.randint(6, 30, (1, 2)), positions=torch.tensor([[0, 8]]))


@pytest.mark.parametrize("name", ["decoder_only", "encoder_decoder", "encoder_only"])
def test_activation_checkpointing_leaves_gradients_unchanged(name: str) -> None:
    tokens = torch.randint(6, 30, (2, 7))
    grads = []
    for checkpointing in (False, True):
        model = make(name, activation_checkpointing=checkpointing, dropout=0.0).train()
        run(model, tokens).square().mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for key in grads[0]:
        torch.testing.assert_close(grads[1][key], grads[0][key], msg=key)


def test_norms_biases_and_embeddings_are_not_weight_decayed() -> None:
    model = dict(name="decoder_only", vocab_size=30, d_model=32, n_heads=4, n_layers=2,
                 pos="learned", tie_embeddings=False)  # fmt: skip
    task = LanguageModelTask(model=model, optim={"weight_decay": 0.1})
    decay, no_decay = task.configure_optimizers()["optimizer"].param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in task.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    not_decayed = {names[id(p)] for p in no_decay["params"]}
    assert decayed | not_decayed == set(names.values())
    assert "model.lm_head.weight" in decayed
    for name in decayed:
        assert name.endswith(".weight") and not any(
            part in name for part in ("norm", "embedding", "positions")
        ), name
    for name in not_decayed:
        assert name.endswith("bias") or any(
            part in name for part in ("norm", "embedding", "positions")
        ), name
    assert "model.embedding.weight_table.weight" in not_decayed
    assert "model.decoder.positions.table.weight" in not_decayed


def test_adamw_is_fused_by_default_and_not_when_asked() -> None:
    model = dict(name="decoder_only", vocab_size=30, d_model=32, n_heads=4, n_layers=1)
    optimizer = LanguageModelTask(model=model).configure_optimizers()["optimizer"]
    assert optimizer.defaults["fused"]
    plain = LanguageModelTask(model=model, optim={"fused": False}).configure_optimizers()
    assert not plain["optimizer"].defaults["fused"]


def quiet_trainer(precision: str, clip: float, **options: Any) -> L.Trainer:
    """A CPU Trainer with this precision and clipping; ``16-mixed`` with fp16's loss scaler
    (on the CPU Lightning would otherwise run ``16-mixed`` as bf16)."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    plugin = {"plugins": [MixedPrecision("16-mixed", "cpu")]} if precision == "16-mixed" else {
        "precision": precision}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return L.Trainer(accelerator="cpu", devices=1, gradient_clip_val=clip, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, **plugin, **options)  # fmt: skip


@pytest.mark.parametrize(("precision", "clip", "fused"), [
    ("bf16-mixed", 1.0, True),  # no loss scaler: the task clips the fused optimizer itself
    ("16-mixed", 1.0, False),  # the fused step would unscale the gradients after clipping
    ("16-mixed", 0.0, True),
    ("32-true", 1.0, True),
])  # fmt: skip
def test_adamw_stays_fused_unless_a_loss_scaler_meets_clipping(
    precision: str, clip: float, fused: bool
) -> None:
    task = LanguageModelTask(model=dict(name="decoder_only", vocab_size=30, d_model=16,
                                        n_heads=2, n_layers=1))  # fmt: skip
    task.trainer = quiet_trainer(precision, clip)
    assert task.configure_optimizers()["optimizer"].defaults["fused"] is fused


class ClippingWatched(LanguageModelTask):
    """Records the gradients' norm and largest value before and after clipping."""

    seen: dict[str, Any]

    def _gradients(self) -> tuple[float, float]:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        return (float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))),
                max(float(g.abs().max()) for g in grads))  # fmt: skip

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.seen = {"before": self._gradients(), "fused": optimizer.defaults["fused"]}

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None,
                                    ) -> None:  # fmt: skip
        super().configure_gradient_clipping(optimizer, gradient_clip_val,
                                            gradient_clip_algorithm)  # fmt: skip
        self.seen["after"] = self._gradients()


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_bf16_mixed_clips_the_fused_adamws_gradients(algorithm: str) -> None:
    """Lightning refuses to clip a fused optimizer under mixed precision (for fp16's scaler);
    under bf16-mixed, which has none, the task clips it: one real step on the CPU."""
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    task = ClippingWatched(model=dict(name="decoder_only", vocab_size=30, d_model=16,
                                      n_heads=2, n_layers=1, dropout=0.0))  # fmt: skip
    tokens = torch.randint(6, 30, (4, 9))
    clip = 1e-3  # well below the gradients' norm and their largest value
    trainer = quiet_trainer("bf16-mixed", clip, gradient_clip_algorithm=algorithm, max_steps=1,
                            limit_val_batches=0, num_sanity_val_steps=0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no validation loader
        trainer.fit(task, DataLoader([{"tokens": row} for row in tokens], batch_size=4))
    (norm_before, top_before), (norm_after, top_after) = task.seen["before"], task.seen["after"]
    assert task.seen["fused"] and norm_before > 10 * clip and top_before > 10 * clip
    if algorithm == "norm":
        assert norm_after == pytest.approx(clip, rel=1e-3)
    else:
        assert top_after == pytest.approx(clip)


@pytest.mark.slow
def test_model_compile_trains_on_cpu_and_matches_eager() -> None:
    model = dict(name="encoder_decoder", vocab_size=30, d_model=32, n_heads=4, n_layers=1,
                 dropout=0.0, compile=True)  # fmt: skip
    torch.manual_seed(0)
    compiled = Seq2SeqTask(model=model)
    eager = Seq2SeqTask(model={**model, "compile": False})
    eager.load_state_dict(compiled.state_dict())
    compiled.setup("fit")  # what the Trainer calls: wraps the model with torch.compile
    src, tgt = torch.randint(6, 30, (2, 5)), torch.randint(6, 30, (2, 4))
    logits, labels = compiled(src, tgt)
    expected, _ = eager(src, tgt)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    compiled.loss(logits, labels).backward()
    assert all(p.grad is not None for p in compiled.parameters())
