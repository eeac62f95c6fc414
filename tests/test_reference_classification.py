"""experiments/reference_classification.py, the SST-2 gate from outside attnlab's model code:
torch's nn.TransformerEncoder as a BERT-style classifier on attnlab's data for the same
overrides. Checked by hand (mean pooling over the real tokens only), against attnlab's
encoder-only model of the same config (its parameter count), and end to end on synthetic data
(a summary attnlab-compare reads; refusals that leave nothing behind)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from attnlab.compare.runs import read_run
from attnlab.special_tokens import PAD
from conftest import reference_diverges, reference_refuses, study_script

TINY = ["model=encoder_only", "data=majority", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=2", "model.d_ff=32", "model.ffn=gelu", "model.pos=learned",
        "data.train_size=256", "data.val_size=64", "data.test_size=64", "optim.lr=3e-3",
        "optim.schedule=cosine", "optim.betas=[0.9,0.98]", "optim.weight_decay=0.01",
        "optim.warmup_steps=2", "optim.min_lr=0", "trainer.max_steps=20",
        "trainer.val_check_interval=10", "trainer.check_val_every_n_epoch=null",
        "trainer.max_epochs=-1"]  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> Iterator[ModuleType]:
    with study_script("experiments/reference_classification.py", "reference_classification") as m:
        yield m


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_reference_has_the_parameters_of_attnlab_s_encoder_only_model(
    reference: ModuleType, norm: str
) -> None:
    from attnlab.cli.compose import compose_config
    from attnlab.cli.pipeline import build_data, build_task

    cfg = compose_config([*TINY, f"model.norm={norm}"])
    data = build_data(cfg)
    task = build_task(cfg, data)
    attnlab_model, max_len = task.model, int(task.model_cfg.max_len)
    model = reference.Reference(data.vocab_size, 16, 2, 2, 32, 0.1, 0.0, max_len,
                                data.num_classes, norm_first=norm == "pre",
                                activation="gelu")  # fmt: skip
    own = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("head."))
    assert own == attnlab_model.num_params()  # the final LayerNorm with Pre-LN only, as attnlab's


def test_padding_changes_neither_the_pooled_mean_nor_the_logits(reference: ModuleType) -> None:
    torch.manual_seed(0)
    model = reference.Reference(50, 16, 2, 2, 32, 0.0, 0.0, 32, 3, norm_first=True,
                                activation="relu").eval()  # fmt: skip
    tokens = torch.tensor([[7, 8, 9]])
    padded = torch.tensor([[7, 8, 9, PAD, PAD], [5, 6, 7, 8, 9]])
    assert torch.allclose(model(tokens)[0], model(padded)[0], atol=1e-5)
    # the mean over the real tokens, by hand from the encoder's states
    x = model.embedding(tokens) * 4.0 + model.positions(torch.arange(3))  # √16 = 4
    by_hand = model.head(model.encoder(x).mean(1))
    assert torch.allclose(model(tokens), by_hand, atol=1e-5)


def test_weight_decay_falls_on_the_linear_maps_weights_only(reference: ModuleType) -> None:
    from reference_common import adamw

    model = reference.Reference(50, 16, 2, 1, 32, 0.0, 0.0, 32, 3, norm_first=True,
                                activation="gelu")  # fmt: skip
    setting = {"optim.lr": 1e-3, "optim.betas": (0.9, 0.98), "optim.eps": 1e-9,
               "optim.weight_decay": 0.1}  # fmt: skip
    decayed, kept = adamw(model, setting).param_groups
    assert decayed["weight_decay"] == 0.1 and kept["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decayed["params"]) == [
        "encoder.layers.0.linear1.weight", "encoder.layers.0.linear2.weight",
        "encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.out_proj.weight",
        "head.1.weight",
    ]  # fmt: skip
    assert "embedding.weight" in {names[id(p)] for p in kept["params"]}


def test_a_short_run_writes_a_summary_that_attnlab_compare_reads(
    reference: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    reference.main([str(out), *TINY, "seed=3"])
    run = read_run(out)
    assert run.status == "completed"
    assert run.config["experiment_name"] == "reference_classification"
    assert run.config["seed"] == 3 and run.config["optim"]["weight_decay"] == 0.01
    assert run.config["model"]["n_layers"] == 2 and run.config["model"]["ffn"] == "gelu"
    assert 0 <= run.metrics["test/acc"] <= 1 and math.isfinite(run.metrics["test/loss"])
    steps, values = run.curve("val/acc")
    assert list(steps) == [9, 19]
    assert run.metrics["val/acc"] == pytest.approx(values[-1])  # the last validation
    assert "test/acc=" in capsys.readouterr().out
    before = (out / "summary.json").read_text()
    with pytest.raises(SystemExit) as exit_:  # a second run into the same folder is refused
        reference.main([str(out), *TINY])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {out}/summary.json exists")
    assert (out / "summary.json").read_text() == before
    assert json.loads(before)["writer"].startswith("experiments/reference_classification.py")


def test_a_run_whose_loss_is_not_finite_ends_diverged_and_untested(
    reference: ModuleType, tmp_path: Path
) -> None:
    reference_diverges(reference.main, tmp_path / "run", TINY, "test/acc")


@pytest.mark.parametrize(
    ("change", "message"),
    [("model=decoder_only", "model.name=decoder_only: the reference implements name=encoder_only "
                            "only"),
     ("model.pos=rope", "model.pos=rope: the reference implements pos=learned only"),
     ("model.ffn=swiglu", "model.ffn=swiglu: the reference implements ffn=gelu or ffn=relu only"),
     ("model.norm=sandwich", "model.norm=sandwich: the reference has pre and post only"),
     ("trainer.limit_val_batches=0.5", "trainer.limit_val_batches=0.5: the reference reads it as "
                                       "a count"),
     ("optim.schedule=wsd", "optim.name=adamw optim.schedule=wsd: the reference trains with "
                            "adamw and a cosine or constant schedule only"),
     ("trainer.max_epochs=1", "trainer.max_epochs=1 ends the run before trainer.max_steps=20"),
     ("callbacks.model_checkpoint.monitor=val/f1", "callbacks.model_checkpoint.monitor=val/f1 "
                                                   "mode=min: the reference chooses its "
                                                   "checkpoint by val/loss or val/acc"),
     ("+trainer.gradient_clip_algorithm=value", "trainer.gradient_clip_algorithm=value: the "
                                               "reference implements "
                                               "trainer.gradient_clip_algorithm=None only"),
     ("trainer.limit_test_batches=2", "trainer.limit_test_batches=2: the reference implements "
                                      "trainer.limit_test_batches=None only"),
     ("model.attn_impl=math model.attn_softcap=30", "model.attn_softcap=30: the reference "
                                                    "implements "
                               "attn_softcap=None only")],
)  # fmt: skip
def test_a_setting_the_reference_lacks_is_refused_in_one_line(
    reference: ModuleType, change: str, message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    reference_refuses(reference.main, tmp_path / "run", [*TINY, *change.split()], message, capsys)


def test_the_last_step_is_validated_and_chooses_by_the_run_s_checkpoint_monitor(
    reference: ModuleType, tmp_path: Path
) -> None:
    """As attnlab: a run whose max_steps is no multiple of val_check_interval also validates
    at its last step, and the test reads the checkpoint callbacks.model_checkpoint chose."""
    out = tmp_path / "run"
    reference.main([str(out), *TINY, "trainer.max_steps=25", "+callbacks.model_checkpoint="
                    "{monitor: val/acc, mode: max}"])  # fmt: skip
    run = read_run(out)
    assert run.config["callbacks"]["model_checkpoint"] == {"monitor": "val/acc", "mode": "max"}
    steps, values = run.curve("val/acc")
    assert list(steps) == [9, 19, 24]
    assert json.loads((out / "summary.json").read_text())["metrics"]["val/acc"] == values[-1]
