"""Check the command line before Hydra runs anything, and find ``ckpt_path=last``.

Hydra's own composition errors are multi-line and exit with 1; attnlab turns
them into one ``error: …`` line with exit code 2 before any job starts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.cli.common import config_dir, fail, register_resolvers
from attnlab.cli.identity import identity_overrides


def _one_line(exc: Exception) -> str:
    text = str(exc).split("Config search path")[0]
    return " ".join(text.replace("\t", " ").split())


GRAMMAR_HINT = (
    "Hydra's override grammar reads , [ ] { } ( ) = and quotes specially: quote the value, "
    "e.g. key='a, b' (in the shell: \"key='a, b'\")"
)


def quote_non_ascii(argv: list[str]) -> list[str]:
    """``key=vàlue`` as ``key='vàlue'``: Hydra's lexer accepts non-ASCII text only when quoted.

    Paths and prompts with accents or other scripts then work as typed; a value that
    is already quoted, or holds characters the grammar treats specially, is left alone.
    """
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        plain = not any(c in value for c in "'\",[]{}()=\\")
        if sep and value and not value.isascii() and plain and not key.startswith("-"):
            arg = f"{key}='{value}'"
        out.append(arg)
    return out


def parse_one(arg: str) -> Any:
    """The value of one ``key=value`` argument, read as Hydra reads overrides."""
    from attnlab.errors import ConfigError

    try:
        override = OverridesParser.create().parse_override(quote_non_ascii([arg])[0])
    except HydraException as exc:
        raise ConfigError(f"{arg} cannot be read ({_one_line(exc)}); {GRAMMAR_HINT}") from None
    if override.is_sweep_override():
        raise ConfigError(f"{arg} lists several values; {GRAMMAR_HINT}")
    return override.value()


def _unknown_key_hint(exc: Exception, overrides: list[str]) -> str | None:
    """Hydra's "Could not override 'a.b'… use +a.b" as "a.b is not a config key; did you mean…".

    Hydra's advice to add a ``+`` would only add a key nothing reads.
    """
    import re

    from attnlab.cli.schema import nearest

    found = re.search(r"Could not override '([^']+)'", str(exc))
    if not found:
        return None
    key = found.group(1)
    parent, _, leaf = key.rpartition(".")
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            base = compose(config_name="config", overrides=rest)
    except Exception:
        return None
    finally:
        GlobalHydra.instance().clear()
    node = OmegaConf.select(base, parent) if parent else base
    if not isinstance(node, DictConfig):
        return None
    if _accepts(node, parent, leaf):
        value = next(o.split("=", 1)[1] for o in overrides
                     if o.split("=", 1)[0].lstrip("~") == key)  # fmt: skip
        if key == "trainer.strategy":  # a strategy comes with its own settings: the preset
            return ("trainer.strategy is chosen with a trainer preset: trainer=ddp (data "
                    "parallel) or trainer=fsdp (sharded), not +trainer.strategy=…")  # fmt: skip
        return (
            f"{key} is a real setting that {parent}'s YAML leaves out; add it with +{key}={value}"
        )
    prefix = f"{parent}." if parent else ""
    return f"{key} is not a config key; {nearest(leaf, [str(k) for k in node], prefix)}"


def _accepts(node: DictConfig, parent: str, leaf: str) -> bool:
    """Whether the class ``parent`` builds (the Trainer, the data module) takes ``leaf``."""
    from attnlab.cli.schema import check_data_class, signature_hints

    if parent == "trainer":
        import lightning.pytorch as pl

        return leaf in signature_hints(pl.Trainer.__init__)
    if parent == "data":
        cls = check_data_class(node.get("_target_"))
        return cls is not None and leaf in signature_hints(cls.__init__)
    return False


def compose_config(overrides: list[str]) -> DictConfig:
    """The composed config for these overrides, as Hydra would build it."""
    register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    except Exception as exc:
        composition_error(exc, overrides)
        raise
    finally:
        GlobalHydra.instance().clear()


def composition_error(exc: Exception, overrides: list[str]) -> None:
    """A composition that failed for the user's reason ends in one line (exit 2); any other
    exception returns, for the caller to re-raise."""
    if isinstance(exc, (HydraException, OmegaConfBaseException, ValueError)):
        fail(_unknown_key_hint(exc, overrides) or _one_line(exc))


def check_values(cfg: DictConfig, source: str = "the command line",
                 this_machine: bool = False, strict: bool = True) -> Any:  # fmt: skip
    """Every check a job would make first (allowlisted targets, types, ranges, the pieces
    that fit together; with ``this_machine``, that it can run here), as one line; the
    checked ModelConfig."""
    from attnlab.cli.preflight import check_before_run
    from attnlab.cli.schema import check_run_config, plain_config
    from attnlab.errors import UserError

    try:
        checked = check_run_config(cfg, source, strict)
        check_before_run(plain_config(cfg), checked, this_machine)
        return checked
    except UserError as exc:
        fail(str(exc))


def parse_overrides(overrides: list[str]) -> list[Any]:
    """Hydra's ``Override`` of each line; a line the grammar refuses is a ConfigError."""
    from attnlab.errors import ConfigError

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError(f"{_one_line(exc)}; {GRAMMAR_HINT}") from None


def split_sweeps(
    overrides: list[str], multirun: bool
) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(the fixed overrides, [(swept key, its values)]); a list of values without -m, or a
    line the override grammar refuses, ends in one line."""
    from attnlab.errors import ConfigError

    try:
        parsed = parse_overrides(overrides)
    except ConfigError as exc:
        fail(str(exc))
    fixed, sweeps = [], []
    for override in parsed:
        if override.is_sweep_override():
            if not multirun:
                fail(f"'{override.input_line}' lists several values; add -m to sweep over them")
            if override.is_interval_sweep():
                continue  # ranges for a search sweeper (Optuna): checked by the sweeper
            values = list(override.sweep_string_iterator())
            sweeps.append((override.get_key_element(), values))
        else:
            fixed.append(override.input_line)
    return fixed, sweeps


def validate_overrides(overrides: list[str], multirun: bool,
                       this_machine: bool = False) -> DictConfig:  # fmt: skip
    """Compose every value of every swept key once; return the first composition.

    In a sweep, each composition also passes the model/optimiser checks, so a typo in
    one swept value stops the sweep before any job starts.
    """
    fixed, sweeps = split_sweeps(overrides, multirun)
    first = [f"{key}={values[0]}" for key, values in sweeps if values]
    cfg = compose_config(fixed + first)
    compositions = [cfg]
    for i, (key, values) in enumerate(sweeps):
        others = first[:i] + first[i + 1 :]
        compositions += [compose_config(fixed + others + [f"{key}={value}"])
                         for value in values[1:]]  # fmt: skip
    checked = [check_values(c, this_machine=this_machine, strict=not multirun)
               for c in compositions]  # fmt: skip
    if multirun:
        check_sweep_keys(compositions, checked)
    return cfg


def check_sweep_keys(compositions: list[DictConfig], checked: list[Any]) -> None:
    """A model key set for a sweep must be read by the model of at least one of its jobs
    (``-m model=decoder_only model.cell=gru,lstm`` is refused: no job reads model.cell); the
    jobs whose model does not read it run without it, which a note says once
    (``model.window=64`` with ``model.attention=full,sliding_window``)."""
    from attnlab.model_config import is_set, not_read

    given = [{k: v for k, v in OmegaConf.to_container(c.model, resolve=True).items()
              if is_set(v)} for c in compositions]  # fmt: skip
    read = set().union(*(m.to_dict() for m in checked))
    for values, model in zip(given, checked, strict=True):
        for key, value in values.items():
            if key not in read:
                chosen = {k: model.get(k) for k in ("name", *model.families)}
                fail(not_read(key, value, chosen))
    skipped = sorted({k for values, model in zip(given, checked, strict=True)
                      for k in values if k not in model})  # fmt: skip
    if skipped:
        keys = ", ".join(f"model.{k}" for k in skipped)
        print(f"note: {keys}: the jobs whose model does not read it run without it",
              file=sys.stderr)
    check_sweep_optim_keys(compositions)


def check_sweep_optim_keys(compositions: list[DictConfig]) -> None:
    """An ``optim`` key set for a sweep must be read by the optimiser or schedule of at
    least one of its jobs; the jobs that do not read it run without it, which a note says
    (``optim.betas=[0.9,0.95]`` with ``optim.name=adamw,adafactor``)."""
    from attnlab.errors import UserError
    from attnlab.optim.registry import optim_config, read_keys, set_keys

    optims = [OmegaConf.to_container(c.optim, resolve=True) if "optim" in c else {}
              for c in compositions]  # fmt: skip
    read = set().union(*(read_keys(o) for o in optims))
    for optim in optims:
        for key, value in set_keys(optim).items():
            if key not in read:  # the one line that names who reads it
                choice = {k: optim[k] for k in ("name", "schedule") if k in optim}
                try:
                    optim_config({**choice, key: value})
                except UserError as exc:
                    fail(str(exc))
    skipped = sorted({k for o in optims for k in set_keys(o) if k not in read_keys(o)})
    if skipped:
        keys = ", ".join(f"optim.{k}" for k in skipped)
        print(f"note: {keys}: the jobs whose optimiser or schedule does not read it run "
              "without it", file=sys.stderr)  # fmt: skip


def run_overrides(overrides: list[str]) -> list[str]:
    """The overrides that identify a run (not ckpt_path, hydra.*, trainer.*, logger, …)."""
    return sorted(identity_overrides(overrides))


def find_last_run(cfg: DictConfig, overrides: list[str]) -> Path:
    """The newest run directory with these settings that has checkpoints/last.ckpt."""
    runs_dir = Path(str(cfg.paths.log_dir)) / str(cfg.task_name) / "runs"
    wanted = run_overrides(overrides)
    candidates = []
    for saved in runs_dir.glob("*/.hydra/overrides.yaml"):
        run_dir = saved.parent.parent
        if not (run_dir / "checkpoints" / "last.ckpt").is_file():
            continue
        if run_overrides(list(OmegaConf.load(saved))) == wanted:
            candidates.append(run_dir)
    if not candidates:
        fail(
            f"ckpt_path=last found no earlier run with these settings and checkpoints/last.ckpt "
            f"under {runs_dir}; train without ckpt_path first, or pass ckpt_path=<file>"
        )
    return max(candidates, key=lambda p: (p / "checkpoints" / "last.ckpt").stat().st_mtime)


def resolved(cfg: DictConfig, value: str) -> str:
    """``value`` with the config's interpolations resolved: the run directory torchrun's ranks
    share is ``${paths.log_dir}/${task_name}/runs/torchrun_<id>``."""
    if "${" not in value:
        return value
    node = OmegaConf.create({"paths": cfg.paths, "task_name": cfg.task_name, "value": value})
    return str(node.value)


def resume_overrides(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """For ``ckpt_path=last``: continue in the same run directory from its last.ckpt."""
    if cfg.get("ckpt_path") != "last":
        return overrides
    explicit = [o for o in overrides if o.startswith("hydra.run.dir=")]
    if explicit:
        run_dir = Path(resolved(cfg, explicit[-1].split("=", 1)[1].strip("'\"")))
        if not (run_dir / "checkpoints" / "last.ckpt").is_file():
            started = (run_dir / ".hydra" / "config.yaml").is_file()
            if started and not any((run_dir / "checkpoints").glob("*.ckpt")):
                # stopped (killed, requeued) before its first checkpoint: nothing to continue
                print(f"note: ckpt_path=last: {run_dir} has no checkpoint yet; training from "
                      "the first step", file=sys.stderr)  # fmt: skip
                fresh = [o for o in overrides if not o.startswith("ckpt_path=")]
                # its summary (a stop in set-up or before the first step) is the new run's
                return fresh + ["overwrite=true"] if (run_dir / "summary.json").is_file() and (
                    not any(o.startswith(("overwrite=", "+overwrite=")) for o in fresh)) else fresh
            fail(f"ckpt_path=last: {run_dir}/checkpoints/last.ckpt does not exist; "
                 "check hydra.run.dir")  # fmt: skip
        rest = overrides
    else:
        run_dir = find_last_run(cfg, overrides)
        rest = overrides + [f"hydra.run.dir={run_dir}"]
    return [
        f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}" if o.startswith("ckpt_path=") else o
        for o in rest
    ]
