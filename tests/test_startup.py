"""Start-up: ``--help`` and refusals of bad values come before torch is imported.

Seconds are measured by the benchmarks in docs/performance.md, not here; these tests check
the causes: which modules a command imports before it answers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.cli.help import config_groups, help_text
from attnlab.components import FAMILIES, locate
from attnlab.errors import ConfigError
from attnlab.registry import check_model_names, known_names

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def imported_modules(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, set]:
    """Run ``python -X importtime -m <args>``; the process and the modules it imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ATTNLAB_LOG_DIR": str(tmp_path / "logs")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", *args], capture_output=True, text=True,
        env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, modules


@pytest.mark.parametrize(
    "command",
    [["attnlab.train", "--help"], ["attnlab.eval", "--help"], ["attnlab.generate", "--help"],
     ["attnlab.compare", "--help"], ["attnlab.bench", "--help"]],
    ids=lambda c: c[0],
)  # fmt: skip
def test_every_help_answers_without_importing_torch(command: list[str], tmp_path: Path) -> None:
    done, modules = imported_modules(command, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch" not in modules and "lightning" not in modules
    assert f"attnlab-{command[0].removeprefix('attnlab.')}" in done.stdout


@pytest.mark.parametrize(
    "override,message",
    [("model.norm=postln",
      "model.norm=postln is not a known option; use one of: deepnorm, olmo2, post"),
     ("model.pos=rotary", "model.pos=rotary is not a known option"),
     ("model.name=gpt", "model=gpt is not a known option"),
     ("optim.lr=-1", "optim.lr=-1"), ("decode.cache=ring", "decode.cache=ring is not valid")],
)  # fmt: skip
def test_a_bad_value_is_refused_before_torch_with_no_run_directory(
    override: str, message: str, tmp_path: Path
) -> None:
    done, modules = imported_modules(["attnlab.train", override], tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert "torch" not in modules and "lightning" not in modules
    assert not (tmp_path / "logs").exists()


def test_each_family_names_its_components_and_where_each_class_lives() -> None:
    """Every component a family declares builds a class that imports, and the torch-side
    registry of its key hands out that very class; no module makes a registry of its own."""
    from attnlab.models import ARCHITECTURES
    from attnlab.nn.attention_kinds import ATTENTION_KINDS
    from attnlab.nn.feedforward import FEEDFORWARDS
    from attnlab.nn.norms import NORM_TYPES, RESIDUALS
    from attnlab.nn.positions import POSITIONS
    from attnlab.registry import Registry

    registries = [ARCHITECTURES, ATTENTION_KINDS, FEEDFORWARDS, NORM_TYPES, RESIDUALS, POSITIONS]
    for registry in registries:
        key = "name" if registry.key == "model" else registry.key.removeprefix("model.")
        assert registry.family is FAMILIES[key]
        assert registry.names() == registry.family.names(), registry.key
        for config in registry.family:
            module, _, cls = config.builds.partition(":")
            assert registry.get(config.name) is locate(config.builds), config.builds
            assert registry.get(config.name).__name__ == cls
    made = {key for path in (REPO / "src" / "attnlab").rglob("*.py")
            for key in re.findall(r'Registry\("([^"]+)"', path.read_text(encoding="utf-8"))}
    assert made == {r.key for r in registries} | {"data task"}
    assert all(isinstance(r, Registry) for r in registries)


def test_a_name_registered_at_run_time_is_accepted(monkeypatch) -> None:
    from attnlab.nn.norms import RESIDUALS

    monkeypatch.setattr(RESIDUALS, "_items", {**RESIDUALS._items, "rezero": RESIDUALS.get("pre")})
    assert "rezero" in known_names("model.norm")
    check_model_names({"norm": "rezero"})
    with pytest.raises(ConfigError, match="model.norm=rezer is not a known option"):
        check_model_names({"norm": "rezer"})


def test_help_lists_the_groups_hydra_lists_a_run_can_choose() -> None:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            hydra = GlobalHydra.instance().hydra
            loader = hydra.config_loader
            theirs = {
                group: sorted(loader.get_group_options(group, results_filter=ObjectType.CONFIG))
                for group in hydra.list_all_config_groups()
                if group.split("/")[0] != "hydra"
                and loader.get_group_options(group, results_filter=ObjectType.CONFIG)
            }
    finally:
        GlobalHydra.instance().clear()
    ours = config_groups(CONF)  # the defaults list's groups; model/_base is no choice
    assert set(ours) == {"callbacks", "data", "debug", "experiment", "hparams_search",
                         "logger", "model", "paths", "trainer"}  # fmt: skip
    assert ours == {group: [o for o in theirs[group] if not o.startswith("_")] for group in ours}


def test_help_shows_the_config_composed_with_the_overrides() -> None:
    text = help_text(CONF, ["model=encoder_decoder", "optim.lr=0.5"])
    assert "name: encoder_decoder" in text and "lr: 0.5" in text
    assert "model: conv, decoder_only, encoder_decoder" in text
    assert "${oc.env:ATTNLAB_LOG_DIR,logs}" in text  # unresolved, as Hydra shows it


def test_help_lists_no_shared_keys_file_and_no_folder_that_is_not_a_group() -> None:
    groups = help_text(CONF, []).split("== Configuration groups ==")[1].split("== Config ==")[0]
    lines = {line.split(":")[0]: line for line in groups.splitlines() if ": " in line}
    assert lines["model"] == "model: conv, decoder_only, encoder_decoder, encoder_only, rnn, vit"
    assert "wandb_sweep" not in lines and "experiment" in lines


def import_chains(stderr: str) -> dict[str, list[str]]:
    """Each imported module and the modules whose import led to it, innermost first
    (from ``-X importtime``'s nesting)."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            name = line.rsplit("|", 1)[1]
            rows.append((len(name) - len(name.lstrip()), name.strip()))
    chains: dict[str, list[str]] = {}
    for i, (depth, name) in enumerate(rows):  # a module's importer is listed after it
        chain, level = [], depth
        for outer_depth, outer in rows[i + 1 :]:
            if outer_depth < level:
                chain.append(outer)
                level = outer_depth
        chains.setdefault(name, chain)
    return chains


# stacks a plain training run does not use: attnlab must not import them for it
OPTIONAL = ("transformers", "datasets", "wandb", "sacrebleu", "sklearn", "matplotlib",
            "mlflow", "optuna", "submitit", "attnlab.compare", "attnlab.callbacks.diagnostics",
            "attnlab.callbacks.attention_maps")  # fmt: skip


def test_a_plain_training_run_does_not_import_the_optional_stacks(tmp_path: Path) -> None:
    from cli_runs import TINY

    started = time.perf_counter()
    done, _ = imported_modules(
        ["attnlab.train", *TINY, "trainer.max_epochs=1", "data.train_size=32"], tmp_path
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    chains = import_chains(done.stderr)
    assert "attnlab.tasks" in chains and "lightning" in chains  # the run did train
    summary = json.loads(next((tmp_path / "logs").rglob("summary.json")).read_text())
    if Path("/proc/self/stat").exists():  # seconds from the process's start to its first step
        assert 0.5 < summary["startup_s"] < elapsed
    for name, chain in chains.items():
        optional = next((o for o in OPTIONAL if name == o or name.startswith(o + ".")), None)
        if optional is None:
            continue
        assert not optional.startswith("attnlab"), (name, chain[:6])
        package = optional.split(".")[0]
        importer = next((m for m in chain if m.split(".")[0] != package), None)
        # a third-party package may pull one in (torchmetrics imports matplotlib when it
        # is installed); attnlab itself must not
        assert importer is None or not importer.startswith("attnlab"), (name, chain[:6])
