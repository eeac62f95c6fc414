"""What makes ``ckpt_path=last`` continue a run as if it had never stopped.

Lightning restores weights, optimiser, scheduler and loop counters. Added here:

* :class:`RngState` — the global random states (dropout, masking) in the checkpoint;
* :class:`LoaderPosition` — the training loader's saved position put back, whenever
  Lightning built the loader;
* :class:`AtomicCheckpointIO` — a checkpoint is complete or absent, never truncated;
* :class:`ContinuedCSVLogger` — the resumed run appends to metrics.csv instead of
  starting it anew.

The data order is restored by :mod:`attnlab.data.sampling`.
"""

from __future__ import annotations

import csv
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from attnlab.compat import ContinuingExperimentWriter


class RngState(L.Callback):
    """Saves the Python, NumPy and torch (CPU and CUDA) random states with each checkpoint,
    every process's own: under DDP each rank draws its own dropout masks, so each rank's
    states are gathered into the checkpoint (``{"ranks": [rank 0's, rank 1's, …]}``) and
    each rank restores its own.

    They are put back just before the first training step after a resume, not at
    load time: Lightning draws random numbers between loading and that step (a new
    dataloader iterator takes a seed from the global generator), which the run that
    never stopped did not draw at that point. A resume on more processes than saved
    their states gives the extra ranks a saved rank's states (with a warning), and CUDA
    states are restored for the devices this process has.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        """Under DDP, rank r draws from seed + r (as nanoGPT seeds 1337 + rank): the weights
        are already built alike (and DDP broadcasts rank 0's), and each rank's dropout
        masks are its own rather than a copy of rank 0's."""
        if stage == "fit" and trainer.world_size > 1:
            seed = int(os.environ.get("PL_GLOBAL_SEED", "0") or 0)
            L.seed_everything(seed + trainer.global_rank, workers=True, verbose=False)
            os.environ["PL_GLOBAL_SEED"] = str(seed)  # the run's seed, for workers and logs

    def state_dict(self) -> dict[str, Any]:
        return {"ranks": gather_objects(own_rng_states())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = dict(state_dict)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._pending is None:
            return
        saved, self._pending = self._pending, None
        ranks = saved.get("ranks") or [saved]  # checkpoints of before: one rank's states
        if len(ranks) != trainer.world_size:
            from lightning.pytorch.utilities import rank_zero_warn

            rank_zero_warn(f"resuming on {trainer.world_size} processes from random states "
                           f"saved by {len(ranks)}: ranks past them reuse saved ones")  # fmt: skip
        restore_rng_states(dict(ranks[trainer.global_rank % len(ranks)]))


class LoaderPosition(L.Callback):
    """Puts the training loader back where the checkpoint says it stood in its epoch.

    Lightning hands a stateful loader (``state_dict``/``load_state_dict``: attnlab's
    :class:`~attnlab.data.sampling.ResumableDataLoader` and ``data=tokens``' loader) its saved
    state only when it builds the loader after reading the checkpoint. A
    ``configure_optimizers`` that asks ``trainer.estimated_stepping_batches`` (the length of
    attnlab's cosine schedule when ``optim.decay_steps`` is null and the run has an epoch
    bound) builds it before, and Lightning then drops the saved position without a word
    (Lightning issue 20550): the resumed epoch starts again at its first batch. This callback
    reads the positions from the checkpoint and hands them to the loaders before the first
    batch is drawn; handing one twice (when Lightning did too) changes nothing.
    """

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] = []

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: Any, checkpoint: dict[str, Any]
    ) -> None:
        fit_loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
        self._pending = list((fit_loop.get("state_dict") or {}).get("combined_loader") or [])

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        states, self._pending = self._pending, []
        if not states:
            return
        loaders = trainer.train_dataloader
        if isinstance(loaders, dict):
            loaders = list(loaders.values())
        elif not isinstance(loaders, list | tuple):
            loaders = [loaders]
        stateful = [dl for dl in loaders if callable(getattr(dl, "load_state_dict", None))]
        if len(stateful) == len(states):  # else Lightning has refused the checkpoint already
            for loader, state in zip(stateful, states, strict=True):
                loader.load_state_dict(state)


def own_rng_states() -> dict[str, Any]:
    """This process's random states, as plain types and tensors (``weights_only`` loads them),
    under the keys Lightning's checkpoints use (``torch``, ``numpy``, ``python``,
    ``torch.cuda``)."""
    version, internal, python_gauss = random.getstate()
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), python_gauss],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
    }
    if torch.cuda.is_available():
        states["torch.cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Put back the states :func:`own_rng_states` saved (CUDA's for the devices this machine
    has)."""
    torch.set_rng_state(states["torch"])
    if torch.cuda.is_available() and "torch.cuda" in states:  # a machine with fewer GPUs
        torch.cuda.set_rng_state_all(list(states["torch.cuda"])[: torch.cuda.device_count()])
    name, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, python_gauss = states["python"]
    random.setstate((version, tuple(internal), python_gauss))


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every process, in rank order (``[obj]`` outside a process group). Every
    rank saves a checkpoint's state together (``trainer.save_checkpoint`` runs on all)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint to a temporary file beside it, then renames it into place.

    Lightning's own writer serialises to memory first, but then writes through a
    temporary file in the system temp directory and *moves* it; when that directory
    lies on another file system than the run (local /tmp, shared cluster storage),
    the move is a copy, and a job killed during it leaves a truncated ``last.ckpt``.
    A rename within one directory is atomic on POSIX file systems.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)  # remote: fsspec's way
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp's 0600 would hide it from a team
            os.replace(tmp, target)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            if exc.filename:
                raise
            raise OSError(exc.errno, exc.strerror, str(target)) from exc  # a full disk: which file
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def keep_rows_until(metrics: Path, step: int) -> None:
    """Drop the rows of ``metrics`` logged after ``step`` (a row without a step is kept)."""
    if not metrics.is_file():
        return
    with metrics.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        rows = [r for r in reader if _logged_by(r, step)]
    with metrics.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def _logged_by(row: dict[str, str], step: int) -> bool:
    try:
        return int(float(row.get("step") or 0)) <= step
    except ValueError:
        return True


class ContinuedCSVLogger(CSVLogger):
    """Lightning's CSVLogger; with ``resume_step`` set, metrics.csv is continued, not replaced.

    Lightning's logger deletes an existing metrics.csv (with a warning), which a
    resumed run in its own directory must not do: its rows up to ``resume_step`` are kept
    and the run appends. A fresh run (``resume_step=None``) starts the file afresh, silently.
    """

    run_inputs = ("resume_step",)  # what the run hands it (attnlab.cli.components)

    def __init__(self, *args: Any, resume_step: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step
        self.writer: ExperimentWriter | None = None

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self.writer is None:
            get_filesystem(self.root_dir).makedirs(self.root_dir, exist_ok=True)
            metrics = Path(self.log_dir) / ExperimentWriter.NAME_METRICS_FILE
            if self.resume_step is None:
                metrics.unlink(missing_ok=True)
            else:
                keep_rows_until(metrics, self.resume_step)
            self.writer = ContinuingExperimentWriter(self.log_dir)
        return self.writer

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Write what is left, as Lightning's CSVLogger does, once there is a writer."""
        if self.writer is not None:
            self.save()
