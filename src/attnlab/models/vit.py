"""The Vision Transformer: a Transformer encoder over image patches (Dosovitskiy et al. 2021).

    z₀ = [x_class; x_p¹E; x_p²E; …; x_pᴺE] + E_pos,   E ∈ ℝ^{(P²·C)×D}        (eq. 1)
    z_ℓ = the encoder's layers (eq. 2–3: Pre-LN in the paper, ``model.norm`` here)
    y = LN(z_L⁰)                                                            (eq. 4)

The image (C, H, W) is cut into N = HW/P² non-overlapping P×P patches in raster
order, each flattened and mapped linearly to D = d_model. A learned [CLS] token
is prepended (``model.pool=cls``, the paper's head reads its final state), or the
patch states are averaged (``model.pool=mean``, the paper's "global average
pooling" variant, App. D.3; no [CLS] token then). Positions: ``model.pos=learned``
is the paper's 1-D table; ``learned_2d`` and ``sinusoidal_2d`` place patches on
their grid (App. D.4); every other scheme reads the patches as a 1-D sequence.
Every ``model.norm``, ``norm_type``, ``ffn``, ``attn_impl`` and ``init`` option
applies unchanged: the encoder is the same :class:`TransformerStack` as BERT's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.components.architectures import VisionTransformerConfig
from attnlab.errors import ConfigError
from attnlab.model_config import ModelConfig
from attnlab.models.flops import transformer_flops
from attnlab.models.initialization import initialize
from attnlab.models.interface import Architecture
from attnlab.models.stack import TransformerStack
from attnlab.nn.norms import RESIDUALS, StackDepth


def patchify(pixels: Tensor, patch: int) -> Tensor:
    """(B, C, H, W) -> (B, N, C·P·P): non-overlapping P×P patches, row by row."""
    B, C, H, W = pixels.shape
    grid = pixels.unfold(2, patch, patch).unfold(3, patch, patch)  # (B, C, H/P, W/P, P, P)
    return grid.permute(0, 2, 3, 1, 4, 5).reshape(B, (H // patch) * (W // patch), -1)


class VisionTransformer(Architecture):
    """An encoder over image patches with a [CLS] token (Dosovitskiy et al. 2021, eq. 1–4)."""

    feeding = VisionTransformerConfig.feeding

    def __init__(self, cfg: ModelConfig, task: str = "image_classification") -> None:
        super().__init__(cfg, task)
        size, channels, patch = cfg.image_size, cfg.channels, cfg.patch_size
        if not (size and channels and patch):
            raise ConfigError(
                "model=vit needs image data, which sets model.image_size, channels and "
                "patch_size; use data=digits or data=images"
            )
        if size % patch:
            raise ConfigError(
                f"data.patch_size={patch} does not divide the image size {size}; use one of: "
                f"{', '.join(str(p) for p in range(1, size + 1) if size % p == 0)}"
            )
        self.grid = size // patch
        self.n_patches = self.grid**2
        self.use_cls = self.pool_for(task) == "cls"
        if self.n_patches + 1 > cfg.max_len:  # patches sit at positions 1…N, with or without [CLS]
            raise ConfigError(
                f"{self.n_patches} patches exceed model.max_len={cfg.max_len} (positions "
                f"0…{self.n_patches}); raise model.max_len to {self.n_patches + 1} or "
                "data.patch_size"
            )
        self.patch_embedding = nn.Linear(channels * patch * patch, cfg.d_model)  # E (eq. 1)
        self.cls_token = nn.Parameter(torch.zeros(cfg.d_model)) if self.use_cls else None
        depth = StackDepth("encoder", n_encoder=cfg.n_layers, n_decoder=0)
        self.encoder = TransformerStack(
            cfg, None, cfg.n_layers, causal=False, depth=depth, grid=(self.grid, self.grid)
        )
        initialize(self, cfg.init, cfg.d_model, cfg.n_layers, cfg.zero_init_residual)
        RESIDUALS.get(cfg.norm).initialize(self.encoder.layers, depth)

    @property
    def sequence_length(self) -> int:
        """Tokens the encoder reads per image: the patches, and [CLS] when pooling by it."""
        return self.n_patches + int(self.use_cls)

    def hidden(self, pixels: Tensor) -> Tensor:
        """(B, C, H, W) -> encoder states (B, [1 +] N, d_model); [CLS] first when used."""
        x = self.patch_embedding(patchify(pixels, self.cfg.patch_size))
        start = 1  # patches sit at positions 1…N; [CLS], when there is one, at 0
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.size(0), 1, -1).to(x.dtype), x], dim=1)
            start = 0
        positions = torch.arange(start, self.n_patches + 1, device=x.device)
        return self.encoder(None, positions=positions, embeds=x)

    def pooled(self, inputs: Tensor) -> Tensor:
        """y = LN(z_L⁰), the [CLS] state (eq. 4; the stack's final norm is the LN), or the
        mean of the patch states."""
        hidden = self.hidden(inputs)
        return hidden[:, 0] if self.use_cls else hidden.mean(1)

    def forward(self, pixels: Tensor) -> Tensor:
        """The encoder states; the classification task's head reads ``pooled``."""
        return self.hidden(pixels)

    def stacks(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def patch_grid(self) -> tuple[int, int] | None:
        return (self.grid, self.grid) if self.use_cls else None

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> int:
        """The patch embedding and the encoder over ``tgt_len`` tokens (patches + [CLS])."""
        patch_inputs = cfg.channels * cfg.patch_size**2
        n_patches = (cfg.image_size // max(cfg.patch_size, 1)) ** 2
        embedding = 2 * n_patches * patch_inputs * cfg.d_model
        return embedding + transformer_flops(cfg, tgt_len, cfg.n_layers)
