"""Image classification: scikit-learn's 8×8 digits, a folder of images, or a Hugging Face dataset.

A Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words",
§3.1) reshapes an image x ∈ R^{H×W×C} into N = HW/p² flattened p×p patches, so
``model_inputs = {"image_size": H, "channels": C, "patch_size": p}`` tells it
what to build; images are square (H = W) and p divides H.

Images are decoded once (Pillow) into uint8 tensors held in memory — these data
sets are small — and served normalised per channel by the training split's
statistics, ``(x - mean) / std``. A split the source lacks is carved from the
training images, seeded and stratified by class: ``val_fraction`` for val,
``test_fraction`` for test (0: val also tests). Training batches are cropped and
flipped by :mod:`attnlab.data.augment` when ``augment`` is set.

``ImageFolderDataModule`` reads (first one set wins) ``hf.name`` (a Hugging Face
dataset, or a folder written by ``save_to_disk``), ``files`` (``{train, val,
test}`` folders) or ``path`` (one folder). A folder holds one sub-folder per
class, as torchvision's ``ImageFolder``: a class's index is the position of its
folder name in sorted order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from attnlab.data.augment import Augmentation, AugmentedLoader
from attnlab.data.base import AttnlabDataModule
from attnlab.data.files import existing_dir
from attnlab.data.hub import hf_column, hf_split, load_hf_dataset
from attnlab.data.image_files import (
    MODES,
    as_pil,
    class_folders,
    read_image,
    stack_images,
    to_tensor,
)
from attnlab.data.sampling import EpochRandomSampler, ResumableDataLoader
from attnlab.errors import ConfigError, DataError

SPLITS = ("train", "val", "test")
HF_KEYS = ("name", "config", "split", "val_split", "test_split", "image_column", "label_column")


@dataclass
class LabelledImages:
    """One split as decoded: ``pixels`` uint8 (N, C, H, W), ``labels`` int64 (N,)."""

    pixels: Tensor
    labels: Tensor

    def select(self, index: Any) -> LabelledImages:
        return LabelledImages(self.pixels[index], self.labels[index])


class NormalisedImages(Dataset):
    """Item i: ``((pixels[i] - mean) / std`` as float32 (C, H, W), its int64 label)."""

    def __init__(self, images: LabelledImages, mean: Tensor, std: Tensor) -> None:
        self.pixels, self.labels = images.pixels, images.labels
        self.mean, self.std = mean.view(-1, 1, 1), std.view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return (self.pixels[i].float() - self.mean) / self.std, self.labels[i]


def collate_images(items: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """``{"pixels": float32 (B, C, H, W), "labels": int64 (B,)}``."""
    pixels, labels = zip(*items, strict=True)
    return {"pixels": torch.stack(pixels), "labels": torch.stack(labels)}


def channel_stats(pixels: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and (population) std per channel of uint8 (N, C, H, W), exact, from histograms."""
    counts = torch.stack([
        torch.bincount(pixels[:, c].reshape(-1), minlength=256) for c in range(pixels.shape[1])
    ]).double()  # (C, 256): no float copy of the whole data set  # fmt: skip
    values = torch.arange(256, dtype=torch.float64)
    n = counts.sum(1)
    mean = counts @ values / n
    std = (counts @ values**2 / n - mean**2).clamp_min(0).sqrt()
    return mean.float(), torch.where(std > 0, std, 1.0).float()  # a constant channel: std 1


def held_out(n: int, fraction: float) -> int:
    return max(1, round(n * fraction)) if fraction > 0 else 0


def split_indices(labels: Tensor, n_val: int, n_test: int, seed: int) -> list[np.ndarray]:
    """Sorted (train, val, test) indices, seeded; stratified by label when every class allows."""
    from sklearn.model_selection import train_test_split  # sklearn loads in ~1 s: only if needed

    def hold_out(index: np.ndarray, k: int) -> list[np.ndarray]:
        if k == 0:
            return [index, index[:0]]
        try:
            return train_test_split(index, test_size=k, random_state=seed, stratify=y[index])
        except ValueError:  # a class with one image, or fewer held out than classes
            return train_test_split(index, test_size=k, random_state=seed)

    y, seed = labels.numpy(), seed % 2**32
    rest, test = hold_out(np.arange(len(y)), n_test)
    train, val = hold_out(rest, n_val)
    return [np.sort(part) for part in (train, val, test)]


def check_patch_size(patch_size: int, image_size: int) -> None:
    if image_size % patch_size:
        divisors = [d for d in range(1, image_size + 1) if image_size % d == 0]
        raise ConfigError(
            f"data.patch_size={patch_size} does not divide the image size {image_size}; "
            f"use one of: {', '.join(map(str, divisors))}"
        )


def check_integer(key: str, value: Any, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        what = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise ConfigError(f"data.{key}={value} must be {what}")


class ImageClassificationDataModule(AttnlabDataModule):
    """Shared by the image modules: splits, normalisation, augmentation, loaders.

    Subclasses implement ``_load``: the splits their source has (``"train"``
    always) and the class names.
    """

    task = "image_classification"
    vocab_size = 0

    def __init__(
        self, *, image_size: int | None, channels: int, patch_size: int, augment: bool,
        crop_padding: int, flip: bool, val_fraction: float, test_fraction: float,
        batch_size: int, num_workers: int, seed: int,
    ) -> None:  # fmt: skip
        super().__init__()
        for key, value in (("patch_size", patch_size), ("batch_size", batch_size)):
            check_integer(key, value)
        if image_size is not None:
            check_integer("image_size", image_size)
            check_patch_size(patch_size, image_size)
        check_integer("crop_padding", crop_padding, least=0)
        check_integer("num_workers", num_workers, least=0)
        if channels not in MODES:
            raise ConfigError(
                f"data.channels={channels} is not valid; use 1 (greyscale) or 3 (RGB)"
            )
        if not 0 < val_fraction < 1 or not 0 <= test_fraction < 1:
            raise ConfigError(
                f"data.val_fraction={val_fraction} must lie in (0, 1) and "
                f"data.test_fraction={test_fraction} in [0, 1)"
            )
        if val_fraction + test_fraction >= 1:
            raise ConfigError(
                f"data.val_fraction + data.test_fraction = {val_fraction + test_fraction} leaves "
                "no training images; lower them"
            )
        self.image_size, self.channels, self.patch_size = image_size, channels, patch_size
        self.augment, self.crop_padding, self.flip = bool(augment), crop_padding, bool(flip)
        self.val_fraction, self.test_fraction = float(val_fraction), float(test_fraction)
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, int(seed)
        self.classes: list[str] = []
        self.datasets: dict[str, NormalisedImages] = {}
        self.augmentation: Augmentation | None = None

    @property
    def model_inputs(self) -> dict[str, int]:
        """What the model needs to know: ``{"image_size": H, "channels": C, "patch_size": p}``."""
        if self.image_size is None:
            raise RuntimeError("the image size comes from the data: call setup() first")
        return {"image_size": self.image_size, "channels": self.channels,
                "patch_size": self.patch_size}  # fmt: skip

    def _load(self) -> tuple[dict[str, LabelledImages], list[str]]:
        raise NotImplementedError

    def prepare_data(self) -> None:
        """Decode the images (once: later calls return at once)."""
        self._build()

    def setup(self, stage: str | None = None) -> None:
        """Decode the images, carve the missing splits, normalise; cheap after the first call."""
        self._build()

    def _build(self) -> None:
        if self.datasets:
            return
        splits, self.classes = self._load()
        train = splits["train"]
        n_val = 0 if "val" in splits else held_out(len(train.labels), self.val_fraction)
        n_test = 0 if "test" in splits else held_out(len(train.labels), self.test_fraction)
        if len(train.labels) - n_val - n_test < 1:
            raise DataError(
                f"only {len(train.labels)} training images: too few to hold out {n_val} for "
                f"val and {n_test} for test; add images or give val/test images of their own"
            )
        if n_val or n_test:
            kept, val, test = split_indices(train.labels, n_val, n_test, self.seed)
            splits["train"] = train.select(kept)
            if n_val:
                splits["val"] = train.select(val)
            if n_test:
                splits["test"] = train.select(test)
        splits.setdefault("test", splits["val"])  # test_fraction=0: val also tests
        self.image_size = int(splits["train"].pixels.shape[-1])
        check_patch_size(self.patch_size, self.image_size)
        self.num_classes = len(self.classes)
        mean, std = channel_stats(splits["train"].pixels)
        self.datasets = {split: NormalisedImages(splits[split], mean, std) for split in SPLITS}
        if self.augment and (self.crop_padding or self.flip):
            self.augmentation = Augmentation(self.crop_padding, self.flip, fill=-mean / std)

    # -- loaders -------------------------------------------------------------------------------
    def _loader(self, split: str, **kwargs: Any) -> DataLoader:
        self._build()
        loader = kwargs.pop("loader", ResumableDataLoader)
        return loader(
            self.datasets[split], batch_size=self.batch_size, collate_fn=collate_images,
            num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.seed), **kwargs,
        )  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        """Shuffled batches, the order of epoch e a function of (seed, e); augmented if set."""
        self._build()
        sampler = EpochRandomSampler(self.datasets["train"], seed=self.seed)
        if self.augmentation is None:
            return self._loader("train", sampler=sampler)
        return self._loader(
            "train", sampler=sampler, loader=AugmentedLoader, augment=self.augmentation,
            seed=self.seed,
        )  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        """Validation images in a fixed order, never augmented."""
        return self._loader("val", shuffle=False)

    def test_loader(self) -> DataLoader:
        """Test images in a fixed order (validation images when there is no test split)."""
        return self._loader("test", shuffle=False)


class DigitsDataModule(ImageClassificationDataModule):
    """scikit-learn's 1,797 handwritten digits: 8×8 greyscale, values 0..16, 10 classes.

    Bundled with scikit-learn (UCI "Optical Recognition of Handwritten Digits"),
    so it needs no download: a ViT that trains in seconds on a CPU.
    """

    def __init__(
        self,
        patch_size: int = 2,
        augment: bool = False,
        crop_padding: int = 1,
        flip: bool = False,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__(
            image_size=8, channels=1, patch_size=patch_size, augment=augment,
            crop_padding=crop_padding, flip=flip, val_fraction=val_fraction,
            test_fraction=test_fraction, batch_size=batch_size, num_workers=num_workers,
            seed=seed,
        )  # fmt: skip

    def _load(self) -> tuple[dict[str, LabelledImages], list[str]]:
        from sklearn.datasets import load_digits

        digits = load_digits()
        pixels = torch.from_numpy(digits.images).to(torch.uint8).unsqueeze(1)  # (1797, 1, 8, 8)
        labels = torch.from_numpy(digits.target).long()
        return {"train": LabelledImages(pixels, labels)}, [str(d) for d in range(10)]


class ImageFolderDataModule(ImageClassificationDataModule):
    """A folder of class sub-folders (PNG, JPEG, …) or a Hugging Face image data set."""

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        files: Mapping[str, str | None] | None = None,
        hf: Mapping[str, Any] | None = None,
        image_size: int | None = 32,
        channels: int = 3,
        patch_size: int = 4,
        augment: bool = True,
        crop_padding: int = 4,
        flip: bool = True,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__(
            image_size=image_size, channels=channels, patch_size=patch_size, augment=augment,
            crop_padding=crop_padding, flip=flip, val_fraction=val_fraction,
            test_fraction=test_fraction, batch_size=batch_size, num_workers=num_workers,
            seed=seed,
        )  # fmt: skip
        self.resize = image_size  # None: keep the native size (then every image shares it)
        self.path = path
        self.files = {k: v for k, v in files.items() if v} if files else None
        self.files = self.files or None  # all null (images.yaml's defaults): not given
        for split in self.files or {}:
            if split not in SPLITS:
                raise ConfigError(f"data.files.{split} is not a split; use data.files.train, "
                                  "data.files.val and data.files.test")  # fmt: skip
        if self.files and "train" not in self.files:
            raise ConfigError("data.files.train is not set; point it at the training folder")
        self.hf = dict(hf) if hf and hf.get("name") else None
        for key in self.hf or {}:
            if key not in HF_KEYS:
                raise ConfigError(f"data.hf.{key} is not a config key; valid keys: "
                                  f"{', '.join('data.hf.' + k for k in HF_KEYS)}")  # fmt: skip

    # -- sources -------------------------------------------------------------------------------
    def _load(self) -> tuple[dict[str, LabelledImages], list[str]]:
        if self.hf:
            return self._load_hf()
        if self.files:
            roots = {s: existing_dir(self.files[s], f"data.files.{s}") for s in self.files}
        elif self.path:
            roots = {"train": existing_dir(self.path, "data.path")}
        else:
            raise DataError(
                "data.path is not set; set data.path=/path/to/images (one sub-folder per class), "
                "data.files={train: …, val: …} or data.hf.name=<dataset>"
            )
        key = {s: f"data.files.{s}" if self.files else "data.path" for s in roots}
        train = class_folders(roots["train"], key["train"])
        if len(train) < 2:
            found = f"only one class folder with images ({next(iter(train))})" if train else (
                "no images in its class folders")  # fmt: skip
            raise DataError(
                f"{key['train']}: {roots['train']} has {found}; classification needs at least "
                "two classes, one sub-folder of images each"
            )
        classes = sorted(train)
        splits: dict[str, LabelledImages] = {}
        first = None  # val and test images must match the training images' size
        for split in (s for s in SPLITS if s in roots):
            folders = train if split == "train" else class_folders(roots[split], key[split])
            unknown = sorted(set(folders) - set(classes))
            if unknown:
                raise DataError(
                    f"{key[split]}: {roots[split]} has class folders not among the training "
                    f"classes: {unknown}; rename or remove them (training classes: {classes})"
                )
            if not folders:
                raise DataError(f"{key[split]}: {roots[split]} has no images in its class "
                                "folders; add images or leave this split out")  # fmt: skip
            files = [(p, classes.index(name)) for name, paths in folders.items() for p in paths]
            images = [read_image(p, key[split], self.channels, self.resize) for p, _ in files]
            names = [str(p) for p, _ in files]
            pixels = stack_images(images, names, key[split], first)
            first = first or (names[0], pixels.shape[2:])
            splits[split] = LabelledImages(pixels, torch.tensor([y for _, y in files]))
        return splits, classes

    def _load_hf(self) -> tuple[dict[str, LabelledImages], list[str]]:
        hf = self.hf or {}
        ds = load_hf_dataset(hf["name"], hf.get("config"))
        names = {"train": hf.get("split") or "train", "val": hf.get("val_split", "validation"),
                 "test": hf.get("test_split", "test")}  # fmt: skip
        column = hf.get("image_column") or ["img", "image"]
        columns = [column] if isinstance(column, str) else [str(c) for c in column]
        label_column = str(hf.get("label_column") or "label")
        splits: dict[str, LabelledImages] = {}
        first, largest = None, 0
        for split, name in names.items():
            if split != "train" and (name is None or name not in ds):
                continue  # carved from train
            key = "data.hf.split" if split == "train" else f"data.hf.{split}_split"
            part = hf_split(ds, name, key)
            image_name = next((c for c in columns if c in part.column_names), columns[0])
            images = hf_column(part, image_name, "data.hf.image_column")
            labels = hf_column(part, label_column, "data.hf.label_column")
            bad = next((y for y in labels if isinstance(y, bool) or not isinstance(y, int)
                        or y < 0), None)  # fmt: skip
            if bad is not None:
                raise DataError(
                    f"data.hf.label_column: split {name!r} has label {bad!r}; labels must be "
                    f"integers 0..K-1 (an unlabelled split? set {key}=null to carve it from train)"
                )
            where = [f"split {name!r} row {i}" for i in range(len(images))]
            tensors = [to_tensor(as_pil(image, place), self.channels, self.resize)
                       for image, place in zip(images, where, strict=True)]  # fmt: skip
            pixels = stack_images(tensors, where, "data.hf.name", first)
            first = first or (where[0], pixels.shape[2:])
            splits[split] = LabelledImages(pixels, torch.tensor(labels, dtype=torch.long))
            largest = max(largest, max(labels, default=0))
        feature = ds[names["train"]].features.get(label_column)
        classes = list(getattr(feature, "names", None) or range(largest + 1))
        if len(classes) < 2:
            raise DataError(f"data.hf.label_column: {label_column!r} has only one class; "
                            "classification needs at least two")  # fmt: skip
        return splits, [str(c) for c in classes]


__all__ = ["DigitsDataModule", "ImageFolderDataModule", "collate_images"]
