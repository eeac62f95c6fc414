"""How a run ended, as its callbacks report it: the status and error of ``summary.json``.

The run's record (:class:`attnlab.cli.run.RunRecord`) owns one ``Outcome`` and hands it
to the callbacks that can end a run early (they declare ``run_inputs = ("outcome",)``):
``DivergenceGuard`` (``diverged``) and ``GracefulStop`` (``interrupted``, ``preempted``).
"""

from __future__ import annotations


class Outcome:
    """``status``: None while nothing stopped the run early (``completed`` once fit returns).
    ``handed_over``: a signal handler from before the run (submitit's requeue) took over.

    A plain class, not a dataclass: Hydra passes it to a configured callback as it is (a
    dataclass would be turned into a config node)."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.error: str | None = None
        self.handed_over = False

    def stop(self, status: str, error: str) -> None:
        self.status, self.error = status, error
