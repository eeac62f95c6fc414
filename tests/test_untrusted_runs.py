"""A downloaded run directory or checkpoint cannot run code: planted cases are refused, not run.

Each planted file would write a marker file if it ran (the first tests prove
that it really would, when loaded the unsafe way); attnlab-eval,
attnlab-generate and a resumed attnlab-train must refuse it with exit code 2
and one ``error:`` line that names the file, leaving no marker behind.
"""

from __future__ import annotations

import pathlib
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from attnlab import eval as attnlab_eval
from attnlab import generate as attnlab_generate
from attnlab import train as attnlab_train
from composed_runs import TINY_MODEL

ONE_EPOCH = [
    "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "data.batch_size=8",
    "data=reverse", "data.train_size=16", "data.val_size=8", "data.test_size=8",
]  # fmt: skip


class Planted:
    """Unpickling this calls ``Path(marker).touch()``: code from the file runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def planted_checkpoint(real: Path, dest: Path, marker: Path) -> Path:
    """A copy of a real checkpoint with a planted object in its callbacks' state."""
    checkpoint = torch.load(real, map_location="cpu", weights_only=True)
    checkpoint["callbacks"]["Planted"] = {"payload": Planted(marker)}
    torch.save(checkpoint, dest)
    return dest


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "seq2seq"
    code = attnlab_train.main([*TINY_MODEL, *ONE_EPOCH, "model=decoder_only",
                               f"hydra.run.dir={run_dir}"])  # fmt: skip
    assert code == 0
    return run_dir


@pytest.fixture
def copied(trained: Path, tmp_path: Path) -> Path:
    """A fresh copy of the trained run, as a downloaded one would arrive."""
    run_dir = tmp_path / "downloaded"
    shutil.copytree(trained, run_dir)
    return run_dir


def one_error_line(capfd: pytest.CaptureFixture[str]) -> str:
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_the_planted_checkpoint_really_runs_code_when_loaded_unsafely(
    copied: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    path = planted_checkpoint(copied / "checkpoints" / "last.ckpt", tmp_path / "p.ckpt", marker)
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("command", ["eval", "generate", "train_resume"])
def test_a_planted_pickle_in_a_checkpoint_is_refused_without_running(
    command: str, copied: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    ckpt = copied / "checkpoints" / "last.ckpt"
    planted_checkpoint(ckpt, ckpt, marker)
    capfd.readouterr()
    if command == "eval":
        code = attnlab_eval.main([f"ckpt_path={ckpt}"])
    elif command == "generate":
        code = attnlab_generate.main([f"ckpt_path={ckpt}", "prompt=1 2 3"])
    else:
        with pytest.raises(SystemExit) as exit_info:
            resumed = tmp_path / "resumed"
            attnlab_train.main([*TINY_MODEL, *ONE_EPOCH, "model=decoder_only",
                                f"ckpt_path={ckpt}", f"hydra.run.dir={resumed}"])  # fmt: skip
        code = exit_info.value.code
    line = one_error_line(capfd)
    assert code == 2
    assert str(ckpt) in line and "refused" in line and "weights_only" in line
    assert not marker.exists()


OPEN = {"_target_": "builtins.open", "mode": "w"}
PLANTED_TARGETS = {  # dotted key in config.yaml -> the node planted there
    "builtins_open": lambda m, c: ("data", {**OPEN, "file": str(m)}),
    "torch_load": lambda m, c: (
        "data",
        {"_target_": "torch.load", "f": str(c), "weights_only": False},
    ),  # fmt: skip
    "nested_in_data": lambda m, c: ("data.hf", {**OPEN, "file": str(m)}),
    "in_a_logger": lambda m, c: ("logger.csv", {**OPEN, "file": str(m)}),
    "interpolated": lambda m, c: ("data._target_", "${oc.env:PLANTED_TARGET}"),
    "subprocess": lambda m, c: (
        "trainer.strategy",
        {"_target_": "subprocess.run", "args": ["touch", str(m)]},
    ),  # fmt: skip
}


def plant_config(run_dir: Path, planted: tuple[str, object]) -> Path:
    path = run_dir / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    *parents, leaf = planted[0].split(".")
    node = cfg
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = planted[1]
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_planted_target_really_runs_code_when_instantiated(copied: Path, tmp_path: Path) -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    marker = tmp_path / "ran"
    path = plant_config(copied, PLANTED_TARGETS["builtins_open"](marker, None))
    instantiate(OmegaConf.load(path).data).close()
    assert marker.exists()


@pytest.mark.parametrize("command", ["eval", "generate"])
@pytest.mark.parametrize("case", list(PLANTED_TARGETS))
def test_a_planted_target_in_a_saved_config_is_refused_before_anything_runs(
    case: str, command: str, copied: Path, tmp_path: Path,
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    marker = tmp_path / "ran"
    monkeypatch.setenv("PLANTED_TARGET", "builtins.open")
    planted = planted_checkpoint(copied / "checkpoints" / "last.ckpt", tmp_path / "p.ckpt",
                                 marker)  # fmt: skip
    path = plant_config(copied, PLANTED_TARGETS[case](marker, planted))
    capfd.readouterr()
    if command == "eval":
        code = attnlab_eval.main([f"run_dir={copied}"])
    else:
        code = attnlab_generate.main([f"run_dir={copied}", "prompt=1 2 3"])
    line = one_error_line(capfd)
    assert code == 2
    assert str(path) in line and "_target_" in line and "refused" in line
    assert not marker.exists()


def test_a_target_on_the_train_command_line_is_refused_before_a_run_starts(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SystemExit) as exit_info:
        attnlab_train.main([*TINY_MODEL, "data._target_=builtins.open", f"+data.file={marker}",
                            "+data.mode=w", f"paths.log_dir={tmp_path / 'logs'}"])  # fmt: skip
    assert exit_info.value.code == 2
    assert "data._target_=builtins.open is refused" in one_error_line(capfd)
    assert not marker.exists() and not (tmp_path / "logs").exists()


def test_your_own_class_is_allowed_from_your_environment_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from attnlab.cli.targets import check_targets
    from attnlab.errors import ConfigError

    cfg = {"callbacks": {"mine": {"_target_": "mypkg.callbacks.Mine"}}}
    with pytest.raises(ConfigError, match="ATTNLAB_EXTRA_TARGETS"):
        check_targets(cfg, "the command line")
    monkeypatch.setenv("ATTNLAB_EXTRA_TARGETS", "other.Thing, mypkg.callbacks.Mine")
    check_targets(cfg, "the command line")


def test_every_target_in_conf_is_on_the_allowlist() -> None:
    from attnlab.cli.common import config_dir
    from attnlab.cli.targets import allowed_targets

    found = set()
    for path in config_dir().rglob("*.yaml"):
        if "hydra" in path.relative_to(config_dir()).parts:
            continue  # Hydra's own launcher/sweeper plugins
        for line in path.read_text().splitlines():
            if line.strip().startswith("_target_:"):
                found.add(line.split(":", 1)[1].split("#")[0].strip())
    # Hydra's own plugins (sweepers under `hydra:`), which Hydra builds and no saved run holds
    found = {t for t in found if not t.startswith("hydra_plugins.")}
    assert found and found <= allowed_targets(), found - allowed_targets()
