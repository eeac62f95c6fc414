"""Training-time augmentation of image batches: random crop with padding, horizontal flip.

The CIFAR recipe of He et al. 2016 ("Deep Residual Learning", §4.2): "4 pixels
are padded on each side, and a 32×32 crop is randomly sampled from the padded
image or its horizontal flip". Done in torch on the collated batch, in the main
process. The draws for batch ``b`` of epoch ``e`` come from a generator seeded
by ``(seed, e, b)``, so they do not depend on ``num_workers``, and a run
resumed mid-epoch crops and flips exactly as the run that never stopped
(a worker's own RNG restarts with every new DataLoader).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.data.sampling import ResumableDataLoader, epoch_generator


def random_crop(pixels: Tensor, padding: int, fill: Tensor, generator: torch.Generator) -> Tensor:
    """Pad each image of ``(B, C, H, W)`` by ``padding`` with ``fill`` (C,), crop H×W back out."""
    b, c, h, w = pixels.shape
    padded = fill.to(pixels.dtype).view(1, c, 1, 1).repeat(b, 1, h + 2 * padding, w + 2 * padding)
    padded[:, :, padding : padding + h, padding : padding + w] = pixels
    tops, lefts = torch.randint(0, 2 * padding + 1, (2, b), generator=generator).tolist()
    crops = [
        padded[i, :, y : y + h, x : x + w] for i, (y, x) in enumerate(zip(tops, lefts, strict=True))
    ]
    return torch.stack(crops)


def random_flip(pixels: Tensor, generator: torch.Generator) -> Tensor:
    """Mirror each image of ``(B, C, H, W)`` left-right with probability 1/2."""
    flip = torch.rand(pixels.shape[0], generator=generator) < 0.5
    return torch.where(flip.view(-1, 1, 1, 1), pixels.flip(-1), pixels)


@dataclass(frozen=True)
class Augmentation:
    """Random crop (``padding`` > 0) then random flip (``flip``) of normalised pixels.

    ``fill`` is the padding per channel: what a black pixel becomes after
    normalisation, as when torchvision pads before ``Normalize``.
    """

    padding: int
    flip: bool
    fill: Tensor

    def __call__(self, pixels: Tensor, generator: torch.Generator) -> Tensor:
        if self.padding > 0:
            pixels = random_crop(pixels, self.padding, self.fill, generator)
        if self.flip:
            pixels = random_flip(pixels, generator)
        return pixels


class AugmentedLoader(ResumableDataLoader):
    """A ResumableDataLoader that augments ``batch["pixels"]`` of every batch it serves."""

    def __init__(self, *args: Any, augment: Augmentation, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.augment, self.seed = augment, seed  # public: Lightning re-creates loaders under DDP

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        sampler = getattr(self.batch_sampler, "sampler", self.sampler)
        for batch in super().__iter__():
            # DistributedSampler (DDP) keeps its epoch too; _served counts this epoch's batches
            epoch = getattr(sampler, "epoch", self._epoch)
            generator = epoch_generator(self.seed, epoch, self._served)
            yield {**batch, "pixels": self.augment(batch["pixels"], generator)}
