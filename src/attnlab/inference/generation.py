"""Decoding: greedy, sampling (temperature, top-k, top-p) and beam search.

Every architecture is driven through its decoding state
(:func:`~attnlab.inference.decoding.start_decoding`), which feeds it one token at a time
and reorders its cache for beams. A Transformer's cache holds each self-attention layer's keys
and values and the projected encoder K/V for cross-attention, so each new token
costs one position of work instead of the whole prefix; a recurrent model's
cache is its state. ``use_cache=False`` recomputes everything at every step
(the reference the cache is tested against).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from attnlab.inference.decoding import DecodingState, start_decoding
from attnlab.models.interface import Architecture
from attnlab.options import STRATEGIES, DecodeConfig
from attnlab.special_tokens import BOS, EOS, MASK, PAD

__all__ = ["STRATEGIES", "DecodeConfig", "generate", "filter_logits"]

NEVER_GENERATED = (PAD, BOS, MASK)


@functools.cache
def _never_generated(device: torch.device) -> Tensor:
    return torch.tensor(NEVER_GENERATED, device=device)


def _ban_specials(logits: Tensor) -> Tensor:
    return logits.index_fill_(1, _never_generated(logits.device), float("-inf"))


def filter_logits(logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """Keep the k most likely tokens and/or the nucleus: the smallest set of most likely
    tokens with Σ P(x) ≥ p (Holtzman et al. 2020, §3.1), ``top_p`` in (0, 1]."""
    if top_k is not None and top_k > 0:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # mass before this token already ≥ p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits


def _pad_rows(rows: list[list[int]], device: torch.device) -> Tensor:
    width = max(1, max((len(r) for r in rows), default=1))
    out = torch.full((len(rows), width), PAD, dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


@torch.inference_mode()  # no autograd bookkeeping at all: ~15 % of a cached step
def generate(
    model: Architecture,
    inputs: Tensor,
    cfg: DecodeConfig,
    eos_id: int | None = EOS,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Generate continuations, (B, T_new) right-padded, EOS removed.

    ``inputs`` laid out as the model's ``feeding.prompt_layout`` says: source tokens
    (B, S), right-padded (``source``), or a left-padded prompt (B, P) (``prompt``).
    """
    max_new = cfg.max_new_tokens or inputs.size(1) + 50
    room = position_room(model, inputs)
    if room is not None:  # a position table ends at model.max_len: stop there
        max_new = max(0, min(max_new, room))
    if cfg.strategy == "beam":
        return beam_search(model, inputs, cfg, max_new, eos_id)
    stepper = start(model, inputs, cfg, max_new)
    B = inputs.size(0)
    finished = torch.zeros(B, dtype=torch.bool, device=inputs.device)
    out: list[Tensor] = []
    for _ in range(max_new):
        logits = _ban_specials(stepper.logits())
        if cfg.strategy == "greedy":
            token = logits.argmax(-1)
        else:
            logits = filter_logits(logits / max(cfg.temperature, 1e-6), cfg.top_k, cfg.top_p)
            token = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
        if eos_id is not None:  # without an EOS no row finishes
            token = token.masked_fill(finished, PAD)
            finished |= token == eos_id
            token = token.masked_fill(token == eos_id, PAD)
        out.append(token)
        if eos_id is not None and bool(finished.all()):
            break
        stepper.append(token)
    return torch.stack(out, dim=1) if out else inputs.new_full((B, 1), PAD)


def has_position_table(model: Architecture) -> bool:
    """Whether the model's positions come from a table of ``model.max_len`` rows."""
    from attnlab.nn.positions import POSITIONS

    return "pos" in model.cfg and POSITIONS.get(model.cfg.pos).max_len_bound


def position_room(model: Architecture, inputs: Tensor) -> int | None:
    """How many new tokens a position table (``model.pos=learned``) leaves after the
    inputs — BOS for a model that encodes a source, else the prompt; None: no table."""
    cfg = model.cfg
    if not has_position_table(model):
        return None
    used = 1 if model.feeding.prompt_layout(model.task) == "source" else inputs.size(1)
    return cfg.max_len - used


def start(model: Architecture, inputs: Tensor, cfg: DecodeConfig, max_new: int) -> DecodingState:
    """The model's decoding state, with a static cache and a compiled step where it has
    them: ``decode.compile=true`` compiles the step (``auto``: on CUDA only; off by default,
    as compiling takes longer than most generations on a CPU), ``decode.cache=auto`` is
    static when the step is compiled (in eager mode the dynamic cache is faster)."""
    stepper = start_decoding(model, inputs, cfg.use_cache)
    compile = cfg.compile if cfg.compile != "auto" else inputs.device.type == "cuda"
    if cfg.use_cache and (cfg.cache == "static" or (cfg.cache == "auto" and compile)):
        stepper.reserve(max_new, bool(compile))
    return stepper


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^α  (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(
    model: Architecture, inputs: Tensor, cfg: DecodeConfig, max_new: int, eos_id: int | None
) -> Tensor:
    """Beam search scored by log P(Y|X) / lp(Y); a hypothesis ends at EOS.

    A sentence stops once it holds ``beam_size`` finished hypotheses and no
    live beam can still beat the best of them (scores only fall as a beam
    grows, and lp is at most lp(max_new)).
    """
    B, K = inputs.size(0), cfg.beam_size
    stepper = start(model, inputs, cfg, max_new)
    stepper.select(torch.arange(B, device=inputs.device).repeat_interleave(K))
    scores = torch.zeros(B, K, device=inputs.device)
    scores[:, 1:] = float("-inf")  # the first step expands beam 0 only
    hyps: list[list[list[int]]] = [[[] for _ in range(K)] for _ in range(B)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B
    bound = gnmt_length_penalty(max_new, cfg.length_penalty)
    for step in range(max_new):
        logp = _ban_specials(stepper.logits()).log_softmax(-1)  # (B·K, V)
        V = logp.size(-1)
        total = (scores.unsqueeze(-1) + logp.view(B, K, V)).view(B, K * V)
        top_scores, top_ids = total.topk(min(2 * K, K * V), dim=-1)
        top_scores_l, top_ids_l = top_scores.tolist(), top_ids.tolist()
        rows, tokens, new_scores, new_hyps = [], [], [], []
        for b in range(B):
            alive: list[tuple[int, int, float]] = []
            for s, idx in zip(top_scores_l[b], top_ids_l[b], strict=True):
                beam, token = divmod(idx, V)
                if s == float("-inf") or done[b]:
                    break
                if eos_id is not None and token == eos_id:
                    lp = gnmt_length_penalty(step + 1, cfg.length_penalty)
                    finished[b].append((s / lp, hyps[b][beam]))
                elif len(alive) < K:
                    alive.append((beam, token, s))
                if len(alive) == K:
                    break
            best_done = max((f[0] for f in finished[b]), default=float("-inf"))
            if alive and len(finished[b]) >= K and best_done >= alive[0][2] / bound:
                done[b] = True
            while len(alive) < K:  # done sentences (or tiny vocabularies) keep dummy beams
                alive.append((0, PAD, float("-inf")))
            for beam, token, s in alive:
                rows.append(b * K + beam)
                tokens.append(token)
                new_scores.append(s)
                new_hyps.append(hyps[b][beam] + [token])
        if all(done):
            break
        index = torch.tensor(rows, device=inputs.device)
        stepper.select(index)
        stepper.append(torch.tensor(tokens, device=inputs.device))
        scores = torch.tensor(new_scores, device=inputs.device).view(B, K)
        hyps = [new_hyps[b * K : (b + 1) * K] for b in range(B)]
    best: list[list[int]] = []
    for b in range(B):
        if not done[b]:  # out of length: live beams compete with the finished ones
            lp = gnmt_length_penalty(max_new, cfg.length_penalty)
            for k in range(K):
                if scores[b, k] > float("-inf"):
                    finished[b].append((float(scores[b, k]) / lp, hyps[b][k]))
        best.append(max(finished[b], key=lambda f: f[0])[1] if finished[b] else [])
    return _pad_rows(best, inputs.device)
