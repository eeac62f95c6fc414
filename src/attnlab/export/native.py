"""attnlab's own export: safetensors weights + a JSON config, read back without pickles.

    <folder>/model.safetensors   the architecture's state dict (tied tables stored once)
    <folder>/config.json         {"format": "attnlab-native", "model": {...}, "task": ...}
    <folder>/tokenizer.json      the run's tokenizer, as attnlab saves it

:func:`load_native` rebuilds the model from ``config.json`` (checked like any config)
and loads the tensors; nothing in the folder is executed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnlab.errors import CheckpointError, UserError

FORMAT = "attnlab-native"
VERSION = 1


def native_config(model: Any, task: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "task": task, "model": model.cfg.to_dict()}


def save_weights(model: Any, path: Path) -> None:
    """The state dict as safetensors, a parameter shared by two modules (tied tables) once,
    under the first name ``named_parameters`` gives it (``load_model`` fills in the others).
    Written by Python, so a full or read-only disk is an OSError like any other write."""
    from safetensors.torch import save

    unique = {name for name, _ in model.named_parameters()}
    unique |= {name for name, _ in model.named_buffers()}
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if k in unique}
    path.write_bytes(save(tensors, metadata={"format": "pt"}))


def load_native(folder: str | Path) -> tuple[Any, Any, str]:
    """(model in eval mode, tokenizer, task) from a folder ``format=native`` wrote."""
    from safetensors.torch import load_model

    from attnlab.data.tokenizers import load_tokenizer
    from attnlab.models import ModelConfig, build_model

    folder = Path(folder)
    path = folder / "config.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path} is missing or not JSON ({type(exc).__name__}); pass a folder written by "
            "attnlab-export format=native"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an attnlab-native config; pass a folder written "
                              "by attnlab-export format=native")  # fmt: skip
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path} has format version {meta.get('version')}, this attnlab "
                              f"reads {VERSION}; export the run again")  # fmt: skip
    try:
        model = build_model(ModelConfig.from_dict(dict(meta["model"]), strict=False),
                            str(meta["task"]))
    except UserError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} lacks {exc}; export the run again") from None
    try:
        missing, unexpected = load_model(model, str(folder / "model.safetensors"), strict=False)
    except Exception as exc:  # safetensors raises its own error types, and OSError
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{folder / 'model.safetensors'} cannot be read ({reason}); "
                              "export the run again") from None  # fmt: skip
    if missing or unexpected:
        raise CheckpointError(
            f"{folder / 'model.safetensors'} does not fit its config.json (missing "
            f"{sorted(missing)[:1]}, unexpected {sorted(unexpected)[:1]}); export the run again"
        )
    return model.eval(), load_tokenizer(folder / "tokenizer.json"), str(meta["task"])
