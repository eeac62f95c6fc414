"""experiment=gpt2_small: the preset composes to GPT-2 small's shape and recipe, and a dry
run of the same preset (shrunk, on the CPU, from a prepared folder) trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from attnlab.cli import pipeline
from attnlab.models import ModelConfig
from attnlab.models.transformer import build_model
from cli_runs import compose_run, run
from token_folders import prepared_folder

GPT2_VOCAB = 50257 + 6  # GPT-2's tokenizer.json through attnlab-prepare (ids moved up by 6)


def test_the_preset_is_gpt2_small_with_its_recipe(tmp_path: Path) -> None:
    cfg = compose_run(["experiment=gpt2_small", "data.path=/data/owt"], tmp_path)
    assert cfg.data._target_ == "attnlab.data.tokens.TokensDataModule"
    assert cfg.trainer.precision == "bf16-mixed" and cfg.trainer.accelerator == "gpu"
    tokens_per_step = cfg.data.batch_size * cfg.data.block_size * (
        cfg.trainer.accumulate_grad_batches)  # fmt: skip
    assert 0.45e6 < tokens_per_step < 0.55e6
    assert (cfg.optim.lr, cfg.optim.min_lr, tuple(cfg.optim.betas)) == (6e-4, 6e-5, (0.9, 0.95))
    model = dict(OmegaConf.to_container(cfg.model), vocab_size=GPT2_VOCAB)
    model.pop("_target_", None)
    with torch.device("meta"):
        net = build_model(ModelConfig.from_dict(model), "lm")
    params = sum(p.numel() for p in net.parameters())
    # nanoGPT's GPT-2 small: 124.44 M with its 50 257 tokens (tied embeddings, 1024 positions)
    assert params == pytest.approx(124.44e6 + 6 * 768, rel=2e-3)


@pytest.mark.parametrize("has_bf16", [True, False])
def test_bf16_on_a_gpu_without_it_falls_back_to_16_mixed(monkeypatch: pytest.MonkeyPatch,
                                                          has_bf16: bool) -> None:  # fmt: skip
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: has_bf16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-16GB")
    precision, note = pipeline.precision_for_gpu("bf16-mixed", "gpu")
    assert (precision, note is None) == (("bf16-mixed", True) if has_bf16 else ("16-mixed", False))
    if note:
        assert "V100" in note and "16-mixed" in note
    assert pipeline.precision_for_gpu("32-true", "gpu") == ("32-true", None)
    assert pipeline.precision_for_gpu("bf16-mixed", "cpu") == ("bf16-mixed", None)


def emulating_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch on a V100 or T4: bf16 'supported' when emulation counts, which it does by
    default, and not natively."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation)  # fmt: skip
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_a_gpu_that_only_emulates_bf16_trains_in_16_mixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from attnlab.bench.gpu import probes

    emulating_gpu(monkeypatch)
    precision, note = pipeline.precision_for_gpu("bf16-mixed", "gpu")
    assert precision == "16-mixed" and note is not None and "T4" in note
    assert probes.env()["bf16"] is False


def test_a_dry_run_of_the_preset_trains_on_the_cpu(tmp_path: Path) -> None:
    """The preset as is, but small and on the CPU: every key it sets is one attnlab-train
    accepts, accumulation and the schedule included."""
    folder = prepared_folder(tmp_path)
    done = run("train", "experiment=gpt2_small", f"data.path={folder}", "trainer=cpu",
               "model.compile=false", "model.d_model=32", "model.n_heads=2", "model.n_layers=2",
               "model.d_ff=64", "model.max_len=64", "data.block_size=64", "data.batch_size=4",
               "data.eval_blocks=8", "data.num_workers=0", "trainer.accumulate_grad_batches=2",
               "trainer.max_steps=3", "trainer.val_check_interval=6", "optim.warmup_steps=1",
               "optim.decay_steps=3", "trainer.enable_progress_bar=false", "test=false",
               f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["tokens"] == 3 * 2 * 4 * 65  # 3 steps of 2 accumulated micro-batches
