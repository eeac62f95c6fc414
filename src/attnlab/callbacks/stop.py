"""Stop cleanly on a signal: Ctrl-C (``interrupted``) or a cluster's warning (``preempted``).

A signal arriving in the middle of an optimiser step would leave half-updated
weights, so the handler only records it; the run stops at the next step
boundary, writes ``checkpoints/last.ckpt`` there (resumable with
``ckpt_path=last``), and reports the status to the run's ``Outcome``, which the run's
record writes into summary.json.

* SIGINT (Ctrl-C): ``interrupted``. A second Ctrl-C stops at once, as usual.
* SIGUSR1, SIGUSR2, SIGTERM: ``preempted`` — what SLURM sends before a time limit
  or a preemption (``#SBATCH --signal=USR1@90``; submitit asks for USR2).

A handler that was installed before the run (submitit's, which requeues the
job) is called after the checkpoint is written, so the requeued job finds it.

Lightning installs a SIGTERM handler of its own when training starts (after
``on_fit_start``): it raises ``SIGTERMException`` at the end of the step, before
this callback could record the status. So the handlers are installed again in
``on_train_start``, after Lightning's, and Lightning's record of the handlers to
restore afterwards is pointed at the ones from before the run.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import lightning as L

from attnlab.callbacks.outcome import Outcome

STATUS_OF_SIGNAL = {signal.SIGINT: "interrupted", signal.SIGTERM: "preempted"}
for _name in ("SIGUSR1", "SIGUSR2"):
    if hasattr(signal, _name):
        STATUS_OF_SIGNAL[getattr(signal, _name)] = "preempted"


class GracefulStop(L.Callback):
    """Turns SIGINT/SIGTERM/SIGUSR1 during ``fit`` into a checkpoint and a clean stop."""

    run_inputs = ("outcome",)  # what the run hands it (attnlab.cli.components)

    def __init__(self, check_every_n_steps: int = 10, outcome: Outcome | None = None) -> None:
        """``check_every_n_steps``: under DDP the ranks agree on stopping (an all-reduce and
        a host sync) every N optimizer steps, not every batch; a cluster's warning comes
        tens of seconds ahead (``--signal=USR1@90``). One process checks every batch.
        ``outcome``: where the stop is reported (the run's; its own when built alone)."""
        self.outcome = outcome if outcome is not None else Outcome()
        self.status: str | None = None
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self.check_every_n_steps = max(int(check_every_n_steps), 1)
        self._checked_step = -1

    def _handle(self, signum: int, frame: Any) -> None:
        if self.status is not None and signum == signal.SIGINT:  # the second Ctrl-C
            raise KeyboardInterrupt
        self.status, self.signum = STATUS_OF_SIGNAL[signum], signum

    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for signum in STATUS_OF_SIGNAL:
            self._previous[signum] = signal.signal(signum, self._handle)

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not self._previous:
            return
        connector = getattr(trainer, "_signal_connector", None)
        originals = getattr(connector, "_original_handlers", None)
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) != self._handle:  # replaced by Lightning's (SIGTERM)
                signal.signal(signum, self._handle)
            if isinstance(originals, dict) and signum in originals:
                originals[signum] = previous  # what Lightning restores at its teardown

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.world_size > 1:  # every rank stops at the same step
            step = trainer.global_step
            if step % self.check_every_n_steps or step == self._checked_step:
                return
            self._checked_step = step  # once per optimizer step (not per accumulated batch)
            stop = trainer.strategy.reduce_boolean_decision(self.status is not None, all=False)
            self.status = self.status or ("preempted" if stop else None)
        if self.status is None:
            return
        where = f"{self.status} at step {trainer.global_step}"
        self.outcome.stop(self.status, f"{where}; continue with ckpt_path=last")
        trainer.save_checkpoint(self.last_path(trainer))
        trainer.should_stop = True
        previous = self._previous.get(self.signum) if self.signum is not None else None
        if callable(previous) and previous is not signal.default_int_handler:
            self.outcome.handed_over = True
            self._restore()
            previous(self.signum, None)  # e.g. submitit: requeue this job, then exit

    def on_fit_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module: Any, exception: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    @staticmethod
    def last_path(trainer: L.Trainer) -> Path:
        callback = trainer.checkpoint_callback
        default = Path(trainer.default_root_dir) / "checkpoints"
        folder = getattr(callback, "dirpath", None) or default
        name = getattr(callback, "CHECKPOINT_NAME_LAST", "last") + ".ckpt"
        return Path(folder) / name
