"""attnlab-eval and attnlab-generate on runs trained by attnlab-train (tiny, one epoch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab import eval as attnlab_eval
from attnlab import export as attnlab_export
from attnlab import generate as attnlab_generate
from attnlab import train as attnlab_train
from attnlab.cli.checkpoints import default_checkpoint
from composed_runs import TINY_MODEL, compose_run, sized

ONE_EPOCH = [
    "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1",
    "data.batch_size=8",
]  # fmt: skip
SMALL_REVERSE = ["data=reverse", "data.train_size=32", "data.val_size=8", "data.test_size=8"]


def train_run(root: Path, name: str, overrides: list[str]) -> Path:
    """``attnlab-train`` in this process; returns the run directory."""
    run_dir = root / name
    args = [*sized(TINY_MODEL, overrides), *ONE_EPOCH, *overrides, f"hydra.run.dir={run_dir}"]
    code = attnlab_train.main(args)
    assert code == 0 and (run_dir / "checkpoints" / "last.ckpt").is_file()
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    text = root / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 40)
    lm_data = ["data=text", f"data.path={text}", "data.block_size=16", "data.eval_blocks=4",
               "data.samples_per_epoch=16", f"data.cache_dir={root / 'cache'}"]  # fmt: skip
    return {
        "decoder_only": train_run(root, "decoder_only", ["model=decoder_only", *SMALL_REVERSE]),
        "encoder_decoder": train_run(root, "encoder_decoder", SMALL_REVERSE),
        "rnn": train_run(root, "rnn", ["model=rnn", *SMALL_REVERSE]),
        "rnn_lm": train_run(
            root,
            "rnn_lm",
            [
                "model=rnn",
                "data=text",
                f"data.path={text}",
                "data.block_size=16",
                "data.eval_blocks=4",
                "data.samples_per_epoch=16",
                f"data.cache_dir={root / 'cache'}",
            ],
        ),  # fmt: skip
        "lm": train_run(root, "lm", ["model=decoder_only", *lm_data]),
        # the same shapes as "lm", another function: μP's multipliers
        "lm_mup": train_run(root, "lm_mup", ["model=decoder_only", *lm_data, "model.param=mup",
                                             "model.mup_base_width=8"]),  # fmt: skip
    }


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_eval_prints_metrics_and_writes_a_new_json_each_time(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = runs["decoder_only"]
    assert attnlab_eval.main([f"run_dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    assert "test/loss" in out and "test/exact_match" in out
    first = list((run_dir / "eval").glob("*_test.json"))
    assert len(first) == 1
    saved = first[0].read_text()
    assert attnlab_eval.main([f"run_dir={run_dir}"]) == 0
    assert len(list((run_dir / "eval").glob("*_test.json"))) == 2
    assert first[0].read_text() == saved  # never overwritten
    record = json.loads(saved)
    assert record["split"] == "test" and record["metrics"]["test/loss"] > 0
    assert Path(record["checkpoint"]).name.startswith("best")


def test_eval_of_the_validation_split_with_overrides_reports_val_metrics(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = runs["encoder_decoder"]
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    args = [f"ckpt_path={ckpt}", "split=val", "decode.strategy=beam", "data.batch_size=4"]
    assert attnlab_eval.main(args) == 0
    out = capsys.readouterr().out
    assert "val/exact_match" in out and "test/" not in out
    (record,) = [json.loads(p.read_text()) for p in (run_dir / "eval").glob("*_val.json")]
    assert record["checkpoint"] == str(ckpt)
    assert "decode.strategy=beam" in record["overrides"]


def test_eval_reports_a_language_models_loss_by_context_length(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """task.loss_by_position on the command line: the run's checkpoint read by bucket."""
    run_dir = runs["lm"]
    args = [f"run_dir={run_dir}", "split=val", "task.loss_by_position=[4,8]"]
    assert attnlab_eval.main(args) == 0
    out = capsys.readouterr().out
    (record,) = [json.loads(p.read_text()) for p in (run_dir / "eval").glob("*_val.json")]
    names = ("val/loss_pos_1-4", "val/loss_pos_5-8", "val/loss_pos_9+")
    assert all(name in out and record["metrics"][name] > 0 for name in names)
    # a block of 16 predictions (data.block_size=16) puts 4, 4 and 8 in the buckets: their
    # weighted mean is the split's loss
    counts = (4, 4, 8)
    weighted = sum(n * record["metrics"][name] for n, name in zip(counts, names, strict=True))
    assert weighted / 16 == pytest.approx(record["metrics"]["val/loss"], rel=1e-5)


def test_the_default_checkpoint_is_the_best_not_the_last(runs: dict[str, Path]) -> None:
    assert default_checkpoint(runs["decoder_only"]).name.startswith("best")


def test_generate_prints_one_line_per_output(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1 2 3\n\n4 5 6 7\n")
    for name in ("decoder_only", "encoder_decoder", "rnn"):
        args = [f"run_dir={runs[name]}", f"prompt_file={prompts}", "decode.strategy=sample",
                "num_samples=3", "max_new_tokens=6", "seed=1"]  # fmt: skip
        assert attnlab_generate.main(args) == 0
        lines = capsys.readouterr().out.split("\n")[:-1]
        assert len(lines) == 2 * 3
        symbols = set("0123456789 ")
        assert all(set(line) <= symbols and len(line.split()) <= 6 for line in lines)


def test_generate_with_beam_search_gives_one_line_per_prompt(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("encoder_decoder", "rnn"):  # the recurrent state is the rnn's beam cache
        ckpt = runs[name] / "checkpoints" / "last.ckpt"
        args = [f"ckpt_path={ckpt}", "prompt=1 2 3 4", "decode.strategy=beam",
                "decode.beam_size=3"]  # fmt: skip
        assert attnlab_generate.main(args) == 0
        assert len(capsys.readouterr().out.split("\n")[:-1]) == 1


def test_a_language_model_continues_its_prompt(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("lm", "rnn_lm"):
        args = [f"run_dir={runs[name]}", "prompt=the quick", "max_new_tokens=12"]
        assert attnlab_generate.main(args) == 0
        (line,) = capsys.readouterr().out.split("\n")[:-1]
        assert line.startswith("the quick") and len(line) > len("the quick")


def test_eval_of_a_corrupt_checkpoint_is_one_error_line(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    last = runs["decoder_only"] / "checkpoints" / "last.ckpt"
    random_bytes, truncated = tmp_path / "random.ckpt", tmp_path / "truncated.ckpt"
    random_bytes.write_bytes(os.urandom(2048))
    truncated.write_bytes(last.read_bytes()[:4096])
    for ckpt in (random_bytes, truncated):
        args = [f"run_dir={runs['decoder_only']}", f"ckpt_path={ckpt}"]
        assert attnlab_eval.main(args) == 2
        assert str(ckpt) in one_error_line(capsys)
        assert attnlab_generate.main([*args, "prompt=1 2"]) == 2
        assert str(ckpt) in one_error_line(capsys)


def test_eval_of_a_checkpoint_from_a_model_of_another_shape_names_the_key(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert attnlab_eval.main([f"run_dir={runs['decoder_only']}", "model.d_model=32"]) == 2
    line = one_error_line(capsys)
    assert "another shape" in line and "model.d_model" in line


COMMANDS = {"eval": (attnlab_eval.main, []), "generate": (attnlab_generate.main, ["prompt=the"]),
            "export": (attnlab_export.main, ["format=native"])}  # fmt: skip


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_checkpoint_from_a_run_with_other_model_settings_is_refused_by_key(
    command: str, runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An SP checkpoint fits a μP run's shapes but computes another function under it."""
    main, options = COMMANDS[command]
    out = [f"out={tmp_path / 'export'}"] if command == "export" else []
    ckpt = default_checkpoint(runs["lm"])
    assert main([f"run_dir={runs['lm_mup']}", f"ckpt_path={ckpt}", *options, *out]) == 2
    line = one_error_line(capsys)
    assert str(ckpt) in line and "model.param=sp in the checkpoint, mup in the config" in line
    assert ("model.mup_base_width=8 in the config, a key the checkpoint's model does not read"
            in line)  # fmt: skip
    assert "run_dir=<the run that wrote it>" in line
    assert not (tmp_path / "export").exists()


def test_the_keys_whose_values_differ_are_named_before_the_keys_the_checkpoint_lacks(
    tmp_path: Path,
) -> None:
    """The error shows three keys: a differing value comes first, so one is always named."""
    from attnlab.cli.checkpoints import check_same_model
    from attnlab.errors import CheckpointError

    config = {"attention": "full", "bias": True, "block": "sequential", "d_model": 16}
    with pytest.raises(CheckpointError) as refused:
        check_same_model(tmp_path / "given.ckpt", {"d_model": 32}, config)
    assert "(model.d_model=32 in the checkpoint, 16 in the config; model.attention=full in " \
        "the config, a key the checkpoint's model does not read; model.bias=true" in str(
            refused.value)  # fmt: skip


def test_eval_with_an_override_that_changes_the_function_is_refused_by_key(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert attnlab_eval.main([f"run_dir={runs['lm']}", "model.scale_embeddings=false"]) == 2
    line = one_error_line(capsys)
    assert "model.scale_embeddings=true in the checkpoint, false in the config" in line
    assert "drop model.* overrides" in line


@pytest.mark.parametrize(("config", "refused"), [
    ({"attn_softcap": None, "rope_theta": 10000.0, "rotary_fraction": 1.0}, False),
    ({"attn_softcap": 50.0}, True),
    ({"rope_theta": 500000.0}, True),
    ({"mup_output_mult": 1.0, "mup_attn_mult": 1.0}, False),  # μP saved before the keys
    ({"mup_output_mult": 2.0}, True),
])  # fmt: skip
def test_a_checkpoint_without_a_neutral_key_loads_under_its_default_only(
    config: dict, refused: bool, tmp_path: Path
) -> None:
    """A run saved before a key existed, or trained on an attn_impl that does not read
    model.attn_softcap, computes what the key's default computes, and nothing else."""
    from attnlab.cli.checkpoints import check_same_model
    from attnlab.errors import CheckpointError

    saved = {"d_model": 16, "pos": "rope"}
    if refused:
        with pytest.raises(CheckpointError, match="a key the checkpoint's model does not read"):
            check_same_model(tmp_path / "given.ckpt", saved, {**saved, **config})
    else:
        check_same_model(tmp_path / "given.ckpt", saved, {**saved, **config})


def test_eval_with_an_override_of_how_the_function_is_computed_is_accepted(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = [f"run_dir={runs['lm']}", "split=val", "model.attn_impl=math", "model.dropout=0.3"]
    assert attnlab_eval.main(args) == 0
    assert "val/loss" in capsys.readouterr().out


@pytest.mark.parametrize("command", [attnlab_eval.main, attnlab_generate.main])
def test_a_missing_run_directory_is_one_error_line(
    command: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert command([f"run_dir={tmp_path / 'nowhere'}", "prompt=1"]) == 2  # type: ignore[operator]
    assert "nowhere" in one_error_line(capsys)


def test_a_directory_without_a_saved_config_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert attnlab_eval.main([f"run_dir={tmp_path}"]) == 2
    assert ".hydra/config.yaml" in one_error_line(capsys)


def test_a_run_without_checkpoints_is_one_error_line(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_bytes(
        (runs["decoder_only"] / ".hydra" / "config.yaml").read_bytes()
    )
    assert attnlab_eval.main([f"run_dir={tmp_path}"]) == 2
    assert "no checkpoint" in one_error_line(capsys)


def test_generate_with_an_encoder_only_model_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from omegaconf import OmegaConf

    cfg = compose_run(["model=encoder_only", "data=majority"], tmp_path)
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, tmp_path / ".hydra/config.yaml")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"not read")
    assert attnlab_generate.main([f"run_dir={tmp_path}", "prompt=1 2 3"]) == 2
    assert "encoder-only" in one_error_line(capsys)


@pytest.mark.parametrize("module", ["attnlab.eval", "attnlab.generate", "attnlab.export"])
def test_python_dash_m_reports_an_error_without_a_traceback(module: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(attnlab_eval.__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-m", module, f"run_dir={tmp_path / 'nowhere'}", "prompt=1"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_the_default_model_learns_to_reverse_a_prompt(tmp_path: Path) -> None:
    """attnlab-train with the defaults (encoder_decoder on reverse), then attnlab-generate."""
    env = {**os.environ, "PYTHONPATH": str(Path(attnlab_eval.__file__).parents[1]),
           "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}  # fmt: skip
    run_dir = tmp_path / "run"

    def attnlab(command: str, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", f"attnlab.{command}", *args],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    attnlab("train", "trainer.max_epochs=6", "trainer.enable_progress_bar=false",
            f"hydra.run.dir={run_dir}")  # fmt: skip
    assert attnlab("generate", f"run_dir={run_dir}", "prompt=1 2 3 4").strip() == "4 3 2 1"
    beam = attnlab("generate", f"run_dir={run_dir}", "prompt=3 1 4 1 5 9", "decode.strategy=beam")
    assert beam.strip() == "9 5 1 4 1 3"


@pytest.mark.parametrize(("command", "says"), [
    ("eval", "run_dir=logs/train/runs/<run>"), ("generate", "prompt_file"),
    ("export", "format=hf writes config.json"), ("coord_check", "μP's coordinate check"),
])  # fmt: skip
def test_help_is_plain_text_without_restructuredtext_markup(
    command: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib
    import re

    module = importlib.import_module(f"attnlab.{command}")
    assert module.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert says in out
    assert "``" not in out and not re.search(r":[a-z]+:`", out), out


# what a run written before models resolved their keys recorded: every model.* key of every
# architecture, those its model does not read at their old defaults
RECORDED_BY_OLD_RUNS = {
    "rnn": {"norm": "pre", "qk_norm": False, "n_heads": 8, "attention": "full", "window": 256,
            "pos": "sinusoidal", "ffn": "relu", "param": "sp", "mup_base_width": 64},
    "decoder_only": {"cell": "lstm", "rnn_attention": "bahdanau", "n_encoder_layers": None,
                     "kernel_size": 3, "bidirectional": True, "input_feeding": False},
}  # fmt: skip


@pytest.mark.parametrize("name", list(RECORDED_BY_OLD_RUNS))
def test_a_run_that_recorded_every_model_key_still_evaluates_to_its_own_numbers(
    name: str, runs: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from omegaconf import OmegaConf

    old = tmp_path / name
    shutil.copytree(runs[name], old)
    shutil.rmtree(old / "eval", ignore_errors=True)  # other tests' evaluations of the run
    config = old / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(config)
    recorded = RECORDED_BY_OLD_RUNS[name]
    assert all(OmegaConf.is_missing(cfg.model, key) for key in recorded)  # unset: not read
    cfg.model = {**OmegaConf.to_container(cfg.model), **recorded}
    OmegaConf.save(cfg, config)
    assert attnlab_eval.main([f"run_dir={old}"]) == 0
    (result,) = (old / "eval").glob("*_test.json")
    trained = json.loads((old / "summary.json").read_text())["metrics"]["test/loss"]
    assert json.loads(result.read_text())["metrics"]["test/loss"] == pytest.approx(trained)
