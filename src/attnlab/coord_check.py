"""attnlab-coordcheck: μP's coordinate check (Yang et al. 2022, Fig. 5; the ``mup`` README).

usage: attnlab-coordcheck [--widths 64 128 256 512 1024] [--steps 4] [--lr 0.01]
                          [--param sp mup] [--seeds 2] [--text FILE] [--out DIR]
                          [model.KEY=VALUE ...]

Trains a decoder-only language model for a few Adam steps at each width (``d_model``; the
heads keep their number, d_ff its ratio) and records, at every step, the mean absolute
coordinate of each layer type's output: the embeddings, attention, the FFN, each layer's
residual stream and the logits. Under μP these stay flat as the width grows; under SP
they grow once the model has taken a step (the logits about ∝ width). Prints a table of
the log-log slopes of mean |activation| against width at the last step (0: flat) and
writes ``coord_check.png`` (one panel per layer type and parametrisation, a line per step),
``coord_check.json`` and ``coord_check.md`` under ``--out``.

``--text FILE`` trains on the characters of a text file (e.g. Tiny Shakespeare); without
it, on tokens drawn from a fixed random bigram table (no download, deterministic). Extra
``model.KEY=VALUE`` settings apply to every width (e.g. ``model.norm=post``,
``model.mup_base_width=128``). The model takes the run's optimiser exactly: AdamW with
attnlab's parameter groups (:func:`attnlab.tasks.base.param_groups`), no schedule.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.errors import ConfigError

LAYER_TYPES = ("embedding", "attention", "ffn", "residual", "logits")


@dataclass
class CoordCheck:
    widths: tuple[int, ...] = (64, 128, 256, 512, 1024)
    steps: int = 4
    lr: float = 1e-2
    params: tuple[str, ...] = ("sp", "mup")
    seeds: int = 2
    batch: int = 8
    block: int = 64
    model: dict[str, Any] = field(default_factory=dict)
    text: Path | None = None
    out: Path = Path("coord_check")


def tokens(check: CoordCheck, vocab: int = 64) -> tuple[Tensor, int]:
    """The training tokens (a long 1-D tensor) and the vocabulary size."""
    if check.text is not None:
        try:
            raw = check.text.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"--text {check.text}: cannot read it as UTF-8 text ({error}); "
                              "pass a plain text file") from None  # fmt: skip
        if len(raw) < check.block + 2:  # a batch row is block + 1 characters, at any offset
            raise ConfigError(f"--text {check.text} has {len(raw)} characters; the check reads "
                              f"rows of {check.block + 1}: pass a text of {check.block + 2} "
                              "characters or more")  # fmt: skip
        chars = sorted(set(raw))
        index = {c: i for i, c in enumerate(chars)}
        return torch.tensor([index[c] for c in raw], dtype=torch.long), len(chars)
    generator = torch.Generator().manual_seed(1234)
    table = torch.rand(vocab, vocab, generator=generator) ** 4  # peaked next-token rows
    cumulative = (table / table.sum(1, keepdim=True)).cumsum(1).tolist()
    draws = torch.rand(20_000, generator=generator).tolist()
    out, token = [], 0
    for u in draws:
        token = min(bisect.bisect_left(cumulative[token], u), vocab - 1)
        out.append(token)
    return torch.tensor(out, dtype=torch.long), vocab


def _hooks(model: nn.Module, record: dict[str, list[float]]) -> list[Any]:
    from attnlab.models.parametrization import Readout
    from attnlab.models.stack import TokenEmbedding
    from attnlab.nn.attention import MultiHeadAttention
    from attnlab.nn.feedforward import FeedForward, SwiGLU
    from attnlab.nn.latent_attention import MultiHeadLatentAttention
    from attnlab.nn.layers import DecoderLayer, ParallelLayer
    from attnlab.nn.moe import MixtureOfExperts

    kinds = ((TokenEmbedding, "embedding"),
             ((MultiHeadAttention, MultiHeadLatentAttention), "attention"),
             ((FeedForward, SwiGLU, MixtureOfExperts), "ffn"),
             ((DecoderLayer, ParallelLayer), "residual"), (Readout, "logits"))  # fmt: skip
    experts = {  # a mixture's experts: measured as the mixture's output (one may get no token)
        id(m) for moe in model.modules() if isinstance(moe, MixtureOfExperts)
        for m in moe.modules() if m is not moe
    }  # fmt: skip
    handles = []
    for module in model.modules():
        for cls, name in kinds:
            if id(module) in experts:
                continue
            if isinstance(module, cls):

                def hook(_m: nn.Module, _i: Any, out: Tensor, name: str = name) -> None:
                    record[name].append(float(out.detach().abs().mean()))

                handles.append(module.register_forward_hook(hook))
    return handles


def measure(check: CoordCheck) -> dict[str, Any]:
    """{param: {layer type: [[mean |x| per width] per step]}} averaged over seeds."""
    from attnlab.models import build_model
    from attnlab.models.parametrization import lr_multipliers
    from attnlab.nn.moe import update_biases
    from attnlab.options import OptimConfig
    from attnlab.tasks.base import auxiliary_losses, param_groups

    data, vocab = tokens(check)
    configs = model_configs(check, vocab)
    results: dict[str, Any] = {}
    for param in check.params:
        table = {t: [[0.0] * len(check.widths) for _ in range(check.steps)] for t in LAYER_TYPES}
        for w_index, width in enumerate(check.widths):
            cfg = configs[param, width]
            for seed in range(check.seeds):
                torch.manual_seed(seed)
                model = build_model(cfg, "lm").train()
                optim = OptimConfig(lr=check.lr, weight_decay=0.0)
                groups = param_groups(model.named_parameters(), optim, lr_multipliers(model))
                optimizer = torch.optim.AdamW(groups, lr=check.lr, betas=optim.betas,
                                              eps=optim.eps)  # fmt: skip
                record: dict[str, list[float]] = defaultdict(list)
                handles = _hooks(model, record)
                batches = torch.Generator().manual_seed(seed)
                for step in range(check.steps):
                    starts = torch.randint(0, data.numel() - check.block - 1, (check.batch,),
                                           generator=batches)  # fmt: skip
                    rows = torch.stack([data[s : s + check.block + 1] for s in starts.tolist()])
                    record.clear()
                    logits = model(rows[:, :-1])
                    for name in LAYER_TYPES:
                        values = record[name]
                        table[name][step][w_index] += sum(values) / len(values) / check.seeds
                    loss = nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                                       rows[:, 1:].reshape(-1))  # fmt: skip
                    loss = loss + sum(auxiliary_losses(model).values())  # model.ffn=moe's
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    update_biases(model)
                for handle in handles:
                    handle.remove()
        results[param] = table
    return results


# set by the command itself: --widths, --param, the data's vocabulary; and what a model
# outside the decoder-only Transformer would need (images)
SET_HERE = {"d_model": "--widths", "param": "--param", "vocab_size": "the data",
            "image_size": "image data", "channels": "image data", "patch_size": "image data"}


def model_configs(check: CoordCheck, vocab: int) -> dict[tuple[str, int], Any]:
    """The checked ModelConfig of every (parametrisation, width), before anything trains."""
    from attnlab.cli.pipeline import check_memory
    from attnlab.models import ModelConfig
    from attnlab.nn.positions import POSITIONS

    for key, source in SET_HERE.items():
        if key in check.model:
            raise ConfigError(f"model.{key} is set by {source} here, not by an override; "
                              f"drop model.{key}={check.model[key]}")  # fmt: skip
    name = check.model.get("name", "decoder_only")
    if name != "decoder_only":
        raise ConfigError(f"model.name={name}: the coordinate check measures μP, which applies "
                          "to Transformer architectures, on a decoder-only language model; "
                          "drop model.name")  # fmt: skip
    configs = {}
    defaults = {"name": "decoder_only", "n_layers": 2, "n_heads": 4, "dropout": 0.0,
                "max_len": check.block}  # fmt: skip
    # every override must be read by the μP model (SP reads all but μP's own keys)
    ModelConfig.from_dict({**defaults, **check.model, "param": "mup"})
    for param in check.params:
        for width in check.widths:
            settings = {**defaults, **check.model, "d_model": width, "param": param}
            cfg = ModelConfig.from_dict(settings, strict=False).with_data({"vocab_size": vocab})
            if POSITIONS.get(cfg.pos).max_len_bound and cfg.max_len < check.block:
                raise ConfigError(f"model.max_len={cfg.max_len} is shorter than the check's "
                                  f"rows of {check.block} tokens under model.pos={cfg.pos}; "
                                  f"drop it or set model.max_len>={check.block}")  # fmt: skip
            configs[param, width] = cfg
    for param in check.params:  # the widest model of each parametrisation fits in memory
        check_memory(configs[param, max(check.widths)], "cpu", "lm")
    return configs


def slope(widths: tuple[int, ...], values: list[float]) -> float:
    """Least-squares slope of log mean |x| against log width (0: flat; 1: ∝ width)."""
    logs = np.log(np.maximum(np.asarray(values, dtype=float), 1e-30))
    return float(np.polyfit(np.log(np.asarray(widths, dtype=float)), logs, 1)[0])


def slopes(check: CoordCheck, results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per parametrisation and layer type, the slope at the last step."""
    return {
        param: {name: slope(check.widths, table[name][-1]) for name in LAYER_TYPES}
        for param, table in results.items()
    }


def report(check: CoordCheck, results: dict[str, Any]) -> str:
    by_param = slopes(check, results)
    header = "| param | " + " | ".join(LAYER_TYPES) + " |"
    lines = [
        f"Slope of log mean |activation| against log width at step {check.steps} "
        f"(widths {', '.join(map(str, check.widths))}; lr {check.lr:g}; "
        f"{check.seeds} seeds; 0 = flat):",
        "",
        header,
        "|" + "---|" * (len(LAYER_TYPES) + 1),
    ]
    for param, row in by_param.items():
        lines.append(f"| {param} | " + " | ".join(f"{row[t]:+.2f}" for t in LAYER_TYPES) + " |")
    return "\n".join(lines)


def plot(check: CoordCheck, results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = list(results)
    fig, axes = plt.subplots(len(params), len(LAYER_TYPES), figsize=(3.2 * len(LAYER_TYPES),
                             2.8 * len(params)), squeeze=False)  # fmt: skip
    for row, param in enumerate(params):
        for col, name in enumerate(LAYER_TYPES):
            ax = axes[row][col]
            for step, values in enumerate(results[param][name]):
                ax.plot(check.widths, values, marker="o", label=f"step {step + 1}",
                        color=plt.cm.viridis(step / max(1, check.steps - 1)))  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{param}: {name}", fontsize=9)
            ax.set_xlabel("width (d_model)", fontsize=8)
            if col == 0:
                ax.set_ylabel("mean |coordinate|", fontsize=8)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one ``error:`` line like every other mistake."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; see attnlab-coordcheck --help")


def parse(argv: list[str]) -> CoordCheck:
    from attnlab.cli.common import plain_text
    from attnlab.cli.compose import parse_one

    parser = _Parser(prog="attnlab-coordcheck", description=plain_text(__doc__.split("\n")[0]))
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--param", nargs="+", default=["sp", "mup"], choices=["sp", "mup"])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--text", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("coord_check"))
    parser.add_argument("overrides", nargs="*", help="model.KEY=VALUE")
    # model.KEY=VALUE may follow --widths W… (which would take it for a width)
    overrides = [a for a in argv if a.startswith("model.")]
    args = parser.parse_args([a for a in argv if a not in overrides])
    args.overrides += overrides
    if len(set(args.widths)) < 2 or args.steps < 1 or args.seeds < 1:
        raise ConfigError("attnlab-coordcheck needs two distinct widths or more, --steps >= 1 "
                          "and --seeds >= 1; pass e.g. --widths 64 128 256")  # fmt: skip
    for option, values in (("--widths", args.widths), ("--param", args.param)):
        repeated = next((v for v in values if values.count(v) > 1), None)
        if repeated is not None:
            raise ConfigError(f"{option} names {repeated} twice; give each once")
    if min(args.widths) < 1:
        raise ConfigError(f"--widths {min(args.widths)}: a width is a positive d_model")
    if not math.isfinite(args.lr) or args.lr <= 0:
        raise ConfigError(f"--lr {args.lr} must be a positive number; pass e.g. --lr 0.01")
    model: dict[str, Any] = {}
    for item in args.overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key.startswith("model.") or key == "model.":
            raise ConfigError(f"{item}: expected model.KEY=VALUE; e.g. model.norm=post")
        if key.removeprefix("model.") in model:
            raise ConfigError(f"{key} is given twice; give it once")
        model[key.removeprefix("model.")] = parse_one(item)
    check = CoordCheck(widths=tuple(sorted(args.widths)), steps=args.steps, lr=args.lr,
                       params=tuple(args.param), seeds=args.seeds, model=model,
                       text=args.text, out=args.out)  # fmt: skip
    return check


def claim_output(out: Path) -> None:
    """Create ``out`` and write a file into it, so that an unwritable folder is refused
    before the measuring; what this made is removed again."""
    import tempfile

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; pass a folder")
    missing = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out) as probe:
            probe.write(b"attnlab-coordcheck")
            probe.flush()
    except OSError as error:
        raise ConfigError(f"--out {out} cannot be written ({error.strerror or error}); "
                          "choose a writable folder") from None  # fmt: skip
    finally:
        for folder in missing:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()


def write_results(check: CoordCheck, results: dict[str, Any]) -> None:
    out = check.out
    out.mkdir(parents=True, exist_ok=True)
    text = report(check, results)
    print(text)
    (out / "coord_check.md").write_text(text + "\n", encoding="utf-8")
    payload = {"widths": list(check.widths), "steps": check.steps, "lr": check.lr,
               "seeds": check.seeds, "model": check.model, "mean_abs": results,
               "slopes": slopes(check, results)}  # fmt: skip
    (out / "coord_check.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    plot(check, results, out / "coord_check.png")
    print(f"wrote {out / 'coord_check.png'}, coord_check.json, coord_check.md")


def run(argv: list[str]) -> int:
    from attnlab.cli.common import plain_text, user_errors

    if {"-h", "--help"} & set(argv):
        print(plain_text(__doc__))
        return 0
    check = parse(argv)
    model_configs(check, tokens(check)[1])  # every model is checked before measuring
    fix = "choose a writable --out folder"
    with user_errors(check.out, fix=fix):
        claim_output(check.out)
    results = measure(check)
    with user_errors(check.out, fix=fix):
        write_results(check, results)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point: 0, or 2 with one ``error:`` line."""
    from attnlab.cli.common import user_errors

    try:
        with user_errors():
            return run(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # user_errors printed one `error: …` line
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
