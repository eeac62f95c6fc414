"""Training through the real Hydra configs: every architecture × norm × task."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.tasks.base import OptimConfig, lr_multiplier
from attnlab.tasks.seq2seq import join_source_target, left_pad_prompts, teacher_forcing

COMPATIBLE = {
    "encoder_only": ("majority",),
    "decoder_only": ("copy", "reverse", "sort", "addition", "majority"),
    "encoder_decoder": ("copy", "reverse", "sort", "addition", "majority"),
}
CASES = [
    (arch, norm, data)
    for arch, datasets in COMPATIBLE.items()
    for norm, data in itertools.product(("pre", "post"), datasets)
]


@pytest.mark.parametrize("arch,norm,data", CASES)
def test_every_architecture_norm_and_task_trains_one_fast_dev_run(
    fast_run, arch: str, norm: str, data: str
) -> None:
    result = fast_run(f"model={arch}", f"model.norm={norm}", f"data={data}")
    assert result["status"] == "completed"
    assert result["metrics"]["test/loss"] > 0


def test_incompatible_architecture_and_task_is_refused_before_building(fast_run) -> None:
    with pytest.raises(ConfigError, match="model=encoder_only"):
        fast_run("model=encoder_only", "data=reverse")


def test_prefix_lm_is_refused_for_language_modelling_data() -> None:
    from attnlab.tasks import check_compatible

    with pytest.raises(ConfigError, match="model.prefix_lm=true"):
        check_compatible("decoder_only", "lm", prefix_lm=True)
    check_compatible("decoder_only", "classification", prefix_lm=True)
    check_compatible("decoder_only", "seq2seq", prefix_lm=True)


def test_prefix_lm_classifier_sees_the_whole_input_bidirectionally() -> None:
    from attnlab.tasks.classification import ClassificationTask

    model = dict(name="decoder_only", vocab_size=30, d_model=32, n_heads=4, n_layers=2,
                 dropout=0.0, prefix_lm=True)  # fmt: skip
    torch.manual_seed(0)
    task = ClassificationTask(model=model, optim={}, num_classes=2).eval()
    ids = torch.tensor([[7, 8, 9, 10, 0, 0], [11, 12, 13, 14, 15, 16]])  # right-padded
    lengths = (ids != 0).sum(1)
    with torch.no_grad():
        pooled = task.model.pooled(ids)
        hidden = task.model.hidden(ids, prefix_len=lengths)
        causal = task.model.hidden(ids)
        alone = task.model.pooled(ids[:1, :4])
    torch.testing.assert_close(pooled, hidden[torch.arange(2), lengths - 1])
    assert not torch.allclose(pooled, causal[torch.arange(2), lengths - 1])
    torch.testing.assert_close(pooled[:1], alone, atol=1e-5, rtol=1e-5)  # padding never seen


def test_teacher_forcing_shifts_target_right_and_appends_eos() -> None:
    tgt = torch.tensor([[7, 8, 9], [7, 0, 0]])
    decoder_in, labels = teacher_forcing(tgt)
    assert decoder_in.tolist() == [[1, 7, 8, 9], [1, 7, 0, 0]]
    assert labels.tolist() == [[7, 8, 9, 2], [7, 2, -100, -100]]


def test_decoder_only_sequence_is_source_separator_target_with_loss_on_target() -> None:
    src = torch.tensor([[6, 7, 0], [6, 7, 8]])
    tgt = torch.tensor([[9, 0], [9, 10]])
    seq, labels, prefix = join_source_target(src, tgt)
    assert seq[0].tolist()[:5] == [6, 7, 3, 9, 2]
    assert seq[1].tolist() == [6, 7, 8, 3, 9, 10, 2]
    assert labels[1].tolist() == [-100, -100, -100, 9, 10, 2, -100]
    assert prefix.tolist() == [3, 4]


def test_left_padded_prompts_end_with_separator() -> None:
    assert left_pad_prompts(torch.tensor([[6, 7, 0], [6, 7, 8]])).tolist() == [
        [0, 6, 7, 3],
        [6, 7, 8, 3],
    ]


def test_cosine_schedule_warms_up_linearly_then_decays_to_min_lr() -> None:
    cfg = OptimConfig(lr=1.0, warmup_steps=10, schedule="cosine", min_lr=0.1)
    values = [lr_multiplier(s, cfg, 64, 110) for s in range(110)]
    assert values[4] == pytest.approx(0.5)
    assert values[9] == pytest.approx(1.0)
    assert values[-1] == pytest.approx(0.1, abs=1e-3)
    assert all(a >= b for a, b in zip(values[9:], values[10:], strict=False))


def test_inverse_sqrt_schedule_is_the_papers_formula() -> None:
    cfg = OptimConfig(lr=1.0, warmup_steps=4000, schedule="inverse_sqrt")
    for step in (1, 100, 4000, 10000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert lr_multiplier(step - 1, cfg, 512, 0) == pytest.approx(expected)


def test_run_writes_summary_with_the_contract_fields(tmp_path: Path) -> None:
    env_cmd = [sys.executable, "-m", "attnlab.train", *[
        "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "data.train_size=64",
        "data.val_size=16", "data.test_size=16", "model.d_model=32", "seed=0",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]]  # fmt: skip
    done = subprocess.run(env_cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["error"] is None
    assert "seed=0" in summary["overrides"]
    assert summary["config"]["model"]["norm"] == "pre"
    for key in ("val/loss", "test/loss", "val/exact_match", "val/acc"):
        assert key in summary["metrics"]
    assert summary["params"] > 0 and summary["wall_s"] > 0
    files = ("metrics.csv", ".hydra/config.yaml", ".hydra/overrides.yaml", "checkpoints/last.ckpt")
    for name in files:
        assert (tmp_path / "run" / name).is_file(), name


# Bad command lines (exit 2, one error line): tests/test_cli_errors.py


@pytest.mark.slow
def test_default_run_reaches_exact_match_099_in_under_three_minutes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "attnlab.train", f"hydra.run.dir={tmp_path / 'run'}",
           "trainer.enable_progress_bar=false"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["metrics"]["val/exact_match"] >= 0.99
    assert summary["wall_s"] < 180
