"""Reading images with Pillow, with one-line ``DataError`` messages that name the file and the fix.

A folder of images is laid out as torchvision's ``ImageFolder``: one sub-folder
per class (``root/<class>/<image>.png``, any depth below it). Files are only
ever read.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from attnlab.errors import DataError

MODES = {1: "L", 3: "RGB"}  # data.channels → Pillow mode
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff"}


def image_files(folder: Path) -> list[Path]:
    """The images under ``folder`` (any depth), by suffix, sorted; hidden files skipped."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES
                  and not p.name.startswith(".") and p.is_file())  # fmt: skip


def class_folders(root: Path, key: str) -> dict[str, list[Path]]:
    """Class name → image files, for each sub-folder of ``root`` that has images, sorted by name.

    A sub-folder without images is skipped with a warning (the caller decides
    whether enough classes remain).
    """
    folders = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not folders:
        raise DataError(
            f"{key}: {root} has no class sub-folders; put each class's images in a "
            f"sub-folder named after the class ({root}/<class>/<image>.png)"
        )
    classes = {d.name: image_files(d) for d in folders}
    empty = [name for name, files in classes.items() if not files]
    if empty:
        warnings.warn(f"{key}: ignoring class folders without images: {empty}", stacklevel=2)
    return {name: files for name, files in classes.items() if files}


def to_tensor(image: Image.Image, channels: int, size: int | None) -> Tensor:
    """uint8 (C, H, W): converted to 1 (L) or 3 (RGB) channels, resized to size×size if set."""
    image = image.convert(MODES[channels])
    if size is not None:
        image = image.resize((size, size), Image.Resampling.BILINEAR)
    array = np.array(image, dtype=np.uint8).reshape(image.height, image.width, -1)
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def read_image(path: Path, key: str, channels: int, size: int | None) -> Tensor:
    """:func:`to_tensor` of the image file ``path``; DataError naming it when it can't be read."""
    try:
        with Image.open(path) as image:
            return to_tensor(image, channels, size)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        reason = (str(e).splitlines() or [""])[0][:200]
        raise DataError(
            f"{key}: cannot read image {path} ({type(e).__name__}: {reason}); "
            "replace or remove the file"
        ) from e


def as_pil(value: Any, where: str) -> Image.Image:
    """A Hugging Face image cell (a decoded image, an array, or raw bytes) as a PIL image."""
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, np.ndarray):
        return Image.fromarray(value)
    if isinstance(value, Mapping) and value.get("bytes"):
        return Image.open(io.BytesIO(value["bytes"]))
    raise DataError(
        f"data.hf.image_column: {where} is a {type(value).__name__}, not an image; "
        "name the image column in data.hf.image_column"
    )


def stack_images(
    images: list[Tensor], names: list[str], key: str, first: tuple[str, Any] | None = None
) -> Tensor:
    """(N, C, H, W) from same-sized square images; DataError naming two whose sizes differ.

    ``first``: (name, (H, W)) of the image all must match (from an earlier split).
    """
    first_name, (h, w) = first or (names[0], images[0].shape[1:])
    for name, image in zip(names, images, strict=True):
        if image.shape[1:] != (h, w):
            hi, wi = image.shape[1:]
            raise DataError(
                f"{key}: images differ in size: {first_name} is {w}×{h} but {name} is "
                f"{wi}×{hi}; set data.image_size=N to resize them all "
                f"(e.g. data.image_size={min(h, w, hi, wi)})"
            )
    if h != w:
        raise DataError(
            f"{key}: {first_name} is {w}×{h}, not square; data.image_size=null keeps each "
            "image's size, so set data.image_size=N to resize every image to N×N"
        )
    return torch.stack(images)
