"""Decoding: greedy, sampling (temperature, top-k, top-p) and beam search.

Incremental decoding keeps a key/value cache per self-attention layer and the
projected encoder K/V for cross-attention, so each new token costs one
position of work instead of the whole prefix. ``use_cache=False`` recomputes
everything at every step (the reference the cache is tested against).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.data.base import BOS, EOS, MASK, PAD
from attnlab.models.stack import DecodingCache
from attnlab.models.transformer import DecoderOnly, EncoderDecoder, TransformerModel
from attnlab.options import STRATEGIES, DecodeConfig

__all__ = ["STRATEGIES", "DecodeConfig", "generate", "filter_logits"]

NEVER_GENERATED = (PAD, BOS, MASK)


class Stepper:
    """Feeds one architecture token by token; rows can be repeated and reordered."""

    def __init__(self, model: TransformerModel, inputs: Tensor, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        self.cache: DecodingCache | None = model.new_cache() if use_cache else None  # type: ignore[operator]
        if isinstance(model, EncoderDecoder):
            self.memory, self.memory_real = model.encode(inputs)
            self.tokens = torch.full((inputs.size(0), 1), BOS, device=inputs.device)
            self.positions: Tensor | None = None
            self.key_real: Tensor | None = None
        else:  # decoder-only: a left-padded prompt, positions counted over real tokens
            self.tokens = inputs
            self.key_real = inputs != PAD
            self.padded = not bool(self.key_real.all())
            self.positions = (self.key_real.long().cumsum(-1) - 1).clamp(min=0)
            self.prefix_len = (
                torch.full((inputs.size(0),), inputs.size(1), device=inputs.device)
                if model.cfg.prefix_lm
                else None
            )
        self._fed = 0  # tokens already in the cache

    def logits(self) -> Tensor:
        """Next-token logits (rows, vocab) given every token so far."""
        new = self.tokens[:, self._fed :] if self.use_cache else self.tokens
        if isinstance(self.model, EncoderDecoder):
            hidden = self.model.decoder(
                new, memory=self.memory, memory_real=self.memory_real, cache=self.cache
            )
        else:
            assert isinstance(self.model, DecoderOnly)
            start = self._fed if self.use_cache else 0
            key_real = None  # no padding among the new tokens: no mask to build
            if self.padded and not (self.use_cache and start > 0):
                key_real = self.key_real[:, start:]  # generated tokens are never padding
            hidden = self.model.hidden(
                new,
                positions=self.positions[:, start:],
                key_real=key_real,
                cache=self.cache,
                prefix_len=self.prefix_len,
            )
        self._fed = self.tokens.size(1)
        return self.model.lm_head(hidden[:, -1]).float()  # only the last position predicts

    def append(self, token: Tensor) -> None:
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)
        if self.positions is not None:
            self.positions = torch.cat([self.positions, self.positions[:, -1:] + 1], dim=1)
            assert self.key_real is not None
            self.key_real = torch.cat([self.key_real, torch.ones_like(token[:, None]).bool()], 1)

    def select(self, index: Tensor) -> None:
        """Keep rows ``index`` (repeat for beams, reorder after a beam step)."""
        self.tokens = self.tokens.index_select(0, index)
        if isinstance(self.model, EncoderDecoder):
            self.memory = self.memory.index_select(0, index)
            self.memory_real = self.memory_real.index_select(0, index)
        else:
            assert self.positions is not None and self.key_real is not None
            self.positions = self.positions.index_select(0, index)
            self.key_real = self.key_real.index_select(0, index)
            if self.prefix_len is not None:
                self.prefix_len = self.prefix_len.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def _ban_specials(logits: Tensor) -> Tensor:
    logits[:, list(NEVER_GENERATED)] = float("-inf")
    return logits


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
    model: TransformerModel,
    inputs: Tensor,
    cfg: DecodeConfig,
    eos_id: int | None = EOS,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Generate continuations, (B, T_new) right-padded, EOS removed.

    ``inputs``: source tokens (B, S) for an encoder-decoder, or a left-padded
    prompt (B, P) for a decoder-only model.
    """
    max_new = cfg.max_new_tokens or inputs.size(1) + 50
    if cfg.strategy == "beam":
        return beam_search(model, inputs, cfg, max_new, eos_id)
    stepper = Stepper(model, inputs, cfg.use_cache)
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
        token = token.masked_fill(finished, PAD)
        if eos_id is not None:
            finished |= token == eos_id
            token = token.masked_fill(token == eos_id, PAD)
        out.append(token)
        if eos_id is not None and bool(finished.all()):
            break
        stepper.append(token)
    return torch.stack(out, dim=1) if out else inputs.new_full((B, 1), PAD)


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^α  (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(
    model: TransformerModel, inputs: Tensor, cfg: DecodeConfig, max_new: int, eos_id: int | None
) -> Tensor:
    """Beam search scored by log P(Y|X) / lp(Y); a hypothesis ends at EOS.

    A sentence stops once it holds ``beam_size`` finished hypotheses and no
    live beam can still beat the best of them (scores only fall as a beam
    grows, and lp is at most lp(max_new)).
    """
    B, K = inputs.size(0), cfg.beam_size
    stepper = Stepper(model, inputs, cfg.use_cache)
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
