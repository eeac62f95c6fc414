"""Training-dynamics diagnostics and the divergence guard."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from attnlab.callbacks.attention_maps import attention_entropy
from attnlab.callbacks.diagnostics import (
    TrainingDiagnostics,
    initial_gradient_profile,
    last_first_ratio,
)
from attnlab.callbacks.divergence import DivergenceGuard
from attnlab.data.synthetic import SyntheticDataModule
from attnlab.tasks import Seq2SeqTask
from composed_runs import compose_run as compose

TINY = dict(d_model=32, n_heads=4, n_layers=2, dropout=0.1)
SMALL_SYNTHETIC = ["data.train_size=64", "data.val_size=16", "data.test_size=16"]


def reverse_data(batch_size: int = 16) -> SyntheticDataModule:
    data = SyntheticDataModule(kind="reverse", train_size=64, val_size=16, test_size=16,
                               batch_size=batch_size, seed=0)  # fmt: skip
    data.setup("fit")
    return data


def fit_tiny(run_dir: Path, callbacks: list[L.Callback], steps: int = 3) -> list[dict[str, str]]:
    """Train a 2+2-layer encoder-decoder on reverse for ``steps`` steps; metrics.csv rows."""
    L.seed_everything(0, verbose=False)
    data = reverse_data()
    task = Seq2SeqTask(model={"name": "encoder_decoder", "vocab_size": data.vocab_size, **TINY})
    trainer = L.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, callbacks=callbacks,
        logger=CSVLogger(run_dir, name="", version=""), default_root_dir=run_dir,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, log_every_n_steps=1, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(task, datamodule=data)
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def diagnosed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, str]]]:
    run_dir = tmp_path_factory.mktemp("diag")
    rows = fit_tiny(run_dir, [TrainingDiagnostics(every_n_steps=2, image_every_n_steps=100)])
    return run_dir, rows


def expected_keys() -> set[str]:
    keys = {"diag/grad_ratio_last_first"}
    for stack in ("encoder", "decoder"):
        for i in (0, 1):
            name = f"{stack}.{i}"
            sublayers = ["attn", "ffn", "block"] + (["cross_attn"] if stack == "decoder" else [])
            keys |= {f"diag/grad_norm/{name}.{s}" for s in sublayers}
            keys |= {f"diag/resid_rms/{name}", f"diag/update_ratio/{name}"}
            attns = [name, f"{name}.cross"] if stack == "decoder" else [name]
            for a in attns:
                keys |= {f"diag/attn_entropy/{a}{h}" for h in ("", ".h0", ".h1", ".h2", ".h3")}
    return keys


def test_diagnostics_log_every_layer_metric_at_step_0_and_every_k_steps(diagnosed_run) -> None:
    _, rows = diagnosed_run
    diag_rows = {int(r["step"]): r for r in rows if r.get("diag/grad_ratio_last_first")}
    assert sorted(diag_rows) == [0, 2]
    for row in diag_rows.values():
        logged = {k for k, v in row.items() if k.startswith("diag/") and v != ""}
        assert logged == expected_keys()
        assert all(math.isfinite(float(row[k])) for k in logged)
        assert all(float(row[k]) > 0 for k in logged if "update_ratio" in k or "grad_norm" in k)


def test_attention_maps_are_saved_as_png_for_every_layer_at_start_and_end(diagnosed_run) -> None:
    run_dir, _ = diagnosed_run
    for step in (0, 3):
        for label in ("encoder", "decoder", "decoder-cross"):
            for i in (0, 1):
                png = run_dir / "diagnostics" / f"attention_step{step}_{label}_layer{i}.png"
                assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_diagnostics_do_not_change_training(tmp_path: Path, diagnosed_run) -> None:
    _, with_diag = diagnosed_run
    without = fit_tiny(tmp_path, [])
    loss = lambda rows: [r["train/loss"] for r in rows if r.get("train/loss")]  # noqa: E731
    assert loss(with_diag) == loss(without)


def test_post_ln_gradients_grow_toward_the_output_at_init_unlike_pre_ln() -> None:
    """Xiong et al. 2020, §3.3: at initialisation Post-LN's gradients are largest at the top."""
    batch = next(iter(reverse_data(batch_size=32).train_dataloader()))
    ratios = {}
    for norm in ("post", "pre"):
        torch.manual_seed(0)
        model = dict(name="decoder_only", vocab_size=16, d_model=64, n_layers=12, norm=norm)
        ratios[norm] = last_first_ratio(initial_gradient_profile(Seq2SeqTask(model=model), batch))
    assert ratios["post"] > 2 * ratios["pre"]


def test_attention_entropy_is_log_length_when_uniform_and_zero_when_one_hot() -> None:
    uniform = torch.full((2, 3, 5, 8), 1 / 8)
    one_hot = torch.nn.functional.one_hot(torch.zeros(2, 3, 5, dtype=torch.long), 8).float()
    assert torch.allclose(attention_entropy(uniform), torch.full((3,), math.log(8)))
    assert torch.equal(attention_entropy(one_hot), torch.zeros(3))
    real = torch.tensor([[True] * 5, [False] * 5])  # the second example is all padding
    assert torch.allclose(attention_entropy(uniform, real), torch.full((3,), math.log(8)))


def test_loss_far_above_its_running_minimum_diverges_only_after_warmup() -> None:
    guard = DivergenceGuard(max_ratio=10, warmup_steps=2)
    assert guard.check(1.0, 0) is None
    assert guard.check(50.0, 1) is None  # still warming up
    assert guard.check(9.0, 2) is None
    assert "exploded at step 3" in guard.check(11.0, 3)
    assert guard.check(float("inf"), 0).startswith("non-finite loss at step 0")
    assert DivergenceGuard().check(1e30, 10**6) is None  # max_ratio off by default


def test_default_and_diagnostics_callbacks_include_the_divergence_guard(tmp_path: Path) -> None:
    for callbacks in ("default", "diagnostics"):
        cfg = compose([f"callbacks={callbacks}"], tmp_path)
        assert cfg.callbacks.divergence_guard._target_.endswith("DivergenceGuard")
    assert cfg.callbacks.diagnostics.every_n_steps == 50


def test_nan_loss_ends_the_run_as_diverged_with_finite_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.train import run_job

    original = Seq2SeqTask.training_step

    def nan_at_step_3(self, batch, batch_idx):  # noqa: ANN001, ANN202
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step == 3 else loss

    monkeypatch.setattr(Seq2SeqTask, "training_step", nan_at_step_3)
    cfg = compose([
        "trainer.max_steps=8", "trainer.enable_progress_bar=false", "trainer.limit_val_batches=1",
        "data.train_size=64", "data.val_size=8", "data.test_size=8", "data.batch_size=8",
        "model.d_model=32",
    ], tmp_path)  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:  # a single run that diverged exits with 1
        run_job(cfg)
    assert exit_info.value.code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged"
    assert summary["error"].startswith("non-finite loss at step 3")
    assert summary["stopped_at_step"] == 4  # steps 0–3 taken; step 3's update skipped
    assert not any(k.startswith("test/") for k in summary["metrics"])  # no test after divergence
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    weights = [t for t in ckpt["state_dict"].values() if t.is_floating_point()]
    assert all(torch.isfinite(t).all() for t in weights)
    moments = [t for state in ckpt["optimizer_states"][0]["state"].values() for t in state.values()]
    assert moments and all(torch.isfinite(t).all() for t in moments)


@pytest.mark.parametrize(
    "model,data",
    [("decoder_only", "reverse"), ("encoder_only", "majority"), ("encoder_decoder", "majority"),
     ("decoder_only", "shakespeare_char"), ("encoder_only", "shakespeare_char")],
)  # fmt: skip
def test_diagnostics_run_for_every_architecture_and_task(
    tmp_path: Path, request: pytest.FixtureRequest, model: str, data: str
) -> None:
    if data == "shakespeare_char":
        request.getfixturevalue("shared_data")  # skips when the real data is absent
    from attnlab.cli.run import train

    cfg = compose([
        f"model={model}", f"data={data}", "callbacks=diagnostics",
        "callbacks.diagnostics.image_every_n_steps=null", "trainer.max_steps=1",
        "trainer.limit_val_batches=0", "trainer.enable_progress_bar=false", "test=false",
        "model.d_model=32", "data.batch_size=8",
        *(SMALL_SYNTHETIC if data != "shakespeare_char" else ["data.block_size=32"]),
    ], tmp_path)  # fmt: skip
    assert train(cfg, tmp_path)["status"] == "completed"
    with open(tmp_path / "metrics.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r.get("diag/grad_ratio_last_first"))
    stack = "encoder" if model == "encoder_only" else "decoder"
    for key in (f"diag/attn_entropy/{stack}.1", f"diag/resid_rms/{stack}.0",
                f"diag/update_ratio/{stack}.1", f"diag/grad_norm/{stack}.1.ffn"):  # fmt: skip
        assert math.isfinite(float(row[key])), key
