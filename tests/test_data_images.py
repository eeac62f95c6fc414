"""Image data modules: digits and image folders, splits, normalisation, augmentation, bad input."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from PIL import Image

from attnlab.cli.schema import check_data, signature_hints
from attnlab.cli.targets import DATA_MODULES
from attnlab.data.augment import random_crop
from attnlab.data.base import TASKS
from attnlab.data.images import DigitsDataModule, ImageFolderDataModule, split_indices
from attnlab.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]
CLASSES = ("cat", "dog", "eel")


def image(label: int, i: int, size: tuple[int, int] = (12, 12)) -> Image.Image:
    """An RGB image whose channel ``label`` is brightest, brighter to the right (not symmetric)."""
    w, h = size
    rng = np.random.default_rng([label, i])
    pixels = np.full((h, w, 3), 20, dtype=np.uint8)
    pixels[..., label % 3] = 60 + 12 * np.arange(w)[None, :] + rng.integers(0, 10, (h, w))
    return Image.fromarray(pixels)


def make_folder(
    root: Path, classes=CLASSES, n: int = 6, size=(12, 12), suffix: str = ".png"
) -> Path:
    for label, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            image(label, i, size).save(root / name / f"{i}{suffix}")
    return root


def built(dm):  # as the pipeline drives a data module
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    return dm


def folder(path: Path | None = None, **kwargs) -> ImageFolderDataModule:
    kwargs.setdefault("image_size", None)
    kwargs.setdefault("batch_size", 4)
    return built(ImageFolderDataModule(path=path, **kwargs))


@pytest.fixture(scope="module")
def digits() -> DigitsDataModule:
    return built(DigitsDataModule(seed=0))


def stacked(dataset) -> torch.Tensor:
    return torch.stack([dataset[i][0] for i in range(len(dataset))])


# -- digits --------------------------------------------------------------------------------------
def test_digits_batches_are_float_pixels_and_int_labels(digits) -> None:
    assert digits.task == "image_classification" and digits.task in TASKS
    assert digits.vocab_size == 0 and digits.num_classes == 10
    assert digits.model_inputs == {"image_size": 8, "channels": 1, "patch_size": 2}
    for loader in (digits.train_dataloader(), digits.val_dataloader(), digits.test_dataloader()):
        batch = next(iter(loader))
        assert set(batch) == {"pixels", "labels"}
        assert batch["pixels"].shape == (64, 1, 8, 8) and batch["pixels"].dtype == torch.float32
        assert batch["labels"].shape == (64,) and batch["labels"].dtype == torch.int64


def test_digits_split_80_10_10(digits) -> None:
    sizes = {s: len(d) for s, d in digits.datasets.items()}
    assert sizes == {"train": 1437, "val": 180, "test": 180}


def test_split_is_disjoint_complete_and_stratified(digits) -> None:
    labels = torch.cat([d.labels for d in digits.datasets.values()])
    train, val, test = split_indices(labels, 180, 180, seed=0)
    assert len(set(train) | set(val) | set(test)) == len(labels) == len(train) + 180 + 180
    per_class = np.bincount(labels[val].numpy(), minlength=10)
    assert per_class.min() >= 17 and per_class.max() <= 19  # about 180 / 10 of every digit


def test_digits_split_follows_the_seed(digits) -> None:
    same, other = built(DigitsDataModule(seed=0)), built(DigitsDataModule(seed=1))
    assert torch.equal(same.datasets["val"].pixels, digits.datasets["val"].pixels)
    assert not torch.equal(other.datasets["val"].pixels, digits.datasets["val"].pixels)


def test_training_split_is_normalised_to_zero_mean_unit_std(digits) -> None:
    train = stacked(digits.datasets["train"])
    assert abs(train.mean().item()) < 1e-5 and abs(train.std().item() - 1) < 1e-3
    val = stacked(digits.datasets["val"])
    assert abs(val.mean().item()) < 0.2  # the training statistics, not its own


# -- image folders -------------------------------------------------------------------------------
def test_folder_classes_are_sorted_sub_folders(tmp_path) -> None:
    dm = folder(make_folder(tmp_path, classes=("eel", "cat", "dog")), patch_size=4)
    assert dm.classes == ["cat", "dog", "eel"] and dm.num_classes == 3
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 14, "val": 2, "test": 2}
    assert dm.model_inputs == {"image_size": 12, "channels": 3, "patch_size": 4}
    for dataset in dm.datasets.values():  # eel (index 2) was drawn brightest in red (channel 0)
        colour = dataset.pixels.float().mean((2, 3)).argmax(1)
        assert torch.equal(colour, (dataset.labels + 1) % 3)
    batch = next(iter(dm.val_dataloader()))
    assert batch["pixels"].shape == (2, 3, 12, 12) and batch["labels"].dtype == torch.int64


def test_image_size_resizes_every_image(tmp_path) -> None:
    make_folder(tmp_path, n=3, size=(20, 14))  # not square: resizing makes it so
    dm = folder(tmp_path, image_size=8, patch_size=2)
    assert next(iter(dm.train_dataloader()))["pixels"].shape == (4, 3, 8, 8)
    assert dm.model_inputs["image_size"] == 8


def test_jpeg_read_as_greyscale(tmp_path) -> None:
    dm = folder(make_folder(tmp_path, suffix=".jpg"), channels=1, patch_size=3)
    assert next(iter(dm.train_dataloader()))["pixels"].shape == (4, 1, 12, 12)
    assert dm.model_inputs == {"image_size": 12, "channels": 1, "patch_size": 3}


def test_explicit_folders_are_used_as_given(tmp_path) -> None:
    files = {s: str(make_folder(tmp_path / s, n=n)) for s, n in (("train", 6), ("val", 2))}
    dm = built(ImageFolderDataModule(files={**files, "test": None}, image_size=None))
    sizes = {s: len(d) for s, d in dm.datasets.items()}
    assert sizes == {"train": 16, "val": 6, "test": 2}  # test carved from train by test_fraction


def test_empty_class_folder_is_ignored_when_two_classes_remain(tmp_path) -> None:
    make_folder(tmp_path, classes=("a", "b"))
    (tmp_path / "c").mkdir()
    with pytest.warns(UserWarning, match=r"ignoring class folders without images: \['c'\]"):
        dm = folder(tmp_path)
    assert dm.classes == ["a", "b"]


# -- augmentation --------------------------------------------------------------------------------
def test_without_augmentation_batches_are_the_stored_images(tmp_path) -> None:
    dm = folder(make_folder(tmp_path), augment=False)
    loader = dm.train_dataloader()
    order = list(loader.sampler)
    first = [b["pixels"] for b in loader]
    assert all(torch.equal(a, b["pixels"]) for a, b in zip(first, loader, strict=True))
    stored = stacked(dm.datasets["train"])[order]
    assert torch.equal(torch.cat(first), stored)


def test_flip_mirrors_some_images_and_keeps_the_rest(tmp_path) -> None:
    dm = folder(make_folder(tmp_path), crop_padding=0, batch_size=14)
    loader = dm.train_dataloader()
    stored = stacked(dm.datasets["train"])[list(loader.sampler)]
    out = next(iter(loader))["pixels"]
    flipped = [torch.equal(o, s.flip(-1)) for o, s in zip(out, stored, strict=True)]
    kept = [torch.equal(o, s) for o, s in zip(out, stored, strict=True)]
    assert all(f or k for f, k in zip(flipped, kept, strict=True)) and any(flipped) and any(kept)


def test_crop_shifts_each_image_within_the_padding(tmp_path) -> None:
    dm = folder(make_folder(tmp_path), flip=False, crop_padding=2, batch_size=14)
    loader = dm.train_dataloader()
    stored = stacked(dm.datasets["train"])[list(loader.sampler)]
    out = next(iter(loader))["pixels"]
    assert out.shape == stored.shape and not torch.equal(out, stored)
    fill = dm.augmentation.fill.view(-1, 1, 1)  # a black pixel, normalised
    for o, s in zip(out, stored, strict=True):
        padded = torch.nn.functional.pad(s - fill, (2, 2, 2, 2)) + fill
        crops = [padded[:, y : y + 12, x : x + 12] for y in range(5) for x in range(5)]
        assert any(torch.allclose(o, c) for c in crops)


def test_augmentation_resumes_mid_epoch_exactly(tmp_path) -> None:
    dm = folder(make_folder(tmp_path))
    whole = [b["pixels"] for b in dm.train_dataloader()]
    resumed = dm.train_dataloader()
    resumed.load_state_dict({"epoch": 0, "batches_served": 1})
    assert all(torch.equal(a, b["pixels"]) for a, b in zip(whole[1:], resumed, strict=True))


def test_random_crop_without_shift_is_the_identity() -> None:
    x = torch.randn(2, 3, 4, 4)
    assert torch.equal(random_crop(x, 0, torch.zeros(3), torch.Generator()), x)


# -- Hugging Face (a save_to_disk folder; no network) ---------------------------------------------
def test_a_saved_hugging_face_dataset_loads_from_its_folder(tmp_path) -> None:
    import datasets

    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=CLASSES))
    split = {
        n: datasets.Dataset.from_dict(
            {"image": [image(i % 3, i) for i in range(k)], "label": [i % 3 for i in range(k)]},
            features=features,
        )
        for n, k in (("train", 20), ("test", 6))
    }
    datasets.DatasetDict(split).save_to_disk(tmp_path / "saved")
    dm = built(ImageFolderDataModule(hf={"name": str(tmp_path / "saved")}, image_size=8))
    assert dm.classes == list(CLASSES) and dm.num_classes == 3
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 18, "val": 2, "test": 6}
    assert next(iter(dm.test_dataloader()))["pixels"].shape == (6, 3, 8, 8)


# -- config files --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["digits", "images"])
def test_preset_keys_are_typed_init_parameters(name: str) -> None:
    cfg = OmegaConf.create({"seed": 5, "data": OmegaConf.load(REPO / f"conf/data/{name}.yaml")})
    values = OmegaConf.to_container(cfg.data, resolve=True)
    assert values["_target_"] in DATA_MODULES
    check_data(values)
    dm = instantiate(cfg.data)
    hints = signature_hints(type(dm).__init__)
    assert all(hints[k] is not typing.Any for k in values if k != "_target_")
    assert dm.task == "image_classification" and dm.seed == 5


# -- bad input: one line naming the problem and the fix --------------------------------------------
def corrupt(root: Path) -> Path:
    make_folder(root)
    (root / "dog" / "broken.png").write_bytes(b"not a png at all")
    return root


def mixed_sizes(root: Path) -> Path:
    make_folder(root)
    image(0, 99, (10, 10)).save(root / "eel" / "small.png")
    return root


def one_class(root: Path) -> Path:
    make_folder(root, classes=("cat",))
    (root / "dog").mkdir()  # empty: ignored, which leaves one class
    return root


def no_class_folders(root: Path) -> Path:
    root.mkdir()
    image(0, 0).save(root / "loose.png")
    return root


def only_empty_folders(root: Path) -> Path:
    for name in CLASSES:
        (root / name).mkdir(parents=True)
    return root


def non_square(root: Path) -> Path:
    return make_folder(root, size=(12, 10))


def unknown_val_class(root: Path) -> dict:
    make_folder(root / "train")
    make_folder(root / "val", classes=("cat", "fox"))
    return {"files": {"train": str(root / "train"), "val": str(root / "val")}}


DATA_ERRORS = {
    "missing_folder": (lambda r: r / "nowhere", r"data\.path: folder not found: .*nowhere"),
    "corrupt_image": (corrupt, r"cannot read image .*broken\.png.*replace or remove"),
    "mixed_sizes": (mixed_sizes, r"12×12 but .*small\.png is 10×10.*data\.image_size=10\)"),
    "non_square": (non_square, r"is 12×10, not square.*data\.image_size=N"),
    "one_class": (one_class, r"only one class folder with images \(cat\); .*at least two"),
    "no_class_folders": (no_class_folders, r"no class sub-folders; put each class"),
    "only_empty_folders": (only_empty_folders, r"no images in its class folders"),
    "unknown_val_class": (unknown_val_class, r"data\.files\.val: .*\['fox'\].*rename or remove"),
    "patch_vs_native_size": (make_folder, r"size 12; use one of: 1, 2, 3, 4, 6, 12"),
}


@pytest.mark.parametrize("case", DATA_ERRORS, ids=list(DATA_ERRORS))
@pytest.mark.filterwarnings("ignore:data.path. ignoring class folders")
def test_bad_data_is_refused_in_one_line(tmp_path, case: str) -> None:
    make, phrase = DATA_ERRORS[case]
    source = make(tmp_path / "images")
    kwargs = source if isinstance(source, dict) else {"path": source}
    error = ConfigError if case.startswith("patch") else DataError
    with pytest.raises(error, match=phrase) as info:
        folder(patch_size=5 if case.startswith("patch") else 2, **kwargs)
    assert "\n" not in str(info.value)


def test_missing_source_asks_for_one() -> None:
    with pytest.raises(DataError, match=r"data\.path is not set.*data\.files.*data\.hf\.name"):
        built(ImageFolderDataModule())


CONFIG_ERRORS = {
    "patch_vs_size": ({"image_size": 32, "patch_size": 5}, r"size 32; use one of: 1, 2, 4, 8, 16"),
    "zero_patch": ({"patch_size": 0}, r"data\.patch_size=0 must be a positive integer"),
    "negative_size": ({"image_size": -1}, r"data\.image_size=-1 must be a positive integer"),
    "channels": ({"channels": 2}, r"data\.channels=2 is not valid; use 1 \(greyscale\) or 3"),
    "padding": ({"crop_padding": -1}, r"data\.crop_padding=-1 must be an integer >= 0"),
    "fractions": ({"val_fraction": 0.5, "test_fraction": 0.5}, r"leaves no training images"),
    "hf_key": ({"hf": {"name": "x", "splt": "a"}}, r"data\.hf\.splt is not a config key"),
    "files_key": ({"files": {"validation": "x"}}, r"data\.files\.validation is not a split"),
}


@pytest.mark.parametrize("case", CONFIG_ERRORS, ids=list(CONFIG_ERRORS))
def test_bad_config_is_refused_before_any_file_is_read(tmp_path, case: str) -> None:
    kwargs, phrase = CONFIG_ERRORS[case]
    with pytest.raises(ConfigError, match=phrase):
        ImageFolderDataModule(path=tmp_path / "never_read", **kwargs)


def test_digits_patch_size_must_divide_eight() -> None:
    with pytest.raises(ConfigError, match=r"divide the image size 8; use one of: 1, 2, 4, 8"):
        DigitsDataModule(patch_size=3)
