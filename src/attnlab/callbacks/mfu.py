"""Model FLOPs utilisation: the FLOPs a step needs, over what the device could do.

    MFU = flops_per_token · tokens/s ÷ peak FLOP/s        (PaLM, Chowdhery et al. 2022, App. B)

``flops_per_token`` counts the matrix products of the architecture actually
configured — projections, attention scores and weighted sums, feed-forward,
output layer; for an encoder-decoder also the cross-attention — at the given
sequence lengths. Multiply-add = 2 FLOPs; training (forward + backward) = 3 ×
forward. For a decoder-only model with d_ff = 4·d_model this is PaLM's
6·N + 12·L·d·T (N = parameters in matrices, T = sequence length); like PaLM and
nanoGPT, full attention counts the whole T×T score matrix even when causal, while the
sparse and kernelised ``model.attention`` kinds count the keys each query attends
(:mod:`attnlab.models.flops`). Norms, activations, softmax and position schemes are
elementwise and not counted.

``peak_flops`` is the datasheet's dense (no 2:4 sparsity) tensor-core peak for
a device named by ``torch.cuda.get_device_name()``. No peak is claimed for CPUs.

Lightning's public ``lightning.fabric.utilities.throughput.get_available_flops(device,
dtype)`` has a table of its own, but it does not do this job, so attnlab keeps
:data:`PEAK_TFLOPS` whole (compared with Lightning 2.6.6's by ``tests/test_mfu.py``):

* it asks the CUDA device present, never a name, while attnlab also reads the peak of a
  device recorded elsewhere (the GPU suite's reports) and of a name on a CPU;
* it gives no peak for the H200 under the names CUDA reports (``NVIDIA H200``,
  ``NVIDIA H200 NVL``; its own H200 figures are those with 2:4 sparsity) nor for the A10,
  and gives the H100 NVL twice the H100 SXM's peak, where attnlab claims none;
* it reads an L40S as an L4 (121 TFLOP/s bf16 instead of 362), and gives the RTX 4090
  its fp32 figure for bf16 (82.6 instead of 165);
* it turns fp32 into tf32 by the process's ``torch.get_float32_matmul_precision()``,
  where attnlab's callers name the precision (``tf32``, ``32-true``).

Where it does give a dense peak (H100 SXM and PCIe, A100, L4, A10G, T4, V100 SXM2) it
agrees with this table to within 0.5%.
"""

from __future__ import annotations

import re

from attnlab.model_config import ModelConfig

TERA = 1e12

# (pattern in torch.cuda.get_device_name(), {precision: dense peak TFLOP/s}); first match wins,
# so more specific names come before the names they contain
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H100 NVL", {}),  # not claimed: its datasheet figures are per card pair
    (r"H100.*(PCIe|PCIE)", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    (r"H100", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}),  # SXM
    # H200 NVL (PCIe, 600 W): NVIDIA's H200 datasheet gives bf16/fp16 1,671 and tf32 835
    # TFLOP/s with 2:4 sparsity (dense = ÷ 2) and fp32 60; not re-checked against a copy of it
    (r"H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H200", {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}),  # SXM
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    (r"A10G", {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2}),  # AWS's A10; the A10's figures
    (r"\bA10\b", {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),  # SXM2; no bf16 on Volta
    (r"\bT4\b", {"fp16": 65.0, "fp32": 8.1}),  # no bf16 on Turing
    (r"RTX 4090", {"bf16": 165.0, "fp16": 165.0, "fp32": 82.6}),  # fp32 accumulate
)


def precision_key(precision: str) -> str:
    """Lightning's precision names ("bf16-mixed", "16-mixed", "32-true", …) -> table keys."""
    text = str(precision).lower()
    if "bf16" in text:
        return "bf16"
    if "tf32" in text:
        return "tf32"
    if text.startswith("16") or "fp16" in text:
        return "fp16"
    return "fp32"


def peak_flops(device_name: str, precision: str = "bf16") -> float | None:
    """Dense peak FLOP/s of a GPU at a precision, or None when not known (and for CPUs)."""
    key = precision_key(precision)
    for pattern, peaks in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return peaks[key] * TERA if key in peaks else None
    return None


def forward_flops(cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
    """Forward FLOPs of one example: ``src_len`` source and ``tgt_len`` target tokens.

    Asked of the architecture (its ``flops``): decoder_only and encoder_only read one
    sequence of src_len + tgt_len tokens (a language model: src_len = 0); encoder_decoder
    encodes src_len tokens and decodes tgt_len; the output layer is applied at every
    decoded position.
    """
    from attnlab.models import ARCHITECTURES

    return ARCHITECTURES.get(cfg.name).flops(cfg, src_len, tgt_len)


def flops_per_token(cfg: ModelConfig, src_len: int, tgt_len: int, training: bool = True) -> float:
    """FLOPs per token (source + target tokens, as the throughput callback counts them)
    of a training step (forward + backward = 3 × forward), or of a forward pass."""
    tokens = src_len + tgt_len
    if tokens <= 0:
        raise ValueError("src_len + tgt_len must be positive")
    return (3 if training else 1) * forward_flops(cfg, src_len, tgt_len) / tokens


def mfu(tokens_per_sec: float, flops_per_token: float, peak: float | None) -> float | None:
    """Achieved FLOP/s over the peak; None without a known peak."""
    if not peak:
        return None
    return tokens_per_sec * flops_per_token / peak
