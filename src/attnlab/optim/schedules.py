"""The learning-rate factor of each step, for torch's ``LambdaLR`` (no torch here).

The formulas and their papers are the docstrings of :mod:`attnlab.optim.registry`'s
schedule configs; ``attnlab-train --options`` lists them.
"""

from __future__ import annotations

import math

from attnlab.options import OptimConfig

# the decay of wsd as a function of its progress x in [0, 1]: 1 at the start, 0 at the end
DECAYS = {
    "linear": lambda x: 1.0 - x,
    "sqrt": lambda x: 1.0 - math.sqrt(x),  # Hägele et al. 2024, §3 ("1 − sqrt")
    "cosine": lambda x: 0.5 * (1.0 + math.cos(math.pi * x)),
}


def needs_length(cfg: OptimConfig) -> bool:
    """Whether the schedule depends on the run's number of steps."""
    return cfg.schedule in ("cosine", "wsd")


def decay_start(cfg: OptimConfig, total_steps: int) -> int:
    """The first step of wsd's decay: the last ``decay_fraction`` of ``total_steps``, after
    the warm-up."""
    return max(cfg.warmup_steps, total_steps - round(cfg.decay_fraction * total_steps))


def shortest_budget(cfg: OptimConfig, step: int) -> int:
    """The fewest total steps whose wsd decay starts at ``step`` or later."""
    total = step
    while decay_start(cfg, total) < step:
        total += 1
    return total


def lr_multiplier(step: int, cfg: OptimConfig, d_model: int, total_steps: int) -> float:
    """Factor applied to ``optim.lr`` at optimizer step ``step`` (0-based).

    * cosine:       linear warmup to lr, then cosine decay to min_lr
    * inverse_sqrt: d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)
                    (Vaswani et al. 2017, eq. 3; ``optim.lr`` is a scale, 1.0 in the paper)
    * constant:     linear warmup, then flat
    * wsd:          linear warmup, flat, then a decay to min_lr over the last decay_fraction
    """
    step = step + 1
    warmup = cfg.warmup_steps
    if cfg.schedule == "inverse_sqrt":
        return d_model**-0.5 * min(step**-0.5, step * max(warmup, 1) ** -1.5)
    if warmup and step <= warmup:
        return step / warmup
    if cfg.schedule == "constant":
        return 1.0
    floor = cfg.min_lr / cfg.lr
    if cfg.schedule == "wsd":
        start = decay_start(cfg, total_steps)
        progress = min(1.0, max(0, step - start) / max(1, total_steps - start))
        return floor + (1 - floor) * DECAYS[cfg.decay_shape](progress)
    span = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / span)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
