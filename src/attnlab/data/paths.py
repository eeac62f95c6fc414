"""Where real data and caches live.

Presets point at ``${attnlab_data_root:}/…``. The resolver returns
``$ATTNLAB_DATA_ROOT`` when set, else ``data`` in the working directory — where
``attnlab-data`` fetches the data sets (docs/design.md, "Data").
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

DATA_ROOT_ENV = "ATTNLAB_DATA_ROOT"
CACHE_ENV = "ATTNLAB_CACHE"
DATA_ROOT_RESOLVER = "attnlab_data_root"


def data_root() -> str:
    """``$ATTNLAB_DATA_ROOT``, else ``./data`` of the working directory (as an absolute path)."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return env
    return os.path.abspath("data")


def default_cache_dir() -> Path:
    """``$ATTNLAB_CACHE``, else ``~/.cache/attnlab``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "attnlab"


def register_resolvers() -> None:
    """Register ``${attnlab_data_root:}`` with OmegaConf (idempotent)."""
    OmegaConf.register_new_resolver(DATA_ROOT_RESOLVER, data_root, replace=True)
