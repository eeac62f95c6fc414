"""Stop cleanly on a signal: Ctrl-C (``interrupted``) or a cluster's warning (``preempted``).

A signal arriving in the middle of an optimiser step would leave half-updated
weights, so the handler only records it; the run stops at the next step
boundary, writes ``checkpoints/last.ckpt`` there (resumable with
``ckpt_path=last``), and reports the status to the run's ``Outcome``, which the run's
record writes into summary.json. It neither validates nor saves again on the way out (the
last validation's numbers stand; last.ckpt is the one of that step).

* SIGINT (Ctrl-C): ``interrupted``.
* SIGUSR1, SIGUSR2, SIGTERM: ``preempted`` — what SLURM sends before a time limit
  or a preemption (``#SBATCH --signal=USR1@90``; submitit asks for USR2).

A signal ends the run at once (:class:`Stopped`, with the same status) where there is no
step to finish: while the run sets up (tokenizer training, caching, building: the run
wraps that in :func:`stop_at_once`), before the first training step, and during the test
of the best checkpoint. A second signal mid-step also stops at once (the last checkpoint
stays as it was): a step that takes longer than a cluster's grace period is not waited
for twice.

A handler that was installed before the run (submitit's, which requeues the
job) is called after the checkpoint is written, so the requeued job finds it.

Lightning installs a SIGTERM handler of its own when training starts (after
``on_fit_start``; this callback's are installed at ``setup``, the first hook of a fit): it
raises ``SIGTERMException`` at the end of the step, before this callback could record the
status. So the handlers are installed again in ``on_train_start``, after Lightning's, and
Lightning's record of the handlers to restore afterwards is pointed at the ones from before
the run (also by a fit that fails before training starts).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L

from attnlab.callbacks.outcome import Outcome
from attnlab.compat import handlers_lightning_restores

STATUS_OF_SIGNAL = {signal.SIGINT: "interrupted", signal.SIGTERM: "preempted"}
for _name in ("SIGUSR1", "SIGUSR2"):
    if hasattr(signal, _name):
        STATUS_OF_SIGNAL[getattr(signal, _name)] = "preempted"


class Stopped(BaseException):
    """A signal that ends the run where it stands (``status``: interrupted or preempted).

    ``handover``: the handler that was installed before the run (submitit's requeue), to be
    called once the run's record is written; None when there was none."""

    def __init__(self, signum: int, handover: Any = None) -> None:
        self.signum, self.status = signum, STATUS_OF_SIGNAL[signum]
        self.handover = handover if _hands_over(handover) else None
        super().__init__(f"{self.status} by {signal.Signals(signum).name}")


def _hands_over(handler: Any) -> bool:
    """A handler of someone else's to call after the run's record: not Python's or the
    default dispositions."""
    return callable(handler) and handler is not signal.default_int_handler


@contextlib.contextmanager
def stop_at_once() -> Iterator[None]:
    """While the block runs, SIGINT/SIGTERM/SIGUSR1/SIGUSR2 raise :class:`Stopped`; the
    handlers from before are put back after it (and handed the signal by the run)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handle(signum: int, frame: Any) -> None:
        raise Stopped(signum, previous.get(signum))

    for signum in STATUS_OF_SIGNAL:
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class GracefulStop(L.Callback):
    """Turns SIGINT/SIGTERM/SIGUSR1 during ``fit`` into a checkpoint and a clean stop at the
    end of the step; before the first step, or a second signal, into :class:`Stopped`."""

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
        self._stepping = True  # a training step has begun (set-up: False, from ``setup``)

    def _handle(self, signum: int, frame: Any) -> None:
        if not self._stepping or self.status is not None:  # no step to finish, or a second
            raise Stopped(signum, self._previous.get(signum))
        self.status, self.signum = STATUS_OF_SIGNAL[signum], signum

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        """The first hook of a fit: from here on a signal is this callback's."""
        if stage != "fit" or threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        self._stepping = False
        for signum in STATUS_OF_SIGNAL:
            self._previous[signum] = signal.signal(signum, self._handle)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._stepping = True

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not self._previous:
            return
        for signum in self._previous:
            if signal.getsignal(signum) != self._handle:  # replaced by Lightning's (SIGTERM)
                signal.signal(signum, self._handle)
        self._hand_back_at_teardown(trainer)

    def _hand_back_at_teardown(self, trainer: L.Trainer) -> None:
        """Lightning re-installs, at its teardown, the handlers it found when training
        started (this callback's, from ``setup``): point its record at those from before."""
        originals = handlers_lightning_restores(trainer)
        for signum, previous in self._previous.items():
            if originals is not None and signum in originals:
                originals[signum] = previous

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
        self._nothing_more(trainer)
        previous = self._previous.get(self.signum) if self.signum is not None else None
        if _hands_over(previous):
            self.outcome.handed_over = True
            self._restore()
            previous(self.signum, None)  # e.g. submitit: requeue this job, then exit

    @staticmethod
    def _nothing_more(trainer: L.Trainer) -> None:
        """The fit ends after this step with last.ckpt as written above. Lightning would
        validate once more on its way out (minutes of a translation's BLEU that a cluster's
        grace period does not have), and its ModelCheckpoint would save last.ckpt again, at
        the end of the epoch or of training, in a state that a resume reads as such: no
        validation, and no further save, for the rest of this fit."""
        trainer.limit_val_batches = 0
        trainer.check_val_every_n_epoch = None  # no save at the epoch's end either
        for callback in getattr(trainer, "checkpoint_callbacks", []):
            callback.save_last = False  # no save when training ends

    def on_fit_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module: Any, exception: BaseException) -> None:
        self._hand_back_at_teardown(trainer)  # a fit that failed before on_train_start too
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
