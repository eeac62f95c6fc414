"""Inputs the decoding tests of every architecture share: a small vocabulary, padded batches
of sources and prompts, teacher-forced tokens, and the logits of a decoding state driven
through them."""

from __future__ import annotations

import torch

from attnlab.inference import start_decoding
from attnlab.special_tokens import PAD

VOCAB = 16


def sources() -> torch.Tensor:
    """Three sources of lengths 6, 4 and 2, padded on the right."""
    src = torch.randint(6, VOCAB, (3, 6), generator=torch.Generator().manual_seed(1))
    src[1, 4:] = PAD
    src[2, 2:] = PAD
    return src


def left_padded_prompts() -> torch.Tensor:
    """Three prompts of lengths 6, 4 and 2, padded on the left."""
    prompts = torch.randint(6, VOCAB, (3, 6), generator=torch.Generator().manual_seed(1))
    prompts[1, :2] = PAD
    prompts[2, :4] = PAD
    return prompts


FORCED = torch.randint(6, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))


@torch.no_grad()
def step_logits(
    model: torch.nn.Module, inputs: torch.Tensor, use_cache: bool, forced: torch.Tensor = FORCED
) -> torch.Tensor:
    """Next-token logits before and after each teacher-forced token, (B, 6, vocab)."""
    stepper = start_decoding(model, inputs, use_cache)
    logits = [stepper.logits()]
    for token in forced.T:
        stepper.append(token)
        logits.append(stepper.logits())
    return torch.stack(logits, dim=1)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
