"""What every token mixer in the attention's place (``model.attention=mamba2``,
``gated_deltanet``) owes its decoder, checked once for each: decoding one token at a time
gives the outputs of the whole sequence at once, the decoding state does not grow with the
tokens generated, and left padding changes no logit. Each mixer's own equations are checked
in tests/test_mamba2.py and tests/test_gated_deltanet.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from attnlab.inference import start_decoding
from attnlab.models import ModelConfig, build_model
from attnlab.nn.gated_deltanet import GatedDeltaNetMixer
from attnlab.nn.mamba2 import Mamba2Mixer
from test_gated_deltanet import GDN
from test_mamba2 import MAMBA2


@dataclass(frozen=True)
class Mixer:
    config: dict[str, Any]
    module: type[torch.nn.Module]
    chunk_key: str  # its chunk length, set below the prompt's so a prompt spans chunks
    tolerance: dict[str, float]  # decoding step by step against the chunked forward
    state_bytes: Callable[[], int]  # float32, batch 2, 2 layers, d_model 16, 2 heads


def mamba2_state_bytes() -> int:
    # h (B, H, P, N) and the conv's last K − 1 inputs of (x, B, C), per layer
    H, P, N, K = 2, 2 * 16 // 2, 8, 4
    return 2 * 2 * 4 * (H * P * N + (2 * 16 + 2 * N) * (K - 1))


def gated_deltanet_state_bytes() -> int:
    # S (B, H, d_v, d_k) and the conv's last K − 1 inputs of (q, k, v), per layer
    H, dk, dv, K = 2, 16 // 2, 2 * 16 // 2, 4
    return 2 * 2 * 4 * (H * dv * dk + (2 * 16 + H * dv) * (K - 1))


MIXERS = {
    # the block's conv window and SSM state carried one token at a time: the paper's
    # recurrent mode = its chunked mode
    "mamba2": Mixer(MAMBA2, Mamba2Mixer, "ssm_chunk", {}, mamba2_state_bytes),
    # the conv window and the state S carried one token at a time
    "gated_deltanet": Mixer(GDN, GatedDeltaNetMixer, "delta_chunk", {"rtol": 0, "atol": 1e-12},
                            gated_deltanet_state_bytes),
}  # fmt: skip


@pytest.mark.parametrize("name", list(MIXERS))
def test_the_mixer_decoding_step_by_step_equals_its_chunked_forward(name: str) -> None:
    mixer = MIXERS[name]
    cfg = ModelConfig.from_dict({**mixer.config, mixer.chunk_key: 3})
    torch.manual_seed(0)
    module = mixer.module(cfg, causal=True).double()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    cache = module.keeps.own_cache()
    steps = torch.cat([module(x[:, :4], None, cache=cache)]  # a prompt, then single tokens
                      + [module(x[:, t : t + 1], None, cache=cache) for t in range(4, 10)], 1)
    torch.testing.assert_close(steps, module(x, None), **mixer.tolerance)


@pytest.mark.parametrize("name", list(MIXERS))
def test_the_decoding_state_does_not_grow_with_the_tokens_generated(name: str) -> None:
    model = build_model(ModelConfig.from_dict(MIXERS[name].config)).eval()
    prompt = torch.randint(6, 20, (2, 5), generator=torch.Generator().manual_seed(0))
    state = start_decoding(model, prompt, use_cache=True)

    def layer_state_bytes() -> int:
        return sum(t.numel() * t.element_size() for layer in state.cache.layers
                   for t in layer.self_attn.tensors())  # fmt: skip

    state.append(state.logits().argmax(-1))
    after_one = layer_state_bytes()
    for _ in range(20):
        state.append(state.logits().argmax(-1))
    assert layer_state_bytes() == after_one > 0
    assert after_one == MIXERS[name].state_bytes()


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "recomputed"])
def test_left_padding_changes_no_logit_of_a_prompt(name: str, use_cache: bool) -> None:
    """Padded positions leave the state as it was (Mamba-2: Δ = 0; Gated DeltaNet: α = 1,
    β = 0) and feed the conv zeros: the prompt is read as if it started after them."""
    model = build_model(ModelConfig.from_dict(MIXERS[name].config)).eval().double()
    prompt = torch.randint(6, 20, (1, 5), generator=torch.Generator().manual_seed(0))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], dim=1)  # PAD = 0
    alone, behind_padding = (start_decoding(model, p, use_cache) for p in (prompt, padded))
    for _ in range(3):
        logits = alone.logits()
        torch.testing.assert_close(behind_padding.logits(), logits)
        token = logits.argmax(-1)
        alone.append(token)
        behind_padding.append(token)
