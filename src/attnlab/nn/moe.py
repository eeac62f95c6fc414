"""Mixture-of-experts feed-forward (``model.ffn=moe``): each token goes to k of E experts.

Router      p = softmax(x W_r) ∈ ℝᴱ                        Shazeer et al. 2017, eq. 3 (no noise)
Selection   the k experts with the largest pᵢ + bᵢ             DeepSeek-V3 2024, §2.1.2 (b = 0
            (b: a balancing bias, for selection only)         unless model.moe_bias_rate > 0)
Gates       gᵢ = pᵢ / Σⱼ∈top-k pⱼ  when k > 1                 Mixtral; DeepSeek-V3 eq. 13
            gᵢ = pᵢ                 when k = 1                 Switch, Fedus et al. 2022, eq. 2
Output      y = FFN_shared(x) + Σᵢ∈top-k gᵢ·FFNᵢ(x)            DeepSeekMoE, Dai et al. 2024, eq. 9

Each expert is a SwiGLU of width ``d_ff`` (Shazeer 2020; as Mixtral, DeepSeekMoE and Qwen-MoE
use). The S shared experts, which every token passes through, are one SwiGLU of width S·d_ff:
a sum of S SwiGLUs is one SwiGLU whose hidden units are theirs side by side.

Balancing (each term off at coefficient 0, and the two may be combined as DeepSeek-V3 does):

* auxiliary loss α·E·Σᵢ fᵢ·Pᵢ, fᵢ the share of the N·k assignments that went to expert i and
  Pᵢ the mean of pᵢ over the N tokens: α at uniform routing (Switch, Fedus et al. 2022, eq. 4);
* bias bᵢ ← bᵢ + γ·sign(mean load − loadᵢ) after each optimizer step, on the load of that
  step summed over every rank (DeepSeek-V3, §2.1.2); b is a buffer, saved in checkpoints;
* router z-loss β·mean_t (log Σⱼ exp(x_t W_r)ⱼ)² keeps the router's logits small (ST-MoE,
  Zoph et al. 2022, eq. 5).

Dropless: every token reaches its k experts, there is no capacity and no token is dropped, so
a token's output does not depend on the other tokens of the batch (cached decoding equals
recomputation). Every position is routed and counted in the load, padding included. Experts
run one after the other on the tokens routed to them, every expert on every step (possibly on
no token), so data parallelism sees a gradient for every parameter. Expert parallelism
(experts on different devices) is not implemented.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from attnlab.nn.feedforward import SwiGLU


class MixtureOfExperts(nn.Module):
    """Top-k token-choice routing over ``n_experts`` SwiGLU experts, with shared experts."""

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, *, n_experts: int = 8,
        top_k: int = 2, n_shared: int = 0, aux_coef: float = 0.01, bias_rate: float = 0.0,
        z_coef: float = 0.0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.top_k, self.aux_coef, self.bias_rate, self.z_coef = top_k, aux_coef, bias_rate, z_coef
        self.router = nn.Linear(d_model, n_experts, bias=False)  # W_r
        self.experts = nn.ModuleList(SwiGLU(d_model, d_ff, dropout) for _ in range(n_experts))
        self.shared = SwiGLU(d_model, n_shared * d_ff, dropout) if n_shared else None
        self.register_buffer("balance_bias", torch.zeros(n_experts))  # b: for selection only
        # assignments per expert since the last bias update; not a buffer, which DDP would
        # overwrite with rank 0's at each forward, and None after each update (nothing to save)
        self.step_load: Tensor | None = None
        self.aux_losses: dict[str, Tensor] = {}  # this training forward's, for the task's loss
        self.routing: dict[str, Tensor] = {}  # this training forward's load and entropy

    @property
    def n_experts(self) -> int:
        return len(self.experts)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(N, d) tokens -> router logits (N, E), probabilities p (N, E), the chosen experts
        (N, k) and their gates g (N, k)."""
        logits = self.router(x).float()
        probs = logits.softmax(-1)
        chosen = (probs.detach() + self.balance_bias).topk(self.top_k, dim=-1).indices
        gates = probs.gather(-1, chosen)
        if self.top_k > 1:
            gates = gates / gates.sum(-1, keepdim=True)
        return logits, probs, chosen, gates

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        logits, probs, chosen, gates = self.route(x)
        out = x.new_zeros(x.shape)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # the tokens routed to e
            weighted = expert(x[token]) * gates[token, slot].unsqueeze(-1)
            out.index_add_(0, token, weighted.to(out.dtype))
        if self.shared is not None:
            out = out + self.shared(x)
        if self.training:
            self._record(logits, probs, chosen)
        return out.reshape(shape)

    def _record(self, logits: Tensor, probs: Tensor, chosen: Tensor) -> None:
        """This forward's balancing losses, load and router entropy (training only)."""
        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts).float()
        self.step_load = counts if self.step_load is None else self.step_load + counts
        self.aux_losses = {}
        if self.aux_coef:
            share, mean_prob = counts / chosen.numel(), probs.mean(0)  # fᵢ, Pᵢ
            balance = self.n_experts * (share * mean_prob).sum()
            self.aux_losses["moe_aux"] = self.aux_coef * balance
        if self.z_coef:
            self.aux_losses["router_z"] = self.z_coef * logits.logsumexp(-1).square().mean()
        with torch.no_grad():
            entropy = -(probs * probs.clamp_min(1e-20).log()).sum(-1).mean()
        self.routing = {"load": counts, "entropy": entropy}

    @torch.no_grad()
    def update_bias(self) -> None:
        """bᵢ ← bᵢ + γ·sign(mean load − loadᵢ) over the load since the last update, summed over
        the ranks so that every rank's bias stays the same (DeepSeek-V3, §2.1.2)."""
        load, self.step_load = self.step_load, None
        if self.bias_rate and load is not None:
            if dist.is_available() and dist.is_initialized():
                dist.all_reduce(load)
            self.balance_bias += self.bias_rate * torch.sign(load.mean() - load)

    def inactive_params(self) -> int:
        """Parameters a token does not use: those of the E − k experts it is not routed to."""
        per_expert = sum(p.numel() for p in self.experts[0].parameters())
        return (self.n_experts - self.top_k) * per_expert


def routing_statistics(model: nn.Module) -> dict[str, Tensor]:
    """The last training forward's routing, averaged over the MoE layers: the load's
    max/mean (1 = balanced) and coefficient of variation std/mean (0 = balanced) over experts,
    and the router's entropy in nats (log E = uniform). {} without MoE layers."""
    records = [m.routing for m in model.modules() if isinstance(m, MixtureOfExperts) and m.routing]
    if not records:
        return {}
    loads = torch.stack([r["load"] for r in records])  # (layers, E)
    mean = loads.mean(-1)
    return {
        "moe_load_max": (loads.amax(-1) / mean).mean(),
        "moe_load_cv": (loads.std(-1, correction=0) / mean).mean(),
        "router_entropy": torch.stack([r["entropy"] for r in records]).mean(),
    }


def update_biases(model: nn.Module) -> None:
    """Each MoE layer's balancing bias, from the load of the step just taken."""
    for module in model.modules():
        if isinstance(module, MixtureOfExperts):
            module.update_bias()


def inactive_params(model: nn.Module) -> int:
    """Parameters of ``model`` that one token does not use (unrouted experts)."""
    return sum(m.inactive_params() for m in model.modules() if isinstance(m, MixtureOfExperts))
