"""Positional information: one class per scheme, selected by ``model.pos``.

A scheme may act in three places, and implements only the hooks it needs:

* ``embed(x, pos)``        adds an absolute encoding to the token embeddings;
* ``rotary(pos)``          returns (cos, sin) to rotate queries and keys (RoPE);
* ``bias(q_pos, k_pos)``   returns an additive attention bias (ALiBi, T5);
* ``scores(q, k, q_pos, k_pos)``  an additive score term that depends on the queries
                           and keys themselves (Transformer-XL), per layer.

``pos`` holds integer positions, shape (T,) or (B, T): explicit positions let
left-padded batches and cached decoding place every token correctly.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.errors import ConfigError
from attnlab.registry import Registry

POSITIONS: Registry[type[Positions]] = Registry("model.pos")


class Positions(nn.Module):
    """No positional information (``model.pos=none``); base of every scheme.

    ``causal``: every query sees only itself and earlier keys (a decoder that is
    not a prefix-LM). ``needs_grid``: the scheme places tokens on an image's patch
    grid and is built with ``grid=(rows, columns)`` (model=vit).
    """

    needs_grid = False
    max_len_bound = False  # a table of model.max_len positions: none at or past it

    def __init__(self, d_model: int, n_heads: int, max_len: int, causal: bool) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.max_len, self.causal = d_model, n_heads, max_len, causal

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x

    def rotary(self, pos: Tensor) -> tuple[Tensor, Tensor] | None:
        return None

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None

    def check(self, pos: Tensor, last: int | None = None) -> None:
        """Raise ValueError for positions this scheme cannot encode. ``last``: the largest
        position when the caller knows it, so the tensor need not be read (no host sync)."""

    content_dependent = False  # implements ``scores``

    def scores(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Additive term for the scaled scores QKᵀ/√d_head, from q (B, H, Tq, d_head),
        k (B, H, Tk, d_head) and their positions; (B, H, Tq, Tk) or None."""
        return None




def _angles(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """pos / base^(2i/dim) for i < dim/2; shape (..., T, dim/2)."""
    inv_freq = base ** (-torch.arange(0, dim, 2, device=pos.device, dtype=torch.float32) / dim)
    return pos.float().unsqueeze(-1) * inv_freq


class SinusoidalPositions(Positions):
    """PE(pos, 2i) = sin(pos/10000^(2i/d_model)), PE(pos, 2i+1) = cos(…)  (§3.5)."""

    def encoding(self, pos: Tensor) -> Tensor:
        angles = _angles(pos, self.d_model)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # interleaved

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.encoding(pos).to(x.dtype)


class SinusoidalConcatPositions(SinusoidalPositions):
    """The tensor2tensor layout of the same frequencies: all sines, then all cosines."""

    def encoding(self, pos: Tensor) -> Tensor:
        angles = _angles(pos, self.d_model)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


class LearnedPositions(Positions):
    """A trained embedding per absolute position (BERT, GPT-2)."""

    max_len_bound = True

    def __init__(self, d_model: int, n_heads: int, max_len: int, causal: bool) -> None:
        super().__init__(d_model, n_heads, max_len, causal)
        self.table = nn.Embedding(max_len, d_model)

    def check(self, pos: Tensor, last: int | None = None) -> None:
        last = int(pos.max()) if last is None else last
        if last >= self.max_len:
            raise ValueError(
                f"position {last} exceeds model.max_len={self.max_len}; "
                "raise model.max_len or use a relative scheme"
            )

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        return x + self.table(pos)


class GridPositions(Positions):
    """Base of 2-D schemes over a ViT's input ``[CLS], patch₀ … patch_{R·C−1}``.

    Position 0 is the [CLS] token (when the model uses one); position t ≥ 1 is the
    patch in row (t−1) // C, column (t−1) % C, in raster order. With ``model.pool=mean``
    there is no [CLS] token and the patches start at position 1 all the same.
    """

    needs_grid = True

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, causal: bool,
        grid: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(d_model, n_heads, max_len, causal)
        if grid is None:
            raise ConfigError(
                "a 2-D position scheme needs an image's patch grid; use it with model=vit, or "
                "choose a 1-D scheme (model.pos=learned, sinusoidal, rope, …)"
            )
        if d_model % 4:
            raise ConfigError(f"a 2-D position scheme needs model.d_model divisible by 4, "
                              f"got {d_model}")  # fmt: skip
        self.rows, self.columns = grid

    def check(self, pos: Tensor, last: int | None = None) -> None:
        last = int(pos.max()) if last is None else last
        if last > self.rows * self.columns:
            raise ValueError(f"position {last} is outside the {self.rows}×{self.columns} grid")

    def row_column(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        patch = (pos - 1).clamp(min=0)
        return patch // self.columns, patch % self.columns


class Learned2DPositions(GridPositions):
    """Learned row and column embeddings of d_model/2 each, concatenated (Dosovitskiy et al.
    2021, App. D.4, "2-dimensional positional embedding"); [CLS] learns its own vector."""

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, causal: bool,
        grid: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(d_model, n_heads, max_len, causal, grid)
        self.row_table = nn.Embedding(self.rows, d_model // 2)
        self.column_table = nn.Embedding(self.columns, d_model // 2)
        self.cls = nn.Parameter(torch.zeros(d_model))

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        row, column = self.row_column(pos)
        table = torch.cat([self.row_table(row), self.column_table(column)], dim=-1)
        table = torch.where((pos == 0).unsqueeze(-1), self.cls, table)
        return x + table.to(x.dtype)


class Sinusoidal2DPositions(GridPositions):
    """Fixed 2-D sinusoids: §3.5's encoding of the row in the first d_model/2 channels and of
    the column in the last d_model/2 (as MAE, He et al. 2022); [CLS] gets zeros."""

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        row, column = self.row_column(pos)
        half = self.d_model // 2

        def encode(p: Tensor) -> Tensor:
            angles = _angles(p, half)
            return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)

        table = torch.cat([encode(row), encode(column)], dim=-1)
        table = table.masked_fill((pos == 0).unsqueeze(-1), 0.0)
        return x + table.to(x.dtype)


def rotated_dims(d_head: int, fraction: float) -> int:
    """The features of a head that RoPE rotates: ⌊fraction·d_head⌋, as GPT-NeoX and litgpt
    (``rotary_pct``, ``rotary_percentage``) count them."""
    return int(d_head * fraction)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x_2i, x_2i+1) by position·θ_i (RoFormer, Su et al. 2021, eq. 34); with
    fewer angles than pairs (a rotary fraction), only the first 2·len(θ) features, the rest
    passed through unrotated (GPT-NeoX's ``rotary_pct``)."""
    rotated_dims = 2 * cos.size(-1)
    if rotated_dims < x.size(-1):
        rest = x[..., rotated_dims:]
        return torch.cat((apply_rotary(x[..., :rotated_dims], cos, sin), rest), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class RotaryPositions(Positions):
    """Rotary position embedding (Su et al. 2021): rotate Q and K of every head.

    q_mᵀk_n then depends on positions only through m − n. Pair i of r rotated features
    turns by m·θ_i, θ_i = base^(−2i/r) (RoFormer eq. 15, base 10000; ``model.rope_theta``
    sets the base, as Llama's ``rope_theta``). ``fraction``: only the first r =
    ⌊fraction·d_head⌋ features of each head rotate, the others carry no position
    (``model.rotary_fraction``; GPT-NeoX's ``rotary_pct``, Black et al. 2022, §2.1).
    """

    # the rotated dimensions of a head where the attention kind sets them (mla's decoupled
    # d_h^R); None: ⌊fraction·d_head⌋
    rotary_dim: int | None = None

    def __init__(
        self, d_model: int, n_heads: int, max_len: int, causal: bool, theta: float = 10000.0,
        fraction: float = 1.0,
    ) -> None:  # fmt: skip
        super().__init__(d_model, n_heads, max_len, causal)
        self.theta, self.rotated = theta, rotated_dims(d_model // n_heads, fraction)

    def rotary(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        angles = _angles(pos, self.rotary_dim or self.rotated, self.theta)  # (…, T, r/2)
        if angles.dim() == 2:
            angles = angles.unsqueeze(0)
        angles = angles.unsqueeze(1)  # (B|1, 1, T, r/2): broadcast over heads
        return angles.cos(), angles.sin()


def alibi_slopes(n_heads: int) -> Tensor:
    """Geometric slopes 2^(-8/n), 2^(-16/n), … (Press et al. 2022, §3).

    For a head count that is not a power of two, take the slopes of the closest
    smaller power and fill in every other slope of the next one, as the paper does.
    """

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    closest = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = power_of_two(closest)
    if closest < n_heads:
        slopes += power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


class ALiBiPositions(Positions):
    """Attention with linear biases: score_ij −= m_h · |i − j| (Press et al. 2022)."""

    def __init__(self, d_model: int, n_heads: int, max_len: int, causal: bool) -> None:
        super().__init__(d_model, n_heads, max_len, causal)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)).abs().float()  # (…, Tq, Tk)
        if distance.dim() == 2:
            distance = distance.unsqueeze(0)
        return -self.slopes.view(1, -1, 1, 1) * distance.unsqueeze(1)  # (B|1, H, Tq, Tk)


class T5RelativePositions(Positions):
    """Learned scalar bias per head and relative-distance bucket (Raffel et al. 2020).

    Offsets are exact up to ``num_buckets/2`` (per direction), then log-spaced up
    to ``max_distance``; encoders and prefix-LMs use both directions, causal
    decoders only the past (Mesh TF: bidirectional unless fully autoregressive).
    """

    num_buckets, max_distance = 32, 128

    def __init__(self, d_model: int, n_heads: int, max_len: int, causal: bool) -> None:
        super().__init__(d_model, n_heads, max_len, causal)
        self.table = nn.Embedding(self.num_buckets, n_heads)

    def bucket(self, relative: Tensor) -> Tensor:
        """Bucket index of key_pos − query_pos."""
        buckets, n = self.num_buckets, -relative
        offset = torch.zeros_like(n)
        if self.causal:
            n = n.clamp(min=0)
        else:
            buckets //= 2
            offset = (n < 0).long() * buckets
            n = n.abs()
        exact = buckets // 2
        log_ratio = torch.log(n.float().clamp(min=1) / exact) / math.log(self.max_distance / exact)
        large = (exact + (log_ratio * (buckets - exact)).long()).clamp(max=buckets - 1)
        return offset + torch.where(n < exact, n, large)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        relative = k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)  # (…, Tq, Tk)
        values = self.table(self.bucket(relative))  # (…, Tq, Tk, H)
        if values.dim() == 3:
            values = values.unsqueeze(0)
        return values.permute(0, 3, 1, 2)  # (B|1, H, Tq, Tk)


class XLRelativePositions(Positions):
    """Transformer-XL's relative positional attention (Dai et al. 2019, §3.3):

        A_ij = q_iᵀk_j  (a)  +  q_iᵀ W_R R_{i−j}  (b)  +  uᵀk_j  (c)  +  vᵀ W_R R_{i−j}  (d)

    R_{i−j}: the sinusoid of §3.5 at the relative distance i − j (not learned); u, v:
    learned content and position biases per head; W_R: the projection of R into keys.
    Term (a) is the attention's own QKᵀ; this scheme adds (b) + (c) + (d), scaled by
    1/√d_head like (a). Distances are taken between the tokens' positions, so cached
    decoding and left-padded prompts see the same distances as a full pass. Here u, v and
    W_R are shared by the stack's layers (the paper's W_{k,R} is per layer; its u, v are
    shared, as in the reference code's default).
    """

    content_dependent = True

    def __init__(self, d_model: int, n_heads: int, max_len: int, causal: bool) -> None:
        super().__init__(d_model, n_heads, max_len, causal)
        d_head = d_model // n_heads
        self.r_proj = nn.Linear(d_model, d_model, bias=False)  # W_{k,R}
        self.u = nn.Parameter(torch.zeros(n_heads, d_head))  # content bias
        self.v = nn.Parameter(torch.zeros(n_heads, d_head))  # position bias

    def encoding(self, distance: Tensor) -> Tensor:
        angles = _angles(distance, self.d_model)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)  # R, as in the reference code

    def scores(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        B, H, Tq, d_head = q.shape
        q_pos = q_pos if q_pos.dim() == 2 else q_pos.unsqueeze(0)  # (B|1, Tq)
        k_pos = k_pos if k_pos.dim() == 2 else k_pos.unsqueeze(0)
        distance = q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)  # i − j, (B|1, Tq, Tk)
        if torch.compiler.is_compiling() and self.training:
            # no host read (a graph break per layer): training feeds 0…T−1 (or the ViT's
            # consecutive patch indices) to both sides, whose distances are exactly these;
            # decoding's (cached, left-padded) positions keep the bounds read below
            low, high = -(k_pos.size(-1) - 1), k_pos.size(-1) - 1
        else:
            low, high = int(distance.min()), int(distance.max())
        offsets = torch.arange(low, high + 1, device=q.device)
        rel = self.r_proj(self.encoding(offsets).to(q.dtype))  # W_R R for each distance
        rel = rel.view(-1, H, d_head).transpose(0, 1)  # (H, n_distances, d_head)
        position = (q + self.v[:, None].to(q.dtype)) @ rel.transpose(-2, -1)  # (b) + (d)
        index = (distance - low).unsqueeze(1).expand(B, H, Tq, -1)  # (B, H, Tq, Tk)
        position = position.expand(B, -1, -1, -1).gather(-1, index)
        content = (self.u[None, :, None].to(q.dtype) * k).sum(-1).unsqueeze(-2)  # (c), (B,H,1,Tk)
        return (position + content) / math.sqrt(d_head)


def sequence_positions() -> list[str]:
    """The ``model.pos`` names for token sequences (every scheme but the image-grid ones)."""
    return [name for name, cls in POSITIONS.items() if not cls.needs_grid]
