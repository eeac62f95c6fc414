"""Fuzzing every config key: the answer to any value is either accepted or exit code 2 with
one ``error:`` line — never a traceback.

The decision is made where attnlab makes it, in this process: the command line's own
check (compose + the schema, :func:`attnlab.cli.compose.validate_overrides`), then what
the job checks before it trains (the allowlist and schema again, the data module's own
checks, the model build, the Trainer). A drawn value is one of: a wrong type, an
out-of-range number, an empty or non-ASCII string, a list where a scalar goes, or a
valid value of that key. A sample of accepted configurations really trains
(:func:`test_accepted_configurations_train`), through ``attnlab-train``'s entry point.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from attnlab.cli.compose import compose_config, validate_overrides
from attnlab.cli.run import as_user_error
from composed_runs import compose_run
from fuzzing import (
    DEFAULT,
    MANY,
    REGISTRY_VALUES,
    captured,
    literal,
    one_error_line,
    time_limit,
    train_exit,
    values_for,
)

# small data and model, so that an accepted configuration builds (and trains) in seconds
SMALL = ["data.train_size=32", "data.val_size=8", "data.test_size=8", "data.batch_size=8",
         "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "trainer.max_steps=2",
         "trainer.enable_progress_bar=false", "callbacks=none"]  # fmt: skip
DATA = ["reverse", "copy", "majority", "associative_recall", "addition", "digits"]
# keys a value of which only changes where files go or what is logged; not fuzzed
UNFUZZED = {"paths.log_dir", "paths.data_dir", "hydra", "logger", "callbacks"}


def _keys(prefix: str, node: Any) -> list[str]:
    if OmegaConf.is_dict(node):
        return [k for key, value in node.items_ex(resolve=False)
                for k in _keys(f"{prefix}{key}.", value)]  # fmt: skip
    return [prefix.rstrip(".")]


def config_keys(data: str) -> list[str]:
    """Every leaf key of the composed config with ``data=<data>``, as users spell them; of
    the model's, those its architecture and default components read (the others are
    refused whatever their value, which the refusal's own tests check)."""
    from attnlab.model_config import ModelConfig

    cfg = compose_config([f"data={data}", *MODEL.get(data, [])])
    reads = ModelConfig.from_dict(OmegaConf.to_container(cfg.model)).to_dict()
    keys = [k for top in cfg for k in _keys(f"{top}.", cfg[top]) if str(top) not in UNFUZZED]
    keys = [k for k in keys if not k.startswith("model.") or k.split(".", 1)[1] in reads]
    return sorted(k for k in keys if not any(k == u or k.startswith(u + ".") for u in UNFUZZED))


MODEL = {"majority": ["model=encoder_only"], "digits": ["model=vit"]}
KEYS = {data: config_keys(data) for data in DATA}

@st.composite
def overrides(draw: st.DrawFn) -> list[str]:
    """data=<one of DATA>, then one or two of its keys set to drawn values."""
    data = draw(st.sampled_from(DATA))
    chosen = draw(st.lists(st.sampled_from(KEYS[data]), min_size=1, max_size=2, unique=True))
    return [f"data={data}", *MODEL.get(data, []),
            *[f"{key}={draw(values_for(key))}" for key in chosen]]  # fmt: skip


def in_the_job(args: list[str], run_dir: Path) -> None:
    """What the job builds before ``fit``, from the config composed as Hydra composes it."""
    from attnlab.cli import pipeline

    cfg = compose_run(args, run_dir)
    pipeline.check_config(cfg)
    datamodule = pipeline.build_data(cfg)
    pipeline.build_task(cfg, datamodule)
    callbacks = pipeline.build_callbacks(cfg)
    loggers = pipeline.build_loggers(cfg, run_dir)
    pipeline.build_trainer(cfg, run_dir, callbacks, loggers)


def decide(args: list[str]) -> str:
    """"refused" (one error line, exit 2), "refused in the job" (a UserError, which the job
    turns into one line) or "accepted"; anything else fails the test."""
    outcome, printed = captured(lambda: validate_overrides(args, multirun=False))
    if isinstance(outcome, SystemExit):
        assert outcome.code == 2, printed[-3000:]
        one_error_line(printed)
        return "refused"
    assert not isinstance(outcome, BaseException), "".join(
        traceback.format_exception(outcome))  # fmt: skip
    run_dir = Path(tempfile.mkdtemp(prefix="fuzz_run_"))
    try:
        with time_limit(60):
            outcome, printed = captured(lambda: in_the_job(args, run_dir))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if isinstance(outcome, BaseException):
        user = as_user_error(outcome) if isinstance(outcome, Exception) else None
        assert user is not None, "".join(traceback.format_exception(outcome))
        return "refused in the job"
    return "accepted"


# shrunk examples the fuzzer found, kept as regression cases
FOUND: list[list[str]] = [
    ["data=reverse", "model.tie_embeddings=[]"],  # a list reached a set lookup: TypeError
    # built layer by layer up to the memory budget before the refusal: minutes (TimedOut)
    ["data=reverse", "model.n_layers=1000000000"],
    # one weight larger than memory: the allocator's RuntimeError before any count
    ["data=reverse", "model.pos=learned", "model.max_len=100000000000"],
    ["data=reverse", "model.d_model=100000000000"],
]


@DEFAULT
@given(overrides())
def test_any_value_of_any_key_is_accepted_or_refused_in_one_line(args: list[str]) -> None:
    decide([*SMALL, *args])


@pytest.mark.slow
@MANY
@given(overrides())
def test_many_values_of_every_key(args: list[str]) -> None:
    decide([*SMALL, *args])


@st.composite
def hybrids(draw: st.DrawFn) -> list[str]:
    """model.attention=hybrid with a drawn layer pattern (kinds, kind*count, other text, or
    a value of any type) and one more of its keys drawn."""
    kinds = st.sampled_from(REGISTRY_VALUES["model.attention"])
    entry = st.one_of(kinds, st.builds("{}*{}".format, kinds, st.integers(-1, 3)),
                      st.text(max_size=6))  # fmt: skip
    pattern = draw(st.one_of(st.lists(entry, max_size=4).map(literal),
                             values_for("model.layer_pattern")))  # fmt: skip
    key = draw(st.sampled_from(["model.window", "model.rope_theta_local", "model.pos",
                                "model.prefix_lm", "model.attn_softcap"]))  # fmt: skip
    model = draw(st.sampled_from(["model=decoder_only", "model=encoder_decoder"]))
    return ["data=reverse", model, "model.attention=hybrid", f"model.layer_pattern={pattern}",
            f"{key}={draw(values_for(key))}"]  # fmt: skip


@DEFAULT
@given(hybrids())
def test_any_layer_pattern_is_accepted_or_refused_in_one_line(args: list[str]) -> None:
    decide([*SMALL, *args])


@pytest.mark.slow
@MANY
@given(hybrids())
def test_many_layer_patterns(args: list[str]) -> None:
    decide([*SMALL, *args])


@pytest.mark.parametrize("args", FOUND)
def test_values_the_fuzzer_found(args: list[str]) -> None:
    decide([*SMALL, *args])


def test_every_key_of_every_section_is_fuzzed() -> None:
    keys = {k for ks in KEYS.values() for k in ks}
    for section in ("model.", "optim.", "task.", "decode.", "trainer.", "data."):
        assert any(k.startswith(section) for k in keys), section
    assert {"seed", "model.norm", "optim.lr", "trainer.max_steps", "data.n_pairs"} <= keys


@pytest.mark.parametrize("args", [
    ["data=reverse", "model.norm=post", "optim.warmup_steps=0"],
    ["data=associative_recall", "model=decoder_only", "model.pos=rope", "data.n_pairs=4",
     "data.n_queries=2"],
    ["data=majority", "model=encoder_only", "model.ffn=swiglu", "seed=7"],
    ["data=majority", "model=encoder_only", "model.ffn=moe", "model.moe_bias_rate=0.01"],
    ["data=reverse", "model.ffn=moe", "model.moe_top_k=1", "model.moe_shared_experts=1"],
])  # fmt: skip
def test_accepted_configurations_train(args: list[str], tmp_path: Path) -> None:
    """Anchors: configurations the fuzzer accepts train for real (through attnlab-train)."""
    full = [*SMALL, *args]
    assert decide(full) == "accepted"
    code, printed = train_exit([*full, f"hydra.run.dir={tmp_path / 'run'}"])
    assert code == 0, printed[-3000:]


@DEFAULT
@given(overrides())
@example(["data=reverse", "model.max_len=3", "model.pos='learned'"])
def test_a_refusal_in_the_job_is_one_line_and_leaves_no_checkpoint(args: list[str]) -> None:
    """Through the real entry point: exit 0, or exit 2 with one line; a directory the job
    made for a refused run holds only its failed summary and log, no checkpoint."""
    full = [*SMALL, "trainer.max_steps=1", *args]  # the drawn values come last, so they hold
    if decide(full) == "accepted":
        return  # trained by the anchors above; a real run of each would take minutes
    with tempfile.TemporaryDirectory() as logs:
        code, printed = train_exit([*full, f"paths.log_dir={logs}"])
        assert code == 2, printed[-3000:]
        one_error_line(printed)
        for run in Path(logs).glob("*/runs/*"):
            assert not (run / "checkpoints").exists(), list(run.iterdir())
            with contextlib.suppress(FileNotFoundError):
                assert '"status": "failed"' in (run / "summary.json").read_text()
