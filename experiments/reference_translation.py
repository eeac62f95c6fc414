"""A translation gate from outside attnlab's model code: torch's own ``nn.Transformer``.

The studies' translation baselines are attnlab encoder-decoders. To show that a baseline
reaches what the architecture reaches elsewhere *in the same setup*, this script trains
``torch.nn.Transformer`` (Vaswani et al. 2017, §3: 6 + 6 layers there, the study's sizes
here) with its own loop on the batches attnlab's data module gives for the same
``attnlab-train`` overrides — the same Multi30k pairs, BPE vocabulary, length filter, batch
size and order — and scores it the same way: the best checkpoint by validation loss on the
same validation batches, greedy decoding (never a padding, start or mask token), sacreBLEU
(13a, no smoothing) on the detokenised test sentences. Nothing of attnlab's model, task,
optimiser, schedule or decoding code is used: only its configuration, its data and the BLEU
options it reports with.

What the reference is, as the paper describes it: a shared source/target/output embedding
scaled by √d_model (§3.4), sinusoidal positions added (§3.5, eq. in that section), dropout on
their sum (§5.4), torch's encoder and decoder layers (ReLU FFN, eq. 2; ``norm_first`` for
Pre-LN, else the paper's Post-LN; dropout on the attention weights as ``model.attn_dropout``),
a final LayerNorm on each stack (``nn.Transformer`` has one for Post-LN too; attnlab's Post-LN
has none), torch's own initialisation (not attnlab's ``model.init``), label-smoothed
cross-entropy (§5.4), AdamW with the run's β and ε (attnlab's defaults filled in by its
optimiser registry) and no weight decay, linear warm-up then flat (``constant``) or cosine decay to
``optim.min_lr``, and the gradient norm clipped at ``trainer.gradient_clip_val`` (0: none); a
non-finite training loss ends the run as ``diverged``, untested (exit 1), as attnlab's guard does.
Settings it does not implement are refused in one line (exit 2) rather than ignored.

Writes ``OUT/summary.json`` in the form ``attnlab-compare`` reads (``status``, ``config``,
``overrides``, ``metrics``, ``bleu_signature``), so a study can test its baseline against the
reference with ``--vs``:

    OMP_NUM_THREADS=1 python experiments/reference_translation.py OUT \\
        experiment=study_architectures_encdec seed=0

``--init=attnlab`` (first) is a diagnostic, not a gate: the reference initialised as attnlab's
``model.init=paper`` initialises (see :func:`attnlab_init`), named ``reference_<experiment>_
attnlab_init``, to tell whether a gap between the two comes from the initialisation;
``--init=qkv`` makes only the first of its two changes (``reference_<experiment>_qkv_init``),
to tell which of them does.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU
from torch import Tensor, nn
from torch.nn import functional as F

from attnlab.cli.compose import compose_config
from attnlab.cli.pipeline import build_data, build_task
from attnlab.optim.registry import optim_config
from attnlab.special_tokens import BOS, EOS, MASK, PAD
from attnlab.tasks.seq2seq import BLEU_OPTIONS  # the BLEU attnlab reports, not its code

IGNORE = -100
# what the reference implements; any other value of these keys is refused
IMPLEMENTS = {"name": "encoder_decoder", "pos": "sinusoidal", "ffn": "relu",
              "norm_type": "layernorm", "block": "sequential", "attention": "full", "param": "sp",
              "tie_embeddings": True, "scale_embeddings": True, "bias": True, "embed_norm": False,
              "qk_norm": False, "n_kv_heads": None, "final_softcap": None, "init": "paper",
              "zero_init_residual": False}  # fmt: skip
# the trainer's and task's keys it does not implement, at the values that make them no-ops
NO_OPS = {"trainer.accumulate_grad_batches": 1, "trainer.limit_train_batches": None,
          "trainer.check_val_every_n_epoch": None,
          "task.z_loss": 0.0}  # fmt: skip


def refuse(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def sinusoids(length: int, width: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…) (§3.5)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(1e4) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class Reference(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, encoder_layers: int,
                 decoder_layers: int, d_ff: int, dropout: float, attention_dropout: float,
                 norm_first: bool) -> None:  # fmt: skip
        super().__init__()
        self.width = width
        self.embedding = nn.Embedding(vocab, width, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, std=width**-0.5)
        self.register_buffer("positions", sinusoids(1024, width), persistent=False)
        self.dropout = nn.Dropout(dropout)
        with warnings.catch_warnings():  # Pre-LN layers skip its nested-tensor fast path
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = nn.Transformer(
                d_model=width, nhead=heads, num_encoder_layers=encoder_layers,
                num_decoder_layers=decoder_layers, dim_feedforward=d_ff, dropout=dropout,
                activation="relu", batch_first=True, norm_first=norm_first,
            )  # fmt: skip
        for module in self.transformer.modules():  # dropout on the attention weights
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = attention_dropout

    def embed(self, tokens: Tensor) -> Tensor:
        x = self.embedding(tokens) * math.sqrt(self.width)
        return self.dropout(x + self.positions[: tokens.size(1)])

    def encode(self, src: Tensor) -> Tensor:
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=src == PAD)

    def decode(self, memory: Tensor, src: Tensor, prefix: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(
            prefix.size(1), device=prefix.device, dtype=torch.bool
        )
        h = self.transformer.decoder(self.embed(prefix), memory, tgt_mask=causal,
                                     tgt_is_causal=True,
                                     memory_key_padding_mask=src == PAD)  # fmt: skip
        return h @ self.embedding.weight.T  # the output projection shares the embedding (§3.4)

    def forward(self, src: Tensor, prefix: Tensor) -> Tensor:
        return self.decode(self.encode(src), src, prefix)


def shifted(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Right-padded targets -> decoder input BOS y and labels y EOS (padding ignored)."""
    rows = torch.arange(tgt.size(0), device=tgt.device)
    prefix = torch.cat([torch.full_like(tgt[:, :1], BOS), tgt], dim=1)
    labels = torch.cat([tgt, torch.full_like(tgt[:, :1], PAD)], dim=1)
    labels[rows, (tgt != PAD).sum(1)] = EOS
    return prefix, labels.masked_fill(labels == PAD, IGNORE)


@torch.no_grad()
def greedy(model: Reference, src: Tensor, max_new: int) -> list[list[int]]:
    memory = model.encode(src)
    out = torch.full((src.size(0), 1), BOS, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_new):
        logits = model.decode(memory, src, out)[:, -1]
        logits[:, [PAD, BOS, MASK]] = -math.inf  # never generated: padding, a start, a mask
        step = logits.argmax(-1)
        step = step.masked_fill(done, PAD)
        out = torch.cat([out, step[:, None]], dim=1)
        done |= step == EOS
        if done.all():
            break
    hypotheses = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(EOS)] if EOS in row else row
        hypotheses.append([t for t in row if t != PAD])
    return hypotheses


def learning_rate(step: int, peak: float, warmup: int, total: int, floor: float,
                  schedule: str) -> float:  # fmt: skip
    """At optimiser step ``step`` (0-based, so the n-th update is n = step + 1): a linear
    warm-up n/warmup, then flat (constant) or a cosine from ``peak`` to ``floor`` at ``total``."""
    n = step + 1
    if n <= warmup:
        return peak * n / warmup
    if schedule == "constant":
        return peak
    progress = min(1.0, (n - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


# what the reference reads from the composed config besides the model and the optimiser (whose
# keys attnlab's registries resolve, defaults included); the study presets set every one
SETTINGS = ("seed", "trainer.max_steps", "trainer.val_check_interval",
            "trainer.limit_val_batches", "trainer.gradient_clip_val", "task.label_smoothing",
            "decode.strategy", "decode.max_new_tokens")  # fmt: skip


def settings_of(cfg: Any) -> dict[str, Any]:
    """Each of SETTINGS, and the optimiser's keys as ``optim.<key>``; refused in one line when
    unset or of a kind the reference lacks."""
    values = {key: OmegaConf.select(cfg, key) for key in SETTINGS}
    for key, value in values.items():
        if value is None:
            refuse(f"{key} is unset, and the reference does not guess attnlab's default: set it")
    for key in ("trainer.max_steps", "trainer.val_check_interval", "trainer.limit_val_batches"):
        if isinstance(values[key], float) or int(values[key]) < 1:
            refuse(f"{key}={values[key]}: the reference reads it as a count of steps or batches")
    for key, no_op in NO_OPS.items():
        value = OmegaConf.select(cfg, key)
        if value != no_op and not (key == "trainer.limit_train_batches" and value == 1.0):
            refuse(f"{key}={value}: the reference implements {key}={no_op} only")
    if values["trainer.max_steps"] < values["trainer.val_check_interval"]:
        refuse("trainer.max_steps is below trainer.val_check_interval: no validation would choose "
               "the checkpoint to test")  # fmt: skip
    if values["decode.strategy"] != "greedy":
        refuse(f"decode.strategy={values['decode.strategy']}: the reference decodes greedily only")
    optim = optim_config(OmegaConf.to_container(cfg.optim))
    if optim.name != "adamw" or optim.schedule not in ("cosine", "constant"):
        refuse(f"optim.name={optim.name} optim.schedule={optim.schedule}: the reference trains "
               "with adamw and a cosine or constant schedule only")  # fmt: skip
    if optim.decay_steps is not None:
        refuse("optim.decay_steps: the reference's cosine decays over the run's steps only")
    if optim.weight_decay:  # attnlab exempts biases, norms and embeddings; the reference has none
        refuse(
            f"optim.weight_decay={optim.weight_decay}: the reference trains without weight decay"
        )
    read = ("lr", "betas", "eps", "weight_decay", "warmup_steps", "schedule", "min_lr")
    values.update({f"optim.{key}": getattr(optim, key) for key in read})
    return values


def device_of(trainer: Any) -> tuple[torch.device, torch.dtype | None]:
    """The device and autocast dtype ``trainer.accelerator``/``precision`` ask for; what the
    reference cannot honour is refused."""
    accelerator, precision = str(trainer.accelerator), str(trainer.precision)
    if int(trainer.get("devices") or 1) != 1 and str(trainer.get("devices")) != "auto":
        refuse(f"trainer.devices={trainer.devices}: the reference trains on one device")
    if precision not in ("32", "32-true", "bf16-mixed"):
        refuse(f"trainer.precision={precision}: the reference trains in 32 or bf16-mixed")
    cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        refuse(f"trainer.accelerator={accelerator} but torch sees no CUDA device")
    if not cuda and accelerator not in ("cpu", "auto"):
        refuse(f"trainer.accelerator={accelerator}: the reference trains on cpu or gpu")
    return torch.device("cuda" if cuda else "cpu"), (
        torch.bfloat16 if precision == "bf16-mixed" else None
    )


def attnlab_init(model: Reference, biases: bool = True) -> None:
    """The diagnostic ``--init=attnlab``: the two ways attnlab's ``model.init=paper`` differs
    from torch's own initialisation, applied to the reference — W_Q, W_K and W_V each a Xavier
    draw of its own (torch draws them as one stacked 3d × d matrix, so about 0.71× smaller)
    and every linear bias zero (torch's feed-forward biases are uniform). Whether a gap to
    attnlab's model closes with it tells whether the initialisation is the cause. Without
    ``biases`` (``--init=qkv``) torch's biases are kept."""
    for module in model.transformer.modules():
        if isinstance(module, nn.MultiheadAttention):
            for part in module.in_proj_weight.data.chunk(3):
                nn.init.xavier_uniform_(part)
        if biases and isinstance(module, nn.Linear | nn.MultiheadAttention):
            for name, param in module.named_parameters(recurse=False):
                if "bias" in name:
                    nn.init.zeros_(param)


def main(argv: list[str]) -> None:
    init = "torch"
    if argv[:1] in (["--init=attnlab"], ["--init=qkv"]):
        init, argv = argv[0].removeprefix("--init="), argv[1:]
    if len(argv) < 1 or argv[0].startswith("-"):
        refuse("usage: reference_translation.py [--init=attnlab|--init=qkv] OUT "
               "[attnlab-train overrides…]")  # fmt: skip
    out, overrides = Path(argv[0]), argv[1:]
    if (out / "summary.json").exists():
        refuse(f"{out}/summary.json exists; choose another OUT or delete it")
    cfg = compose_config(overrides)
    setting = settings_of(cfg)
    data = build_data(cfg)
    resolved = build_task(cfg, data).model_cfg  # the model's keys with their defaults filled in
    for key, value in IMPLEMENTS.items():
        got = getattr(resolved, key, value)
        if got != value:
            refuse(f"model.{key}={got}: the reference implements {key}={value} only")
    if resolved.norm not in ("pre", "post"):
        refuse(f"model.norm={resolved.norm}: the reference has pre and post only")
    device, autocast = device_of(cfg.trainer)
    torch.manual_seed(int(setting["seed"]))
    layers = int(resolved.n_layers)
    model = Reference(
        data.vocab_size, int(resolved.d_model), int(resolved.n_heads),
        int(resolved.n_encoder_layers or layers), int(resolved.n_decoder_layers or layers),
        int(resolved.d_ff), float(resolved.dropout), float(resolved.attn_dropout),
        norm_first=resolved.norm == "pre",
    ).to(device)  # fmt: skip
    if init != "torch":
        attnlab_init(model, biases=init == "attnlab")
    peak = float(setting["optim.lr"])
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=peak, betas=tuple(setting["optim.betas"]),
        eps=float(setting["optim.eps"]), weight_decay=float(setting["optim.weight_decay"]),
    )  # fmt: skip
    steps, every = int(setting["trainer.max_steps"]), int(setting["trainer.val_check_interval"])
    val_batches = int(setting["trainer.limit_val_batches"])
    clip = float(setting["trainer.gradient_clip_val"])
    smoothing = float(setting["task.label_smoothing"])
    schedule = (int(setting["optim.warmup_steps"]), steps, float(setting["optim.min_lr"] or 0),
                setting["optim.schedule"])  # fmt: skip

    def logits_of(src: Tensor, prefix: Tensor) -> Tensor:
        with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
            return model(src.to(device), prefix).float()

    def validation_loss() -> float:
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for i, batch in enumerate(data.val_dataloader()):
                if i == val_batches:
                    break
                prefix, labels = shifted(batch["tgt"].to(device))
                logits = logits_of(batch["src"], prefix)
                n = int((labels != IGNORE).sum())
                total += float(F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                               ignore_index=IGNORE, reduction="sum"))  # fmt: skip
                count += n
        model.train()
        return total / count

    start, step, epoch, best, best_state, curve = time.time(), 0, 0, math.inf, None, []
    status = "completed"
    loader = data.train_dataloader()
    model.train()
    epochs = OmegaConf.select(cfg, "trainer.max_epochs")
    if epochs is not None and 0 <= epochs * len(loader) < steps:  # Lightning: the first to end
        refuse(f"trainer.max_epochs={epochs} ends the run before trainer.max_steps={steps}; the "
               "reference trains max_steps: set trainer.max_epochs=-1")  # fmt: skip
    while step < steps:
        for sampler in (loader.batch_sampler, getattr(loader.batch_sampler, "sampler", None)):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
        for batch in loader:
            for group in optimiser.param_groups:
                group["lr"] = learning_rate(step, peak, *schedule)
            prefix, labels = shifted(batch["tgt"].to(device))
            logits = logits_of(batch["src"], prefix)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                                   label_smoothing=smoothing)  # fmt: skip
            if not torch.isfinite(loss):  # as attnlab's divergence guard: stop, test nothing
                status = "diverged"
                break
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimiser.step()
            step += 1
            if step % every == 0:  # as Lightning's val_check_interval, counted across epochs
                value = validation_loss()
                curve.append((step - 1, value))  # Lightning's step count at that validation
                if value < best:
                    best, best_state = value, copy.deepcopy(model.state_dict())
            if step == steps:
                break
        if status == "diverged":
            break
        epoch += 1
    if best_state is None:  # no finite validation loss to choose a checkpoint by
        status = "diverged"
    metrics: dict[str, float] = {"params": sum(p.numel() for p in model.parameters())}
    if curve:
        metrics["val/loss"] = curve[-1][1]  # the last validation, as attnlab's summary
    bleu = BLEU(**BLEU_OPTIONS)
    if status == "completed":  # the test, from the checkpoint with the best validation loss
        model.load_state_dict(best_state)
        model.eval()
        hypotheses, references = [], []
        max_new = int(setting["decode.max_new_tokens"])
        for batch in data.test_loader():
            with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
                rows = greedy(model, batch["src"].to(device), max_new)
            hypotheses += [data.decode(row) for row in rows]
            references += [data.decode(row) for row in batch["tgt"].tolist()]
        metrics["test/bleu"] = bleu.corpus_score(hypotheses, [references]).score
    out.mkdir(parents=True, exist_ok=True)
    name = f"reference_{cfg.get('experiment_name') or 'translation'}"
    name += f"_{init}_init" if init != "torch" else ""
    shape = ("norm", "n_layers", "d_model", "n_heads", "d_ff")  # its model, for --by
    config: dict[str, Any] = {"experiment_name": name,
                              "model": {key: getattr(resolved, key) for key in shape}}  # fmt: skip
    for key, value in setting.items():  # nested as attnlab's config, for attnlab-compare --by
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = list(value) if isinstance(value, tuple) else value
    summary = {
        "status": status,
        "writer": "experiments/reference_translation.py (torch.nn.Transformer)",
        "config": config,
        "overrides": overrides,
        "metrics": metrics,
        "wall_s": time.time() - start,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if "test/bleu" in metrics:
        summary["bleu_signature"] = bleu.get_signature().format()
    (out / "metrics.csv").write_text("step,val/loss\n" + "".join(f"{s},{v}\n" for s, v in curve))
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    shown = " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()))
    print(f"{name} seed={setting['seed']} lr={peak:g}: {status} {shown} (best val/loss "
          f"{best:.4f}) in {summary['wall_s']:.0f} s -> {out}/summary.json")  # fmt: skip
    if status != "completed":
        raise SystemExit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
