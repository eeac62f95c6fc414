"""Resume a whole sweep: ``attnlab-train -m <same grid> hydra.sweep.dir=<dir> resume=true``.

Hydra numbers a sweep's jobs by their position in the grid, so a grid that
grows (a new seed, a new value) would hand old directories to new settings.
With ``resume=true`` the job directories are matched by the overrides that
define each job instead (:func:`attnlab.cli.identity.identity_overrides`):

* before Hydra launches anything, :func:`plan` expands the grid, finds each
  point's existing directory by the ``.hydra/overrides.yaml`` it holds, gives
  every new point the next free number, and writes that map to
  ``<sweep dir>/.attnlab_jobs.json``;
* each job's ``hydra.sweep.subdir`` is ``${attnlab_job_subdir:}``, which reads
  the map (and is the plain job number when there is none);
* in the job, :func:`decide` says what to do with what the directory holds:
  a ``completed`` job is skipped (its summary kept), a ``failed`` or
  ``diverged`` one is skipped unless ``retry_failed=true`` (then it runs afresh),
  and an unfinished one (killed, ``interrupted``, ``preempted``) continues from
  its ``checkpoints/last.ckpt``, exactly as ``ckpt_path=last`` does.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

from attnlab.errors import ConfigError

PLAN_FILE = ".attnlab_jobs.json"


def canonical(overrides: list[str]) -> str:
    """One string per job setting: its identity overrides, each as Hydra normalises it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from attnlab.cli.identity import identity_overrides

    parser = OverridesParser.create()
    parts = []
    for override in identity_overrides(list(overrides)):
        parsed = parser.parse_override(override)
        parts.append(f"{parsed.get_key_element()}={parsed.get_value_element_as_str()}")
    return "\n".join(sorted(parts))


def grid(overrides: list[str]) -> list[list[str]]:
    """Every job's overrides, as Hydra's basic sweeper expands a ``-m`` command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    axes = []
    for parsed in OverridesParser.create().parse_overrides(overrides):
        key = parsed.get_key_element()
        if parsed.is_sweep_override():
            if parsed.is_interval_sweep():
                raise ConfigError(
                    f"{parsed.input_line}: resume=true expands grids only; a search sweeper "
                    "(hparams_search=optuna) resumes from its storage instead"
                )
            axes.append([f"{key}={v}" for v in parsed.sweep_string_iterator()])
        else:
            axes.append([f"{key}={parsed.get_value_element_as_str()}"])
    return [list(point) for point in itertools.product(*axes)]


def existing_jobs(sweep_dir: Path) -> dict[str, str]:
    """canonical setting -> job sub-directory, for the jobs a sweep directory already holds."""
    import yaml

    found = {}
    for saved in sorted(sweep_dir.glob("*/.hydra/overrides.yaml")):
        try:
            overrides = yaml.safe_load(saved.read_text()) or []
        except (OSError, yaml.YAMLError):
            continue
        found.setdefault(canonical([str(o) for o in overrides]), saved.parent.parent.name)
    return found


def plan(sweep_dir: Path, overrides: list[str]) -> dict[str, str]:
    """Map every grid point to its directory (old or new) and write the map into the sweep."""
    mapping = existing_jobs(sweep_dir) if sweep_dir.is_dir() else {}
    used = {int(d) for d in mapping.values() if d.isdigit()}
    numbers = itertools.filterfalse(used.__contains__, itertools.count())
    for point in grid(overrides):  # hydra.* keys are not part of a job's identity
        key = canonical(point)
        if key not in mapping:
            mapping[key] = str(next(numbers))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / PLAN_FILE).write_text(json.dumps(mapping, indent=1, sort_keys=True))
    return mapping


def job_subdir(*, _root_: Any) -> str:
    """``${attnlab_job_subdir:}``: this job's directory from the sweep's map, else its number."""
    hydra = _root_.hydra
    number = str(hydra.job.num)
    path = Path(str(hydra.sweep.dir)) / PLAN_FILE
    if not path.is_file():
        return number
    try:
        mapping = json.loads(path.read_text())
        return str(mapping.get(canonical(list(hydra.overrides.task)), number))
    except (OSError, ValueError):
        return number


def decide(run_dir: Path, retry_failed: bool) -> str:
    """``skip``, ``resume`` (from last.ckpt) or ``fresh``, from what ``run_dir`` holds."""
    summary = run_dir / "summary.json"
    status = None
    if summary.is_file():
        try:
            status = json.loads(summary.read_text()).get("status")
        except (OSError, ValueError, AttributeError):
            status = None
    if status == "completed":
        return "skip"
    if status in ("failed", "diverged"):
        if not retry_failed:
            return "skip"
        for stale in ("checkpoints", "metrics.csv", "summary.json"):
            path = run_dir / stale
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(True)
        return "fresh"
    return "resume" if (run_dir / "checkpoints" / "last.ckpt").is_file() else "fresh"


def recorded_value(run_dir: Path, metric: str) -> float | None:
    """The metric a skipped job's summary holds, for a sweeper that asks for it."""
    try:
        data = json.loads((run_dir / "summary.json").read_text())
        value = data.get("metrics", {}).get(metric) if data.get("status") == "completed" else None
        return float(value) if value is not None else None
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def plan_sweep(overrides: list[str], multirun: bool) -> None:
    """``resume=true`` on the command line: check its use, then write the sweep's job map."""
    from attnlab.cli.rundir import explicit_dir

    if not multirun:
        raise ConfigError(
            "resume=true continues a sweep; add -m and hydra.sweep.dir=<sweep dir>, or "
            "continue a single run with ckpt_path=last"
        )
    folder = explicit_dir(overrides, "hydra.sweep.dir")
    if folder is None:
        raise ConfigError(
            "resume=true needs hydra.sweep.dir=<the sweep directory to continue> "
            "(printed by the first run: logs/<task_name>/multiruns/<stamp>)"
        )
    if any(o.split("=", 1)[0] == "hparams_search" for o in overrides):
        return  # a search sweeper numbers its trials by its study (attnlab_optuna_sweeper)
    plan(folder, overrides)
