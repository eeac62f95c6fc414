"""experiments/reference_translation.py, the translation gate from outside attnlab's model
code: torch's nn.Transformer trained on attnlab's data for the same overrides. Checked by hand
(teacher forcing, §3.5's sinusoids), against attnlab's encoder-decoder of the same config (its
parameter count), and end to end on synthetic data (a summary attnlab-compare reads; refusals
that leave nothing behind)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from attnlab.compare.runs import read_run
from attnlab.special_tokens import BOS, EOS, PAD
from conftest import reference_diverges, reference_refuses, study_script

TINY = ["model=encoder_decoder", "data=reverse", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=1", "model.d_ff=32", "data.train_size=64", "data.val_size=16",
        "data.test_size=16", "optim.schedule=cosine", "optim.betas=[0.9,0.98]",
        "optim.weight_decay=0", "optim.warmup_steps=2", "optim.min_lr=0", "trainer.max_steps=20",
        "trainer.val_check_interval=10", "trainer.limit_val_batches=1",
        "trainer.check_val_every_n_epoch=null", "trainer.max_epochs=-1",
        "decode.max_new_tokens=12"]  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> Iterator[ModuleType]:
    with study_script("experiments/reference_translation.py", "reference_translation") as module:
        yield module


def test_teacher_forcing_puts_bos_before_and_eos_after_each_target(reference: ModuleType) -> None:
    tgt = torch.tensor([[7, 8, 9], [5, PAD, PAD]])
    prefix, labels = reference.shifted(tgt)
    assert prefix.tolist() == [[BOS, 7, 8, 9], [BOS, 5, PAD, PAD]]
    assert labels.tolist() == [[7, 8, 9, EOS], [5, EOS, -100, -100]]


def test_the_positions_are_section_3_5_sinusoids(reference: ModuleType) -> None:
    table = reference.sinusoids(4, 6)
    assert table[0].tolist() == [0, 1, 0, 1, 0, 1]
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…), by hand at pos 3, i = 1
    assert table[3, 2].item() == pytest.approx(math.sin(3 / 10000 ** (2 / 6)), abs=1e-6)
    assert table[3, 3].item() == pytest.approx(math.cos(3 / 10000 ** (2 / 6)), abs=1e-6)


def test_the_reference_has_the_shape_of_attnlab_s_pre_ln_encoder_decoder(
    reference: ModuleType,
) -> None:
    from attnlab.cli.compose import compose_config
    from attnlab.cli.pipeline import build_data, build_task

    cfg = compose_config([*TINY, "model.n_layers=2", "model.norm=pre", "model.tie_embeddings=true"])
    data = build_data(cfg)
    attnlab_model = build_task(cfg, data).model
    model = reference.Reference(data.vocab_size, 16, 2, 2, 2, 32, 0.1, 0.0, norm_first=True)
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in attnlab_model.parameters()
    )


def test_the_attnlab_init_diagnostic_draws_q_k_v_apart_and_zeroes_the_biases(
    reference: ModuleType,
) -> None:
    torch.manual_seed(0)
    model = reference.Reference(100, 64, 4, 1, 1, 128, 0.1, 0.0, norm_first=True)
    stacked = model.transformer.encoder.layers[0].self_attn.in_proj_weight
    assert stacked.abs().max() <= math.sqrt(6 / (64 + 192))  # torch: one 192 × 64 draw
    assert any(bool(p.abs().sum()) for n, p in model.named_parameters() if "linear1.bias" in n)
    bound = math.sqrt(6 / (64 + 64))  # Xavier of each 64 × 64 block
    reference.attnlab_init(model, biases=False)  # --init=qkv: the biases stay torch's
    assert bound * 0.95 < stacked.abs().max() <= bound
    assert any(bool(p.abs().sum()) for n, p in model.named_parameters() if "linear1.bias" in n)
    reference.attnlab_init(model)
    assert bound * 0.95 < stacked.abs().max() <= bound
    assert all(torch.count_nonzero(p) == 0 for n, p in model.named_parameters()
               if n.endswith("bias") and "norm" not in n)  # fmt: skip


def test_a_short_run_writes_a_summary_that_attnlab_compare_reads(
    reference: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    reference.main([str(out), *TINY, "seed=3"])
    run = read_run(out)
    assert run.status == "completed"
    assert run.config["experiment_name"] == "reference_translation"
    assert run.config["seed"] == 3 and run.config["optim"]["lr"] > 0
    assert run.config["model"]["n_layers"] == 1 and run.config["model"]["norm"] == "pre"
    assert 0 <= run.metrics["test/bleu"] <= 100 and math.isfinite(run.metrics["val/loss"])
    assert run.bleu_signature and "tok:13a" in run.bleu_signature
    curve = run.curve("val/loss")
    assert curve is not None
    steps, values = curve
    assert list(steps) == [9, 19]
    assert run.metrics["val/loss"] == pytest.approx(values[-1])  # the last validation
    assert "test/bleu=" in capsys.readouterr().out
    # a second run into the same folder is refused, and the first one's summary is kept
    before = (out / "summary.json").read_text()
    with pytest.raises(SystemExit) as exit_:
        reference.main([str(out), *TINY])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {out}/summary.json exists")
    assert (out / "summary.json").read_text() == before
    assert json.loads(before)["writer"].startswith("experiments/reference_translation.py")
    reference.main(["--init=attnlab", str(tmp_path / "diagnostic"), *TINY])
    assert read_run(tmp_path / "diagnostic").config["experiment_name"] == (
        "reference_translation_attnlab_init"
    )
    reference.main(["--init=qkv", str(tmp_path / "qkv"), *TINY])
    assert read_run(tmp_path / "qkv").config["experiment_name"] == "reference_translation_qkv_init"


def test_a_run_whose_loss_is_not_finite_ends_diverged_and_untested(
    reference: ModuleType, tmp_path: Path
) -> None:
    reference_diverges(reference.main, tmp_path / "run", TINY, "test/bleu")


@pytest.mark.parametrize(
    ("change", "message"),
    [("model.pos=rope", "model.pos=rope: the reference implements pos=sinusoidal only"),
     ("model.norm=sandwich", "model.norm=sandwich: the reference has pre and post only"),
     ("decode.strategy=beam", "decode.strategy=beam: the reference decodes greedily only"),
     ("optim.schedule=wsd", "optim.name=adamw optim.schedule=wsd: the reference trains with "
                            "adamw and a cosine or constant schedule only"),
     ("~decode.max_new_tokens", "decode.max_new_tokens is unset"),
     ("trainer.limit_val_batches=0.5", "trainer.limit_val_batches=0.5: the reference reads it as "
                                       "a count"),
     ("optim.weight_decay=0.1", "optim.weight_decay=0.1: the reference trains without weight "
                                "decay"),
     ("trainer.accumulate_grad_batches=2", "trainer.accumulate_grad_batches=2: the reference "
                                           "implements trainer.accumulate_grad_batches=1 only"),
     ("model.zero_init_residual=true", "model.zero_init_residual=True: the reference implements "
                                       "zero_init_residual=False only"),
     ("trainer.max_epochs=1", "trainer.max_epochs=1 ends the run before trainer.max_steps=20"),
     ("trainer.precision=16-mixed", "trainer.precision=16-mixed: the reference trains in 32 or "
                                    "bf16-mixed")],
)  # fmt: skip
def test_a_setting_the_reference_lacks_is_refused_in_one_line(
    reference: ModuleType, change: str, message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    overrides = [*TINY, change]
    if change.startswith("~"):  # the key left unset
        overrides = [o for o in TINY if not o.startswith(change[1:] + "=")]
    reference_refuses(reference.main, tmp_path / "run", overrides, message, capsys)
