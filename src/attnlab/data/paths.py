"""Where real data and caches live.

Presets point at ``${attnlab_data_root:}/…``. The resolver returns
``$ATTNLAB_DATA_ROOT`` when set, else ``<repo root>/../shared/data`` — the
folder that sits beside a checkout (docs/design.md, "Data").
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

DATA_ROOT_ENV = "ATTNLAB_DATA_ROOT"
CACHE_ENV = "ATTNLAB_CACHE"
DATA_ROOT_RESOLVER = "attnlab_data_root"


def repo_root() -> Path | None:
    """The checkout holding ``conf/`` next to ``src/``, found from this file; None if installed."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "conf").is_dir() and (parent / "src").is_dir():
            return parent
    return None


def data_root() -> str:
    """``$ATTNLAB_DATA_ROOT``, else ``<repo root>/../shared/data`` (cwd when not in a checkout)."""
    env = os.environ.get(DATA_ROOT_ENV)
    if env:
        return env
    base = repo_root() or Path.cwd()
    return os.path.normpath(base / ".." / "shared" / "data")


def default_cache_dir() -> Path:
    """``$ATTNLAB_CACHE``, else ``~/.cache/attnlab``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "attnlab"


def register_resolvers() -> None:
    """Register ``${attnlab_data_root:}`` with OmegaConf (idempotent)."""
    OmegaConf.register_new_resolver(DATA_ROOT_RESOLVER, data_root, replace=True)
