"""Sigmoid attention (``model.attention=sigmoid``): each key weighed on its own, no softmax.

    SigmoidAttn(X) = σ(QKᵀ/√d + b) V,   b = −log n      (Ramapuram et al. 2025, ICLR,
                                          "Theory, Analysis, and Best Practices for
                                          Sigmoid Self-Attention", §2)

The weights of a row are not normalised across the keys: each is σ of its own score, so a
key a query may not see (causality, padding) contributes 0 rather than −∞ before a
softmax. The bias b = −log n keeps the initial attention norm Σ_j σ(·) near that of a
softmax early in training: the bias the paper recommends, b = −log(n) for sequence length n.

Here n is ``model.max_len``, the context the model is trained for, a constant: the paper
sets n to the training sequence length, the same for every query. The weight of (i, j)
then depends on q_i and k_j alone, never on how many keys are present, so one cached
decoding step computes exactly its row of the full sequence, and padding changes nothing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.nn.attention_kinds import AttentionKind


class SigmoidAttention(AttentionKind):
    """σ(QKᵀ/√d − log n) V with n = ``model.max_len``; 0 for the keys a query may not see.

    ``attend`` computes ``chunk`` queries at a time, so at inference the weights held at
    once are (chunk, T_k), not (T_q, T_k); ``reference`` writes the whole matrix out.
    A row without visible keys outputs 0, as in the softmax kinds.
    """

    chunk = 256
    pattern = None  # type: ignore[assignment]  # no softmax: no FlexAttention path

    @property
    def bias(self) -> float:
        """b = −log n (Ramapuram et al. 2025), n = ``model.max_len``."""
        return -math.log(self.cfg.max_len)

    def weights(
        self, q: Tensor, k: Tensor, key_real: Tensor | None = None, q_offset: int = 0
    ) -> Tensor:
        """σ(QKᵀ/√d + b), zero where query q_offset + i may not see key j: (B, H, T_q, T_k)."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + self.bias
        visible = self.visibility(q.size(2), k.size(2), q_offset, key_real, q.device).dense()
        weights = torch.sigmoid(scores)
        return weights if visible is None else weights.masked_fill(~visible, 0.0)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None,
        q_offset: int = 0, dropout_p: float = 0.0,
    ) -> Tensor:  # fmt: skip
        rows = []
        for start in range(0, q.size(2), self.chunk):
            part = q[:, :, start : start + self.chunk]
            weights = self.weights(part, k, key_real, q_offset + start)  # (B, H, chunk, T_k)
            rows.append(F.dropout(weights, p=dropout_p) @ v if dropout_p > 0 else weights @ v)
        return torch.cat(rows, dim=2)

    def reference(
        self, q: Tensor, k: Tensor, v: Tensor, key_real: Tensor | None = None, q_offset: int = 0
    ) -> Tensor:
        """σ(QKᵀ/√d + b)V with every weight of the (T_q, T_k) matrix at once."""
        return self.weights(q, k, key_real, q_offset) @ v
