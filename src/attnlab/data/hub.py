"""Hugging Face ``datasets`` as a data source, with an offline-friendly error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnlab.errors import DataError


def is_saved_dataset(folder: Path) -> bool:
    """Whether ``folder`` was written by ``save_to_disk`` (a Dataset or a DatasetDict)."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def load_hf_dataset(
    name: str, config: str | None = None, key: str = "data.hf.name",
    instead: str = "use a local file via data.path / data.files",
) -> Any:  # fmt: skip
    """``datasets.load_dataset(name, config)`` as a DatasetDict; DataError naming ``key`` (and
    what to do ``instead``) when it can't be loaded.

    Without network access this works only for datasets already in the local
    Hugging Face cache (or a local folder of csv/json/parquet files). A folder
    written by ``save_to_disk`` (a Dataset or a DatasetDict) is read with
    ``datasets.load_from_disk``.
    """
    local = Path(os.path.expanduser(str(name)))
    saved = is_saved_dataset(local)
    try:
        import datasets

        ds = datasets.load_from_disk(str(local)) if saved else datasets.load_dataset(name, config)
    except Exception as e:  # offline, unknown name, bad config: all the user's to fix
        reason = (str(e).splitlines() or [""])[0][:200]
        if saved:
            raise DataError(
                f"{key}: cannot load the saved dataset {local} ({type(e).__name__}: "
                f"{reason}); write it again with save_to_disk"
            ) from e
        raise DataError(
            f"{key}: Hugging Face dataset {name!r} (config {config!r}) is not available "
            f"offline ({type(e).__name__}: {reason}); download it while online, or {instead}"
        ) from e
    if not hasattr(ds, "keys"):  # a single Dataset
        ds = datasets.DatasetDict({"train": ds})
    return ds


def hf_split(ds: Any, split: str | None, key: str = "data.hf.split") -> Any:
    """The named split of a DatasetDict, None if ``split`` is None; DataError if absent."""
    if split is None:
        return None
    if split not in ds:
        raise DataError(f"{key}: split {split!r} not in the dataset; splits present: {list(ds)}")
    return ds[split]


def hf_column(dataset: Any, column: str, key: str) -> list:
    """One column of a Dataset as a list; DataError listing the columns when it is missing."""
    if column not in dataset.column_names:
        raise DataError(
            f"{key}: no column {column!r} in the Hugging Face dataset; "
            f"columns present: {dataset.column_names}"
        )
    return list(dataset[column])


def hf_fingerprint(ds: Any) -> list[str]:
    """Fingerprints of every split, so a changed dataset never reuses a stale cache."""
    return [f"{name}:{getattr(split, '_fingerprint', '')}" for name, split in ds.items()]
