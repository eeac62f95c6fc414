"""Fuzzing the checkpoint given to attnlab-eval, attnlab-generate and attnlab-export with a
run's config: a checkpoint from another run (other ``model.*`` settings, another
architecture), one whose saved settings or tensors were changed, or its bytes truncated,
flipped or extended. Every command answers with exit code 0, or 2 and exactly one
``error:`` line — never a traceback — and one whose saved ``model.*`` settings differ
from the run's in a key that changes the function is always refused, naming the key.

The runs are trained once per module (seconds); the default suite runs a few fixed
examples, ``-m slow`` a few hundred fresh ones.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import event, example, given
from hypothesis import strategies as st

from attnlab import eval as attnlab_eval
from attnlab import export as attnlab_export
from attnlab import generate as attnlab_generate
from attnlab.cli.checkpoints import HOW_KEYS
from fuzzing import FEW, SOME, one_line_or_success, train_tiny
from test_fuzz_files import damage, damaged

TEXT = "".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(40))
LM = ["model=decoder_only", "model.pos=learned", "model.max_len=64", "data=text",
      "data.block_size=16", "data.eval_blocks=2", "data.samples_per_epoch=8"]  # fmt: skip
COMMANDS = {
    "eval": (attnlab_eval.main, ["split=val"]),
    "generate": (attnlab_generate.main, ["prompt=to be", "max_new_tokens=4"]),
    "export_hf": (attnlab_export.main, ["format=hf"]),
    "export_native": (attnlab_export.main, ["format=native"]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``lm``, whose config the commands use; ``mup``: the same shapes, another function;
    ``seq2seq``: another architecture on other data."""
    root = tmp_path_factory.mktemp("fuzz_ckpt_runs")
    (root / "text.txt").write_text(TEXT)
    lm = [*LM, f"data.path={root / 'text.txt'}", f"data.cache_dir={root / 'cache'}"]
    return {
        "lm": train_tiny(root / "lm", lm),
        "mup": train_tiny(root / "mup", [*lm, "model.param=mup", "model.mup_base_width=8"]),
        "seq2seq": train_tiny(root / "seq2seq", ["data=reverse", "data.train_size=16",
                                                 "data.val_size=8", "data.test_size=8"]),
    }  # fmt: skip


@contextlib.contextmanager
def fresh_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="fuzz_ckpt_"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# what a drawn checkpoint is: (source run, edits of its contents or None, edits of its bytes)
SETTINGS_VALUES = st.one_of(
    st.integers(-3, 300), st.booleans(), st.none(), st.floats(allow_nan=True),
    st.sampled_from(["sp", "mup", "rope", "learned", "rmsnorm", "post", "", "x"]),
    st.lists(st.integers(0, 3), max_size=2),
)  # fmt: skip
CONTENT_EDITS = st.one_of(
    st.tuples(st.just("setting"), st.sampled_from(["param", "d_model", "pos", "norm", "pad_id",
              "scale_embeddings", "embed_norm", "mup_base_width", "vocab_size", "nosuch",
              *HOW_KEYS]), SETTINGS_VALUES),
    st.tuples(st.just("settings"), st.sampled_from(["absent", "none", "text", "list", "empty",
              "odd_keys", "tensor"]), st.none()),
    st.tuples(st.just("tensor"), st.sampled_from(["drop", "extra", "reshape", "half", "text",
              "nan"]), st.integers(0, 1000)),
)  # fmt: skip


@st.composite
def checkpoints(draw: st.DrawFn) -> tuple[str, list[tuple[str, Any, Any]], list | None]:
    source = draw(st.sampled_from(["lm", "mup", "seq2seq"]), label="source")
    edits = draw(st.lists(CONTENT_EDITS, max_size=2), label="edits")
    broken = draw(st.none() | damage(4096), label="bytes")
    return source, edits, broken


def edited(checkpoint: dict[str, Any], edits: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    hyper = checkpoint.setdefault("hyper_parameters", {})
    state = checkpoint["state_dict"]
    original = dict(hyper["model"]) if isinstance(hyper.get("model"), dict) else {}
    for kind, what, value in edits:
        names = sorted(k for k, v in state.items() if isinstance(v, torch.Tensor))
        name = names[value % len(names)] if kind == "tensor" and names else None
        if kind == "setting" and isinstance(hyper.get("model"), dict):
            hyper["model"][what] = value
        elif kind == "settings":
            hyper.pop("model", None)
            if what != "absent":
                hyper["model"] = {
                    "none": None, "text": "decoder_only", "list": [1, 2], "empty": {},
                    "odd_keys": {1: 2, "d_model": torch.ones(2)},
                    "tensor": {**original, "d_model": torch.ones(2)},
                }[what]  # fmt: skip
        elif name is not None and what == "drop":
            del state[name]
        elif what == "extra":
            state["model.extra.weight"] = torch.zeros(2, 2)
        elif name is not None and what == "reshape":
            state[name] = state[name].reshape(-1)[: max(state[name].numel() - 1, 0)]
        elif name is not None and what == "half":
            state[name] = state[name].half()
        elif name is not None and what == "text":
            state[name] = "not a tensor"
        elif name is not None and what == "nan" and state[name].is_floating_point():
            state[name] = torch.full_like(state[name], float("nan"))
    return checkpoint


# shrunk examples the fuzzer found, kept as regression cases: (command, drawn)
FOUND = [
    # a parameter saved as a string: load_state_dict's RuntimeError, a traceback
    ("generate", ("lm", [("tensor", "text", 0)], None)),
    ("export_hf", ("lm", [("tensor", "text", 0)], None)),
    ("eval", ("mup", [("tensor", "text", 0)], None)),
]


@pytest.mark.parametrize(("command", "drawn"), FOUND)
def test_checkpoints_the_fuzzer_found(command: str, drawn: tuple, runs: dict[str, Path]) -> None:
    with fresh_folder() as tmp:
        judge(command, drawn, runs, tmp)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        return bool(a == b)
    except RuntimeError:  # a tensor of several values
        return False


def differing_keys(saved: Any, used: dict[str, Any]) -> list[str]:
    """The keys that change the function whose setting differs (what must be refused)."""
    if not isinstance(saved, dict):
        return []
    return [k for k in saved if k in used and k not in HOW_KEYS and not same(saved[k], used[k])]


def judge(command: str, drawn: tuple, runs: dict[str, Path], tmp: Path) -> int:
    source, edits, broken = drawn
    original = runs[source] / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(original, map_location="cpu", weights_only=True)
    used = torch.load(runs["lm"] / "checkpoints" / "last.ckpt", weights_only=True)[
        "hyper_parameters"]["model"]  # fmt: skip
    checkpoint = edited(checkpoint, edits)
    path = tmp / "given.ckpt"
    torch.save(checkpoint, path)
    if broken is not None:
        path.write_bytes(damaged(path.read_bytes(), broken))
    main, options = COMMANDS[command]
    out = [f"out={tmp / 'out'}"] if command.startswith("export") else []
    argv = [f"run_dir={runs['lm']}", f"ckpt_path={path}", *options, *out]
    code, printed = one_line_or_success(main, argv)
    saved = checkpoint.get("hyper_parameters", {}).get("model")
    differ = differing_keys(saved, used)
    if differ and broken is None:  # a readable file trained with other settings
        assert code == 2, (differ, printed[-2000:])
        error = next(line for line in printed.splitlines() if line.startswith("error:"))
        tensors_intact = not any(kind == "tensor" for kind, _, _ in edits)
        named = any(f"model.{k}=" in error for k in differ) or "another shape" in error
        assert named or not tensors_intact, error
    if code == 2 and command.startswith("export"):
        assert not (tmp / "out").exists()
    if source == "lm" and not edits and broken is None:
        assert code == 0, printed[-2000:]  # the run's own checkpoint, untouched
    return code


@pytest.mark.parametrize("command", list(COMMANDS))
@FEW
@given(drawn=checkpoints())
@example(drawn=("mup", [], None))  # the same shapes, another function (μP)
@example(drawn=("seq2seq", [], None))  # another architecture
@example(drawn=("lm", [("setting", "param", "mup")], None))  # a setting changed in the file
@example(drawn=("lm", [], [("truncate", 3000, 0)]))  # a truncated file
def test_a_checkpoint_from_another_run_is_loaded_or_refused_in_one_line(
    command: str, runs: dict[str, Path], drawn: tuple
) -> None:
    with fresh_folder() as tmp:
        event(f"exit code {judge(command, drawn, runs, tmp)}")


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
@SOME
@given(drawn=checkpoints())
def test_many_checkpoints_from_other_runs(command: str, runs: dict[str, Path],
                                          drawn: tuple) -> None:  # fmt: skip
    with fresh_folder() as tmp:
        event(f"exit code {judge(command, drawn, runs, tmp)}")
