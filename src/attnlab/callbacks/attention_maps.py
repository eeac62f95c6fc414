"""Attention maps of a model on a batch: recording, entropy, heatmaps.

Weights come from the explicit ``math`` path: every :class:`MultiHeadAttention`
is switched to ``record_weights`` for one forward pass, then back. Used by the
diagnostics callback and by ``notebooks/attention_maps.ipynb``::

    maps = probe_attention(task, batch)               # {"decoder.0.cross": AttentionMap, …}
    attention_figure(maps["decoder.0.cross"], tokenizer=datamodule.tokenizer)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.nn.attention import MultiHeadAttention
from attnlab.special_tokens import NUM_SPECIAL, PAD, SPECIAL_TOKENS

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def transformer_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``[("encoder.0", layer), …, ("decoder.5", layer)]``, input side first."""
    return [
        (f"{stack_name}.{i}", layer)
        for stack_name, stack in model.stacks().items()
        for i, layer in enumerate(stack.layers)
    ]


def forward_with_labels(task: nn.Module, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """(logits, labels) of a task on a batch in any format of :mod:`attnlab.data.base`."""
    if "src" in batch:  # seq2seq
        return task(batch["src"], batch["tgt"])
    if "input_ids" in batch:  # classification
        return task(batch["input_ids"]), batch["labels"]
    if "pixels" in batch:  # image classification
        return task(batch["pixels"]), batch["labels"]
    tokens = batch["tokens"]  # language modelling; a fixed corruption for masked LM
    generator = torch.Generator(device=tokens.device).manual_seed(0)
    inputs, labels = task.inputs_and_labels(tokens, generator, batch.get("labels"))
    return task.model(inputs), labels


@dataclass
class AttentionMap:
    """One attention module's weights on a batch, with the token ids on both axes."""

    weights: Tensor  # (B, H, Tq, Tk)
    queries: Tensor  # (B, Tq)
    keys: Tensor  # (B, Tk)


def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """Self-attention ``"<stack>.<i>"`` and cross-attention ``"<stack>.<i>.cross"`` modules."""
    out = []
    for name, layer in transformer_layers(model):
        out.append((name, layer.self_attn))
        if getattr(layer, "cross_attn", None) is not None:
            out.append((f"{name}.cross", layer.cross_attn))
    return out


@contextmanager
def recorded_attention(model: nn.Module) -> Iterator[dict[str, AttentionMap]]:
    """Run ``model`` inside the block; on exit the dict holds an :class:`AttentionMap` per
    attention module, computed on the ``math`` path (``record_weights``)."""
    tokens: dict[str, Tensor] = {}  # each stack's input tokens

    def record(name: str, args: tuple, kwargs: dict) -> None:
        ids = args[0] if args else kwargs.get("tokens")
        if ids is None:  # embeddings, not tokens (image patches): every position is real
            embeds = kwargs["embeds"]
            ids = torch.full(embeds.shape[:2], NUM_SPECIAL, device=embeds.device)
        tokens[name] = ids

    handles = [
        stack.register_forward_pre_hook(
            lambda _m, args, kwargs, n=name: record(n, args, kwargs), with_kwargs=True
        )
        for name, stack in model.stacks().items()
    ]
    modules = attention_modules(model)
    for _, attn in modules:
        attn.record_weights = True
    maps: dict[str, AttentionMap] = {}
    try:
        yield maps
        for name, attn in modules:
            stack, *_, kind = name.split(".")
            if attn.last_weights is not None:
                keys = tokens.get("encoder") if kind == "cross" else tokens[stack]
                maps[name] = AttentionMap(attn.last_weights, tokens[stack], keys)
    finally:
        for handle in handles:
            handle.remove()
        for _, attn in modules:
            attn.record_weights, attn.last_weights = False, None


def probe_attention(task: nn.Module, batch: dict[str, Any]) -> dict[str, AttentionMap]:
    """Attention maps of every layer of ``task.model`` on ``batch``, in eval mode, no grad."""
    was_training = task.training
    task.eval()
    try:
        with torch.no_grad(), recorded_attention(task.model) as maps:
            forward_with_labels(task, batch)
    finally:
        task.train(was_training)
    return maps


def attention_entropy(weights: Tensor, query_real: Tensor | None = None) -> Tensor:
    """(B, H, Tq, Tk) attention weights -> (H,) mean row entropy over real queries, in nats."""
    entropy = -torch.special.xlogy(weights, weights).sum(-1)  # (B, H, Tq); 0·log 0 = 0
    if query_real is None:
        return entropy.mean((0, 2))
    real = query_real[:, None, :].to(entropy.dtype)  # (B, 1, Tq)
    return (entropy * real).sum((0, 2)) / real.sum((0, 2)).clamp(min=1)


def entropy_metrics(maps: dict[str, AttentionMap]) -> dict[str, float]:
    """``{"<name>": mean over heads, "<name>.h<j>": head j}`` for each attention map."""
    out: dict[str, float] = {}
    for name, m in maps.items():
        per_head = attention_entropy(m.weights.float(), m.queries != PAD).tolist()
        out[name] = sum(per_head) / len(per_head)
        out.update({f"{name}.h{j}": value for j, value in enumerate(per_head)})
    return out


def token_labels(ids: Tensor, tokenizer: Any = None) -> list[str]:
    """Axis labels for token ids: special-token names, else the tokenizer's text, else the id."""
    labels = []
    for i in ids.tolist():
        if i < NUM_SPECIAL:
            labels.append(SPECIAL_TOKENS[i])
        else:
            text = tokenizer.decode([i]).strip() if tokenizer is not None else ""
            labels.append(text or str(i))
    return labels


def attention_figure(
    m: AttentionMap, example: int = 0, tokenizer: Any = None, title: str = ""
) -> Figure:
    """A grid of heads for one example (rows: queries, columns: keys), padding trimmed."""
    from matplotlib.figure import Figure

    q_real, k_real = m.queries[example] != PAD, m.keys[example] != PAD
    weights = m.weights[example][:, q_real][:, :, k_real].float().cpu().numpy()  # (H, Tq, Tk)
    q_labels = token_labels(m.queries[example][q_real], tokenizer)
    k_labels = token_labels(m.keys[example][k_real], tokenizer)
    heads = weights.shape[0]
    cols = min(heads, 4)
    rows = math.ceil(heads / cols)
    fig = Figure(figsize=(2.8 * cols + 0.6, 2.8 * rows + 0.6))
    fig.subplots_adjust(left=0.6 / fig.get_figwidth(), right=0.98, bottom=0.6 / fig.get_figheight(),
                        top=1 - 0.5 / fig.get_figheight(), wspace=0.35, hspace=0.45)  # fmt: skip
    for h, ax in enumerate(fig.subplots(rows, cols, squeeze=False).flat):
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(weights[h], vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {h}", fontsize=9)
        if max(len(q_labels), len(k_labels)) <= 40:
            ax.set_xticks(range(len(k_labels)), k_labels, rotation=90, fontsize=6)
            ax.set_yticks(range(len(q_labels)), q_labels, fontsize=6)
        else:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(title)
    fig.supxlabel("key (attended to)", fontsize=8)
    fig.supylabel("query", fontsize=8)
    return fig


def patch_attention_figure(
    m: AttentionMap, grid: tuple[int, int], pixels: Tensor | None = None, example: int = 0,
    title: str = "",
) -> Figure:  # fmt: skip
    """A ViT's [CLS]-to-patch attention, one panel per head laid out on the patch grid
    (Dosovitskiy et al. 2021, Fig. 6 shows the same for attention rollout), beside the image."""
    from matplotlib.figure import Figure

    rows, columns = grid
    weights = m.weights[example][:, 0, 1 : 1 + rows * columns].float().cpu()  # (H, N)
    heads = weights.size(0)
    panels = heads + (pixels is not None)
    fig = Figure(figsize=(2.2 * panels + 0.4, 2.6))
    axes = fig.subplots(1, panels, squeeze=False)[0]
    if pixels is not None:
        image = pixels[example].float().cpu()
        image = (image - image.min()) / (image.max() - image.min()).clamp(min=1e-8)
        shown = image[0] if image.size(0) == 1 else image.permute(1, 2, 0)
        axes[0].imshow(shown.numpy(), cmap="gray" if image.size(0) == 1 else None)
        axes[0].set_title("input", fontsize=9)
    for h in range(heads):
        ax = axes[h + (pixels is not None)]
        ax.imshow(weights[h].view(rows, columns).numpy(), cmap="viridis")
        ax.set_title(f"head {h}: [CLS] → patches", fontsize=8)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    return fig


def figure_rgb(fig: Figure) -> np.ndarray:
    """(H, W, 3) uint8 pixels of a figure, for TensorBoard's ``add_image``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
