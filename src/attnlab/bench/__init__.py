"""``attnlab-bench``: attnlab's speed against reference implementations.

Training steps of attnlab's decoder-only and encoder-decoder against Hugging Face
GPT-2 and ``torch.nn.Transformer`` at the same sizes, Lightning's per-step cost,
the KV cache, and the fused against the explicit attention kernel. Contenders
take turns; medians and their ratio are reported (docs/performance.md).
"""

from attnlab.bench.cli import main

__all__ = ["main"]
