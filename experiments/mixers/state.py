"""What each arm of the mixers study keeps to decode: bytes of the decoding cache after a prompt.

    python experiments/mixers/state.py --arm NAME "OVERRIDES" [--arm …] [--widths 32,64]

For each arm (its experiment and overrides, as run.sh sweeps it) and each width of an MQAR
arm, the model is built with random weights, reads one prompt of the task's length at batch
1, and the cache it then holds is counted: every layer's keys and values for softmax layers
(a sliding window's last w of them; latent attention's [c_KV; k^R]), linear attention's
running sums (S, Z), Mamba-2's and Gated DeltaNet's recurrent state and conv window. This is
the "state size" of Zoology (Arora et al. 2024, §4): what a model carries from the context to
answer a query. Bytes in float32. Nothing is timed; the numbers depend on the shapes only.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

# Tiny Shakespeare's 65 characters + attnlab's 6 specials: the cache does not depend on it
SHAKESPEARE_VOCAB = 71


def cache_bytes(cache: Any) -> int:
    """Bytes held by a decoding cache (``attnlab.inference.caches.DecodingCache``)."""
    from attnlab.inference.caches import RunningSums

    total = 0
    for layer in cache.layers:
        held = layer.self_attn
        if hasattr(held, "tensors"):  # Mamba-2's and Gated DeltaNet's state
            tensors = held.tensors()
        elif isinstance(held, RunningSums):  # linear attention: S and Z, not the last keys
            tensors = list(held.state)
        else:  # keys and values (all of them, or a window's)
            tensors = [held.past.k, held.past.v]
        total += sum(t.numel() * t.element_size() for t in tensors)
    return total


def measure(overrides: list[str]) -> tuple[int, int, int]:
    """(cache bytes after one prompt, prompt length, parameters) of the composed model."""
    import torch

    from attnlab.cli import pipeline
    from attnlab.cli.compose import compose_config
    from attnlab.cli.pipeline import container
    from attnlab.data.base import NUM_SPECIAL
    from attnlab.inference.decoding import start_decoding
    from attnlab.models import ModelConfig, build_model

    cfg = compose_config(overrides)
    if "n_pairs" in cfg.data:  # MQAR: its data module knows both (nothing is generated yet)
        recall = pipeline.build_data(cfg)
        length, vocab = recall.sequence_length, recall.vocab_size
    else:
        length, vocab = int(cfg.data.block_size), SHAKESPEARE_VOCAB
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict({**container(cfg.model), "vocab_size": vocab}),
                        "lm").eval()  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(NUM_SPECIAL, vocab, (1, length), generator=generator)
    with torch.inference_mode():
        state = start_decoding(model, prompt, use_cache=True)
        state.logits()
    params = sum(p.numel() for p in model.parameters())
    return cache_bytes(state.cache), length, params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arm", nargs=2, action="append", metavar=("NAME", "OVERRIDES"),
                        required=True)  # fmt: skip
    parser.add_argument("--widths", default="32,64", help="model.d_model of the MQAR arms")
    args = parser.parse_args(argv)
    print("| arm | model.d_model | tokens | cache bytes | bytes / token | parameters |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, overrides in args.arm:
        words = shlex.split(overrides)
        widths = args.widths.split(",") if name.startswith("mqar_") else [None]
        for width in widths:
            extra = [f"model.d_model={width}"] if width else []
            held, length, params = measure(words + extra)
            shown = width or "64"
            print(f"| {name} | {shown} | {length} | {held:,} | {held / length:,.0f} | "
                  f"{params:,} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
