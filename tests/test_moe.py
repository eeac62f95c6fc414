"""model.ffn=moe: routing and gating, the balancing losses and bias, parameters, training."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnlab.errors import ConfigError
from attnlab.models import ModelConfig, build_model
from attnlab.nn.moe import MixtureOfExperts, update_biases
from attnlab.tasks.base import auxiliary_losses
from composed_runs import compose_run


def mixture(**options: object) -> MixtureOfExperts:
    torch.manual_seed(0)
    values: dict = dict(n_experts=4, top_k=2, n_shared=1, aux_coef=0.01, z_coef=0.001)
    values.update(options)
    return MixtureOfExperts(6, 5, **values)


def swiglu(expert: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(Swish(xW₁) ⊙ xV)W₂ of one token, from the expert's weights."""
    hidden = F.silu(x @ expert.gate.weight.T) * (x @ expert.linear1.weight.T)
    return hidden @ expert.linear2.weight.T


def token_by_token(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """The mixture's output computed one token at a time, as the equations say."""
    rows = []
    for token in x:
        p = torch.softmax(token @ moe.router.weight.T, -1)
        ranked = sorted(range(moe.n_experts), key=lambda i: -float(p[i] + moe.balance_bias[i]))
        chosen = ranked[: moe.top_k]
        norm = sum(p[i] for i in chosen) if moe.top_k > 1 else 1.0
        y = swiglu(moe.shared, token) if moe.shared is not None else torch.zeros_like(token)
        for i in chosen:
            y = y + p[i] / norm * swiglu(moe.experts[i], token)
        rows.append(y)
    return torch.stack(rows)


def test_routing_by_hand_picks_the_top_k_and_renormalises_their_gates() -> None:
    moe = mixture(n_experts=3, top_k=2, n_shared=0)
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[0, 0] = moe.router.weight[1, 1] = 1.0
    x = torch.zeros(1, 6)
    x[0, 0], x[0, 1] = math.log(3), math.log(2)  # logits (log 3, log 2, 0): p = (1/2, 1/3, 1/6)
    _, probs, chosen, gates = moe.route(x)
    torch.testing.assert_close(probs, torch.tensor([[1 / 2, 1 / 3, 1 / 6]]))
    assert chosen.tolist() == [[0, 1]]
    torch.testing.assert_close(gates, torch.tensor([[3 / 5, 2 / 5]]))
    moe.balance_bias.copy_(torch.tensor([0.0, 0.0, 0.25]))  # p + b = (1/2, 1/3, 5/12)
    _, probs, chosen, gates = moe.route(x)
    assert chosen.tolist() == [[0, 2]]  # the bias chooses; the gates are p's, renormalised
    torch.testing.assert_close(gates, torch.tensor([[3 / 4, 1 / 4]]))


@pytest.mark.parametrize(("top_k", "n_shared", "biased"),
                         [(1, 0, False), (2, 1, False), (2, 0, True), (3, 2, True)])  # fmt: skip
@torch.no_grad()
def test_the_mixture_equals_a_token_by_token_loop(top_k: int, n_shared: int, biased: bool) -> None:
    moe = mixture(top_k=top_k, n_shared=n_shared).eval()
    if biased:
        moe.balance_bias.copy_(torch.tensor([0.3, -0.2, 0.0, 0.1]))
    x = torch.randn(2, 5, 6)
    expected = token_by_token(moe, x.reshape(-1, 6)).reshape(2, 5, 6)
    torch.testing.assert_close(moe(x), expected)


def test_the_balancing_loss_is_alpha_n_sum_of_f_times_p() -> None:
    moe = mixture(aux_coef=0.1, z_coef=0.0).train()
    x = torch.randn(7, 6)
    moe(x)
    _, probs, chosen, _ = moe.route(x)
    f = torch.tensor([float((chosen == i).sum()) / (7 * 2) for i in range(4)])
    expected = 0.1 * 4 * sum(f[i] * probs[:, i].mean() for i in range(4))
    assert set(moe.aux_losses) == {"moe_aux"}
    torch.testing.assert_close(moe.aux_losses["moe_aux"], expected)


def test_a_uniform_router_costs_alpha_and_a_z_loss_of_beta_log_n_squared() -> None:
    moe = mixture(aux_coef=0.1, z_coef=0.01).train()
    with torch.no_grad():
        moe.router.weight.zero_()  # p = 1/E, logits 0, logsumexp = log E
    moe(torch.randn(9, 6))
    torch.testing.assert_close(moe.aux_losses["moe_aux"], torch.tensor(0.1))
    torch.testing.assert_close(moe.aux_losses["router_z"], torch.tensor(0.01 * math.log(4) ** 2))


def test_the_auxiliary_losses_are_collected_once_and_carry_gradients() -> None:
    model = torch.nn.Sequential(mixture(), mixture()).train()
    model(torch.randn(3, 6))
    collected = auxiliary_losses(model)
    assert set(collected) == {"moe_aux", "router_z"}
    sum(collected.values()).backward()
    assert all(m.router.weight.grad is not None for m in model)
    assert auxiliary_losses(model) == {}  # a second collection finds none


def test_the_bias_moves_gamma_towards_the_mean_load_after_a_step() -> None:
    moe = mixture(bias_rate=0.5)
    moe.step_load = torch.tensor([5.0, 1.0, 0.0, 2.0])  # mean 2
    moe.update_bias()
    assert moe.balance_bias.tolist() == [-0.5, 0.5, 0.5, 0.0]
    assert moe.step_load is None  # the next step counts afresh


def test_the_load_of_every_forward_since_the_last_step_counts() -> None:
    moe = mixture(bias_rate=1.0).train()
    for _ in range(3):  # accumulated batches of one optimizer step
        moe(torch.randn(4, 6))
    assert moe.step_load is not None and moe.step_load.sum() == 3 * 4 * 2
    assert "balance_bias" in moe.state_dict()  # checkpointed: a resumed run routes alike


def test_every_expert_gets_a_gradient_even_with_no_token() -> None:
    moe = mixture(n_experts=4, top_k=1, n_shared=0).train()
    with torch.no_grad():
        moe.balance_bias.copy_(torch.tensor([10.0, 0.0, 0.0, 0.0]))  # all to expert 0
    moe(torch.randn(5, 6)).sum().backward()
    assert all(p.grad is not None for p in moe.parameters())  # DDP waits for every gradient


def model_config(**overrides: object) -> ModelConfig:
    values: dict = dict(name="decoder_only", vocab_size=40, d_model=16, n_heads=2, n_layers=2,
                        ffn="moe", moe_experts=4, moe_top_k=1, moe_shared_experts=1)  # fmt: skip
    values.update(overrides)
    return ModelConfig.from_dict(values)


def test_active_parameters_leave_out_the_experts_a_token_skips() -> None:
    cfg = model_config()
    model = build_model(cfg)
    expert = 3 * cfg.d_model * cfg.ff_dim  # a SwiGLU without biases
    skipped = cfg.n_layers * (cfg.moe_experts - cfg.moe_top_k) * expert
    assert model.num_params() - model.num_active_params() == skipped
    dense = build_model(ModelConfig.from_dict(dict(name="decoder_only", vocab_size=40)))
    assert dense.num_active_params() == dense.num_params()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ffn": "swiglu", "moe_experts": 4}, "applies to model.ffn=moe"),
        ({"moe_top_k": 5}, "exceeds model.moe_experts=4"),
        ({"moe_aux_coef": -0.1}, "must be a finite number >= 0"),
        ({"moe_shared_experts": -1}, "must be an integer >= 0"),
    ],
)
def test_bad_moe_keys_are_refused_in_one_line(overrides: dict, message: str) -> None:
    values: dict = dict(name="decoder_only", ffn="moe", moe_experts=4)
    values.update(overrides)
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict(values)


def test_a_moe_run_trains_logs_its_routing_and_saves_its_bias(tmp_path: Path) -> None:
    from attnlab.cli.run import train

    overrides = [
        "data=copy", "model=decoder_only", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=1", "model.ffn=moe", "model.moe_experts=4", "model.moe_bias_rate=0.01",
        "data.train_size=64", "data.val_size=16", "data.batch_size=16", "trainer.max_steps=8",
        "trainer.log_every_n_steps=2", "trainer.enable_progress_bar=false", "test=false",
        "callbacks=none",
    ]  # fmt: skip
    result = train(compose_run(overrides, tmp_path), tmp_path)
    assert result["status"] == "completed"
    assert result["active_params"] < result["params"]
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    logged = {k for row in rows for k, v in row.items() if v}
    names = ("moe_aux", "router_z", "moe_load_max", "moe_load_cv", "router_entropy")
    assert {f"train/{n}" for n in names} <= logged
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert losses[-1] < losses[0]
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    bias = state["model.decoder.layers.0.ffn.balance_bias"]
    assert 0 < bias.abs().max() <= 0.01 * 8 + 1e-6  # ±γ a step, for 8 steps


def test_activation_checkpointing_moves_the_bias_as_without_it() -> None:
    """Recomputing a layer in the backward pass routes its tokens again (counted twice, the
    sign of mean load − load is the same)."""
    biases = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = build_model(model_config(moe_bias_rate=0.1, activation_checkpointing=checkpointing))
        model.train()(torch.randint(6, 40, (3, 9))).sum().backward()
        update_biases(model)
        biases.append(torch.cat([m.balance_bias for m in model.modules()
                                 if isinstance(m, MixtureOfExperts)]))  # fmt: skip
    assert biases[0].abs().sum() > 0
    torch.testing.assert_close(biases[1], biases[0])


def test_the_coordinate_check_measures_a_mixture_as_one_ffn_per_layer() -> None:
    from attnlab.coord_check import _hooks

    model, record = build_model(model_config()), defaultdict(list)
    _hooks(model, record)
    model(torch.randint(6, 40, (2, 5)))
    assert len(record["ffn"]) == model.cfg.n_layers  # not one per expert (some see no token)
    assert all(math.isfinite(v) for v in record["ffn"])


def test_the_bias_moves_once_per_optimizer_step_over_accumulated_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.cli.run import train

    loads: list[float] = []  # at each bias update
    forwards: list[float] = []  # assignments of each training forward
    update, record = MixtureOfExperts.update_bias, MixtureOfExperts._record

    def counted_update(self: MixtureOfExperts) -> None:
        loads.append(float(self.step_load.sum()))
        update(self)

    def counted_record(self: MixtureOfExperts, *args: torch.Tensor) -> None:
        forwards.append(float(args[2].numel()))
        record(self, *args)

    monkeypatch.setattr(MixtureOfExperts, "update_bias", counted_update)
    monkeypatch.setattr(MixtureOfExperts, "_record", counted_record)
    overrides = [
        "data=copy", "model=decoder_only", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=1", "model.ffn=moe", "model.moe_top_k=2", "model.moe_bias_rate=0.01",
        "data.train_size=64", "data.val_size=16", "data.batch_size=4", "trainer.max_steps=3",
        "trainer.accumulate_grad_batches=2", "trainer.enable_progress_bar=false", "test=false",
        "callbacks=none", "trainer.val_check_interval=null",
    ]  # fmt: skip
    assert train(compose_run(overrides, tmp_path), tmp_path)["status"] == "completed"
    assert len(forwards) == 6  # two batches a step
    assert loads == [sum(forwards[i : i + 2]) for i in (0, 2, 4)]
