"""``attnlab-generate``: sample or translate with a trained model.

    attnlab-generate ckpt_path=<run>/checkpoints/last.ckpt prompt="1 2 3 4"       # → 4 3 2 1
    attnlab-generate run_dir=<run> prompt="ROMEO:" max_new_tokens=200 \\
        decode.strategy=sample decode.temperature=0.8 decode.top_k=20 num_samples=3 seed=1
    attnlab-generate run_dir=<run> prompt_file=sources.txt decode.strategy=beam decode.beam_size=5

The model comes from the run's ``.hydra/config.yaml`` and the checkpoint, the
tokenizer from ``<run_dir>/tokenizer.json``: no data files are needed. A
language model continues its prompt (prompt + continuation is printed); a
seq2seq model (encoder-decoder, or decoder-only reading ``source SEP``)
transforms it. One line per output; newlines inside an output are written as
``\\n`` unless ``raw=true``. Synthetic tasks take space-separated symbols.

Options: ``run_dir`` / ``ckpt_path`` (as attnlab-eval), ``prompt``,
``prompt_file`` (one prompt per line), ``num_samples`` (sampling only),
``max_new_tokens``, ``seed`` (default: the run's), ``device`` (default: cuda
when the run trained on a GPU and one is visible), ``raw``; and ``decode.*``:
``strategy`` greedy|sample|beam, ``temperature``, ``top_k``, ``top_p``,
``beam_size``, ``length_penalty`` (default: the run's ``decode`` settings).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from attnlab.cli.common import run_key_value_command
from attnlab.errors import ConfigError

OPTIONS: dict[str, Any] = {
    "run_dir": None, "ckpt_path": None, "prompt": None, "prompt_file": None, "num_samples": "1",
    "max_new_tokens": None, "seed": None, "device": None, "raw": "false",
}  # fmt: skip
ROWS_PER_BATCH = 64


def _integer(name: str, value: Any, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = minimum - 1
    if number < minimum:
        raise ConfigError(f"{name}={value} must be an integer >= {minimum}")
    return number


def read_prompts(prompt: str | None, prompt_file: str | None) -> list[str]:
    """``prompt`` and/or the non-empty lines of ``prompt_file``, in that order."""
    prompts = [prompt] if prompt is not None else []
    if prompt_file is not None:
        path = Path(prompt_file).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"prompt_file={prompt_file} cannot be read ({exc.__class__.__name__}); "
                "give a UTF-8 text file with one prompt per line"
            ) from None
        prompts += [line for line in lines if line.strip()]
    if not prompts:
        raise ConfigError('no prompt; pass prompt="…" or prompt_file=<file with one per line>')
    if any(not p.strip() for p in prompts):
        raise ConfigError('prompt is empty; pass prompt="…" with at least one token')
    return prompts


def decode_config(cfg: Any, options: dict[str, Any]) -> Any:
    """``decode.*`` of the run with the command line on top, checked against DecodeConfig."""
    from attnlab.cli.checkpoints import resolved
    from attnlab.cli.schema import check_dataclass
    from attnlab.options import DecodeConfig

    values = dict(resolved(cfg, "decode") or {})
    if options["max_new_tokens"] is not None:
        values["max_new_tokens"] = _integer("max_new_tokens", options["max_new_tokens"], 1)
    return check_dataclass(DecodeConfig, values, "decode.")


def check_known(tokenizer: Any, prompt: str) -> None:
    """Name the prompt's characters the vocabulary lacks: an error when nothing else is left,
    else a warning (they are read as <unk>)."""
    from attnlab.data.base import UNK

    unknown = sorted({c for c in prompt if not c.isspace() and UNK in tokenizer.encode(c)})
    if not unknown:
        return
    shown = " ".join(repr(c) for c in unknown[:20])
    known = [i for i in tokenizer.encode(prompt) if i != UNK]
    if not known:
        raise ConfigError(
            f"prompt {prompt!r} has only characters this run's vocabulary lacks ({shown}); "
            "use characters of the training data"
        )
    print(f"warning: not in the vocabulary, read as <unk>: {shown}", file=sys.stderr)


def task_of(cfg: Any) -> str:
    """``seq2seq``, ``lm`` or ``classification``: asked of the data module, which loads nothing."""
    from attnlab.cli import pipeline

    return str(pipeline.build(cfg.data, "data").task)


def load_model(cfg: Any, ckpt: Path, vocab_size: int, device: str, task: str) -> Any:
    """The run's architecture with the checkpoint's weights, in eval mode on ``device``."""
    from attnlab.cli.checkpoints import load_weights, read_checkpoint, resolved
    from attnlab.models import ModelConfig, build_model

    settings = {**(resolved(cfg, "model") or {}), "vocab_size": vocab_size}
    model_cfg = ModelConfig.from_dict(settings, strict=False)
    checkpoint = read_checkpoint(ckpt)
    # the task's state_dict holds the model under "model."; other entries are task metrics
    state = {
        k.removeprefix("model."): v
        for k, v in checkpoint["state_dict"].items()
        if k.startswith("model.")
    }
    model = build_model(model_cfg, task)
    saved = (checkpoint.get("hyper_parameters") or {}).get("model")
    load_weights(model, state, ckpt, saved, model_cfg.to_dict())
    return model.eval().to(device)


def pick_device(cfg: Any, asked: str | None) -> str:
    import torch

    if asked:
        if asked.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device={asked} but no GPU is visible; use device=cpu")
        return asked
    accelerator = str((cfg.get("trainer") or {}).get("accelerator", "cpu"))
    gpu = accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    return "cuda" if gpu else "cpu"


def batch_inputs(model: Any, task: str, prompts: list[list[int]], device: str) -> Any:
    """Token ids of a batch of prompts laid out as the architecture reads them."""
    import torch

    from attnlab.special_tokens import PAD
    from attnlab.tasks.seq2seq import left_pad_prompts

    width = max(len(p) for p in prompts)
    right = torch.full((len(prompts), width), PAD, dtype=torch.long)
    for i, ids in enumerate(prompts):
        right[i, : len(ids)] = torch.tensor(ids)
    if model.feeding.prompt_layout(task) == "source":
        return right.to(device)  # the encoder reads the source, right-padded
    if task == "seq2seq":
        return left_pad_prompts(right).to(device)  # PAD… source SEP, as in training
    left = torch.full_like(right, PAD)  # a language model continues from the last token
    for i, ids in enumerate(prompts):
        left[i, width - len(ids) :] = torch.tensor(ids)
    return left.to(device)


def check_length(model: Any, task: str, inputs: Any, decode: Any, explicit: bool) -> None:
    """Learned position tables end at model.max_len: keep prompt + output inside it."""
    from attnlab.inference.generation import position_room

    cfg = model.cfg
    room = position_room(model, inputs)
    if room is None:
        return
    if inputs.size(1) > cfg.max_len:
        raise ConfigError(
            f"a prompt has {inputs.size(1)} tokens, more than model.max_len={cfg.max_len}; "
            "shorten it"
        )
    used = cfg.max_len - room
    if room < 1:
        raise ConfigError(
            f"a prompt has {used} tokens, which leaves no position for a new one under "
            f"model.max_len={cfg.max_len}; shorten it"
        )
    wanted = decode.max_new_tokens or inputs.size(1) + 50
    if wanted > room:
        if explicit:
            raise ConfigError(
                f"max_new_tokens={wanted} does not fit model.max_len={cfg.max_len} after a "
                f"{used}-token prompt; use max_new_tokens<={room}"
            )
        decode.max_new_tokens = room


def run(argv: list[str]) -> int:
    from attnlab.cli.checkpoints import (
        config_overrides,
        load_run_config,
        locate_run,
        parse_arguments,
    )

    options, overrides = parse_arguments(argv, OPTIONS)
    other = [f"{k}={v}" for k, v in overrides if not k.lstrip("+").startswith("decode.")]
    if other:
        raise ConfigError(
            f"'{other[0]}' is not an attnlab-generate option; use decode.*=…, "
            f"{', '.join(f'{k}=' for k in OPTIONS)}"
        )
    num_samples = _integer("num_samples", options["num_samples"], 1)
    prompts = read_prompts(options["prompt"], options["prompt_file"])
    run_dir, ckpt = locate_run(options["run_dir"], options["ckpt_path"])
    cfg = load_run_config(run_dir, config_overrides(argv, OPTIONS))
    decode = decode_config(cfg, options)
    if num_samples > 1 and decode.strategy != "sample":
        raise ConfigError(
            f"num_samples={num_samples} needs decode.strategy=sample; "
            f"{decode.strategy} decoding returns one output per prompt"
        )
    from attnlab.models import ARCHITECTURES

    name = str(cfg.model.get("name"))
    feeding = ARCHITECTURES.get(name).feeding
    if not any(feeding.prompt_layout(t) for t in ("seq2seq", "lm")):
        raise ConfigError(
            f"{run_dir} holds a model={name}, which cannot generate: "
            f"{feeding.refusal('seq2seq')}; use attnlab-eval for its metrics"
        )
    task = task_of(cfg)
    if task.endswith("classification"):
        raise ConfigError(
            f"{run_dir} is a classification run: it predicts labels, not text; "
            "use attnlab-eval for its metrics"
        )
    if feeding.prompt_layout(task) is None:
        raise ConfigError(
            f"{run_dir} holds a model={name} trained on {task} data, which it cannot generate "
            f"from: {feeding.refusal(task)}; use attnlab-eval for its metrics"
        )
    import torch  # the paths and options are fine: now load what generation needs

    from attnlab.data.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(run_dir / "tokenizer.json")
    device = pick_device(cfg, options["device"])
    model = load_model(cfg, ckpt, tokenizer.vocab_size, device, task)
    seed = _integer("seed", options["seed"], 0) if options["seed"] is not None else int(cfg.seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    raw = str(options["raw"]).lower() in ("1", "true", "yes")
    for prompt in prompts:
        check_known(tokenizer, prompt)
    encoded = [tokenizer.encode(p) for p in prompts for _ in range(num_samples)]
    if any(not ids for ids in encoded):
        raise ConfigError("a prompt encodes to no tokens; give text the tokenizer knows")
    explicit = options["max_new_tokens"] is not None
    for start in range(0, len(encoded), ROWS_PER_BATCH):
        batch = encoded[start : start + ROWS_PER_BATCH]
        for ids in complete(model, task, batch, decode, explicit, generator):
            text = tokenizer.decode(ids)
            print(text if raw else text.replace("\r", "\\r").replace("\n", "\\n"), flush=True)
    return 0


def complete(
    model: Any, task: str, prompts: list[list[int]], decode: Any, explicit: bool, generator: Any
) -> list[list[int]]:
    """Token ids to print per prompt: prompt + continuation (LM) or the output (seq2seq)."""
    from attnlab.inference.generation import generate
    from attnlab.special_tokens import PAD

    device = next(model.parameters()).device
    inputs = batch_inputs(model, task, prompts, str(device))
    check_length(model, task, inputs, decode, explicit)
    outputs = generate(model, inputs, decode, generator=generator).tolist()
    new = [[t for t in output if t != PAD] for output in outputs]
    return [p + n for p, n in zip(prompts, new, strict=True)] if task == "lm" else new


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the process exit code."""
    return run_key_value_command(run, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
