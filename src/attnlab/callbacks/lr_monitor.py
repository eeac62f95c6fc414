"""Lightning's LearningRateMonitor, one series per optimiser when its groups share a rate.

attnlab's AdamW has two parameter groups (with and without weight decay) that
the schedule moves together; Lightning logs each (``lr-AdamW/pg1``,
``lr-AdamW/pg2``), which doubles every chart. Groups whose rates agree are
logged once, as ``lr-AdamW``.
"""

from __future__ import annotations

import re
from typing import Any

from attnlab.compat import AdjustableLearningRateMonitor

_GROUP = re.compile(r"^(?P<name>.+)/pg\d+(?P<suffix>.*)$")


class LearningRateMonitor(AdjustableLearningRateMonitor):
    def adjust(self, trainer: Any, stats: dict[str, float]) -> dict[str, float]:
        """One series for the groups of an optimiser whose rates agree (in the loggers and
        in ``trainer.callback_metrics``)."""
        by_series: dict[str, dict[str, float]] = {}
        for key, value in stats.items():
            found = _GROUP.match(key)
            if found:
                by_series.setdefault(found["name"] + found["suffix"], {})[key] = value
        for merged, groups in by_series.items():
            if len(set(groups.values())) == 1:  # every group at one rate: one series
                for key in groups:
                    stats.pop(key)
                    trainer.callback_metrics.pop(key, None)
                stats[merged] = next(iter(groups.values()))
                trainer.callback_metrics[merged] = trainer.callback_metrics.get(
                    merged, _tensor(trainer, stats[merged])
                )
        return stats


def _tensor(trainer: Any, value: float) -> Any:
    import torch

    return torch.tensor(value, device=trainer.strategy.root_device)
