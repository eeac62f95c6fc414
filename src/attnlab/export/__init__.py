"""``attnlab-export``: a trained run as a folder other code loads, with no pickles.

    attnlab-export run_dir=<run> format=hf        # transformers' from_pretrained
    attnlab-export run_dir=<run> format=native    # attnlab.export.load_native
    attnlab-export ckpt_path=<run>/checkpoints/last.ckpt format=hf out=<folder>

``format=hf`` writes ``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json``, ``generation_config.json`` and a model card (``README.md``)
that ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load:
``model=decoder_only`` with Pre-LN LayerNorm, learned positions and a ReLU, GELU or
squared-ReLU FFN as GPT2LMHeadModel; with Pre-LN RMSNorm, RoPE and SwiGLU or GEGLU (GQA too)
as LlamaForCausalLM; with sandwich RMSNorm, RoPE and GEGLU (and Gemma 2's logit soft-caps)
as Gemma2ForCausalLM;
``model=encoder_only`` with Post-LN, learned positions and ``model.embed_norm=true`` as
BertModel (``AutoModel``, the encoder's states). Any other option is refused in one line
that names it. ``format=native`` writes attnlab's own
safetensors and config for any architecture.

Options: ``run_dir`` / ``ckpt_path`` (as attnlab-eval: the best checkpoint by default),
``format`` hf|native, ``out`` (default ``<run_dir>/export/<format>``; it must not exist
yet, or be empty: nothing is overwritten).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from attnlab.cli.common import run_key_value_command, user_errors
from attnlab.errors import ConfigError

OPTIONS: dict[str, Any] = {"run_dir": None, "ckpt_path": None, "format": None, "out": None}
FORMATS = ("hf", "native")


def output_folder(out: str | None, run_dir: Path, fmt: str) -> Path:
    folder = Path(out).expanduser().absolute() if out else run_dir / "export" / fmt
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(
            f"out={folder} already exists and is not empty; pass another out=<new folder> "
            "(nothing is overwritten)"
        )
    above = next(p for p in folder.parents if p.exists())
    if not above.is_dir():
        raise ConfigError(f"out={folder} lies under {above}, which is a file; pass "
                          "out=<a new folder>")  # fmt: skip
    return folder


def summary_of(run_dir: Path) -> dict[str, Any]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def model_card(
    run_dir: Path, ckpt: Path, model: Any, fmt: str, hf_class: str | None, notes: list[str]
) -> str:
    """``README.md``: what was trained, how, what it reached, and how to load it."""
    summary = summary_of(run_dir)
    overrides = [str(o) for o in summary.get("overrides") or []]
    metrics = {k: v for k, v in (summary.get("metrics") or {}).items()
               if isinstance(v, int | float) and k.split("/")[0] in ("val", "test")}  # fmt: skip
    lines = ["---", f"library_name: {'transformers' if fmt == 'hf' else 'attnlab'}",
             "tags:", "- attnlab", f"- {model.cfg.name}", "---", "",
             f"# {run_dir.name}", "",
             f"A `model={model.cfg.name}` trained with attnlab ({summary.get('task', '?')} data), "
             f"exported from `{ckpt.name}` as "
             + (f"`{hf_class}`." if hf_class else "attnlab's native safetensors."), ""]  # fmt: skip
    lines += ["## Command", "", "```", " ".join(["attnlab-train", *overrides]), "```", ""]
    facts = []
    if summary.get("git_sha"):
        facts.append(f"attnlab commit `{summary['git_sha']}`")
    if summary.get("params"):
        facts.append(f"{summary['params']:,} parameters")
    if summary.get("tokens"):
        facts.append(f"{summary['tokens']:,} training tokens")
    if facts:
        lines += ["; ".join(facts) + ".", ""]
    if metrics:
        lines += ["## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in sorted(metrics.items())] + [""]
    lines += ["## Model", "", "| key | value |", "|---|---|"]
    lines += [f"| model.{k} | {v} |" for k, v in model.cfg.to_dict().items()] + [""]
    if notes:
        lines += ["## Exact mapping", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["## Loading", "", "```python"]
    if hf_class == "BertModel":
        lines += ["from transformers import AutoModel, AutoTokenizer",
                  'model = AutoModel.from_pretrained("<this folder>", add_pooling_layer=False)',
                  'tokenizer = AutoTokenizer.from_pretrained("<this folder>")']  # fmt: skip
    elif fmt == "hf":
        lines += ["from transformers import AutoModelForCausalLM, AutoTokenizer",
                  'model = AutoModelForCausalLM.from_pretrained("<this folder>")',
                  'tokenizer = AutoTokenizer.from_pretrained("<this folder>")']  # fmt: skip
    else:
        lines += ["from attnlab.export import load_native",
                  'model, tokenizer, task = load_native("<this folder>")']  # fmt: skip
    return "\n".join([*lines, "```", ""])


def write_hf(folder: Path, model: Any, task: str, tokenizer: Any) -> tuple[str, list[str]]:
    """The Hugging Face folder; returns (the model class, what the card says was folded).
    Every file is written by Python (safetensors and tokenizers serialise in memory), so a
    full or read-only disk is an OSError like any other command's."""
    from safetensors.torch import save

    from attnlab.export.hf import check_finite, export_weights
    from attnlab.export.tokenizer import hf_tokenizer, tokenizer_config

    config, tensors, hf_class = export_weights(model, task)
    check_finite(tensors)
    notes = list(config["attnlab_folds"])
    (folder / "model.safetensors").write_bytes(save(tensors, metadata={"format": "pt"}))
    _write_json(folder / "config.json", config)
    text = hf_tokenizer(tokenizer).to_str(pretty=True)
    (folder / "tokenizer.json").write_text(text, encoding="utf-8")
    _write_json(folder / "tokenizer_config.json", tokenizer_config(model.cfg.max_len))
    from attnlab.inference.generation import NEVER_GENERATED

    # attnlab's decoding never emits <pad>, <bos> or <mask>: suppress them here too; a class
    # whose cache cannot decode this model (Qwen3.5 with no softmax layer) generates without
    ids = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "use_cache")}
    suppressed = {"suppress_tokens": list(NEVER_GENERATED)}
    _write_json(folder / "generation_config.json", {**ids, **suppressed})
    return hf_class, notes


def write_native(folder: Path, model: Any, task: str, tokenizer: Any) -> None:
    from attnlab.export.native import native_config, save_weights

    save_weights(model, folder / "model.safetensors")
    _write_json(folder / "config.json", native_config(model, task))
    tokenizer.save(folder / "tokenizer.json")


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def run(argv: list[str]) -> int:
    from attnlab.cli.checkpoints import load_run_config, locate_run, parse_arguments

    options, overrides = parse_arguments(argv, OPTIONS)
    if overrides:
        key = overrides[0][0]
        raise ConfigError(f"'{key}' is not an attnlab-export option; use "
                          f"{', '.join(f'{k}=' for k in OPTIONS)}")  # fmt: skip
    fmt = options["format"]
    if fmt not in FORMATS:
        raise ConfigError(f"format={fmt}: choose format=hf (transformers) or format=native")
    run_dir, ckpt = locate_run(options["run_dir"], options["ckpt_path"])
    folder = output_folder(options["out"], run_dir, fmt)
    cfg = load_run_config(run_dir, [])

    from attnlab.data.tokenizers import load_tokenizer
    from attnlab.generate import load_model, task_of

    task = task_of(cfg)
    if fmt == "hf":  # refuse before any weight is read
        from attnlab.cli.checkpoints import resolved
        from attnlab.export.hf import choose_mapping
        from attnlab.models import ModelConfig

        settings = {**(resolved(cfg, "model") or {}), "vocab_size": 8}
        choose_mapping(ModelConfig.from_dict(settings, strict=False), task)
    tokenizer = load_tokenizer(run_dir / "tokenizer.json")
    model = load_model(cfg, ckpt, tokenizer.vocab_size, "cpu", task)
    fix = "nothing was exported: free disk space or pass out=<a folder on a writable disk>"
    with user_errors(folder, fix=fix):
        hf_class = write_folder(folder, model, task, tokenizer, fmt, (run_dir, ckpt))
    shown = f" as {hf_class}" if hf_class else ""
    print(f"exported {ckpt.name}{shown} to {folder}")
    return 0


def write_folder(
    folder: Path, model: Any, task: str, tokenizer: Any, fmt: str, source: tuple[Path, Path]
) -> str | None:
    """Every file into a staging folder beside ``folder``, then renamed to it: a failed
    write leaves nothing behind. Returns the Hugging Face class (None: native)."""
    staging = folder.with_name(f".{folder.name}.partial-{os.getpid()}")
    try:
        staging.mkdir(parents=True)
        hf_class, notes = None, []
        if fmt == "hf":
            hf_class, notes = write_hf(staging, model, task, tokenizer)
        else:
            write_native(staging, model, task, tokenizer)
        card = model_card(*source, model, fmt, hf_class, notes)
        (staging / "README.md").write_text(card, encoding="utf-8")
        if folder.is_dir():
            folder.rmdir()  # empty, checked above
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return hf_class


def load_native(folder: str | Path) -> tuple[Any, Any, str]:
    """(model, tokenizer, task) from a ``format=native`` folder (:mod:`attnlab.export.native`)."""
    from attnlab.export.native import load_native as load

    return load(folder)


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the process exit code."""
    return run_key_value_command(run, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
