"""FLOPs per token for the configured architecture, and device peaks for MFU."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlab.callbacks.mfu import flops_per_token, forward_flops, mfu, peak_flops, precision_key
from attnlab.models import ModelConfig, build_model


def config(name: str, **overrides: object) -> ModelConfig:
    # math attention: torch's FLOP counter does not see inside the fused CPU kernel
    values = dict(name=name, vocab_size=50, d_model=32, n_heads=4, n_layers=2, dropout=0.0,
                  attn_impl="math")  # fmt: skip
    values.update(overrides)
    return ModelConfig(**values).validated()


def counted_training_flops(cfg: ModelConfig, src_len: int, tgt_len: int, batch: int = 3) -> int:
    torch.manual_seed(0)
    model = build_model(cfg)
    src = torch.randint(6, cfg.vocab_size, (batch, src_len))
    tgt = torch.randint(6, cfg.vocab_size, (batch, tgt_len))
    with FlopCounterMode(display=False) as counter:
        if cfg.name == "encoder_decoder":
            logits = model(src, tgt)
        else:
            logits = model(torch.cat([src, tgt], dim=1))
        logits.sum().backward()
    return counter.get_total_flops() // batch


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("decoder_only", {}),
        ("decoder_only", {"ffn": "swiglu"}),
        ("encoder_only", {"d_ff": 48}),
        ("encoder_decoder", {"n_decoder_layers": 3}),
        ("encoder_decoder", {"tie_embeddings": False}),
    ],
)
def test_training_flops_match_torch_flop_counter(name: str, overrides: dict) -> None:
    cfg = config(name, **overrides)
    src_len, tgt_len = 7, 5
    expected = counted_training_flops(cfg, src_len, tgt_len)
    assert flops_per_token(cfg, src_len, tgt_len) * (src_len + tgt_len) == pytest.approx(expected)


def test_decoder_only_flops_are_six_n_plus_attention_as_in_palm() -> None:
    cfg = config("decoder_only", d_model=64, n_layers=3, vocab_size=100, max_len=256)
    T, d, L = 128, cfg.d_model, cfg.n_layers
    matrices = L * (4 * d * d + 2 * d * cfg.ff_dim) + cfg.vocab_size * d  # tied embedding once
    assert flops_per_token(cfg, 0, T) == pytest.approx(6 * matrices + 12 * L * d * T)


def test_forward_only_is_a_third_of_training() -> None:
    cfg = config("encoder_decoder")
    forward = flops_per_token(cfg, 9, 4, training=False)
    assert 3 * forward == pytest.approx(flops_per_token(cfg, 9, 4))
    assert forward_flops(cfg, 9, 4) == pytest.approx(13 * forward)


def test_longer_sequences_cost_more_per_token_through_attention() -> None:
    cfg = config("decoder_only")
    assert flops_per_token(cfg, 0, 1024) > flops_per_token(cfg, 0, 64)


def test_no_tokens_is_an_error() -> None:
    with pytest.raises(ValueError, match="positive"):
        flops_per_token(config("decoder_only"), 0, 0)


@pytest.mark.parametrize(
    "device,precision,tflops",
    [
        ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312),
        ("NVIDIA A100-PCIE-40GB", "16-mixed", 312),
        ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989),
        ("NVIDIA H100 PCIe", "bf16-mixed", 756),
        ("NVIDIA H200", "bf16-true", 989),
        ("NVIDIA L4", "bf16-mixed", 121),
        ("NVIDIA L40S", "bf16-mixed", 362),
        ("NVIDIA A10G", "bf16-mixed", 125),
        ("Tesla V100-SXM2-16GB", "16-mixed", 125),
        ("NVIDIA GeForce RTX 4090", "bf16-mixed", 165),
        ("NVIDIA A100-SXM4-40GB", "32-true", 19.5),
    ],
)
def test_peak_flops_by_device_name(device: str, precision: str, tflops: float) -> None:
    assert peak_flops(device, precision) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize(
    "device,precision",
    [("cpu", "bf16"), ("x86_64", "32-true"), ("Tesla V100-SXM2-16GB", "bf16-mixed"),
     ("NVIDIA H100 NVL", "bf16-mixed"), ("Some Future GPU", "bf16")],
)  # fmt: skip
def test_no_peak_is_claimed_when_unknown(device: str, precision: str) -> None:
    assert peak_flops(device, precision) is None


def test_lightning_precision_names_map_to_table_keys() -> None:
    assert [precision_key(p) for p in ("bf16-mixed", "16-mixed", "32-true", "tf32", 32)] == [
        "bf16", "fp16", "fp32", "tf32", "fp32",
    ]  # fmt: skip


def test_mfu_is_achieved_over_peak() -> None:
    assert mfu(1000.0, 3e9, 1e13) == pytest.approx(0.3)
    assert mfu(1000.0, 3e9, None) is None


def test_throughput_callback_logs_mfu_when_a_peak_is_given(tmp_path) -> None:  # noqa: ANN001
    import csv

    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from attnlab.callbacks.throughput import TokenThroughput
    from attnlab.data.synthetic import SyntheticDataModule
    from attnlab.tasks import Seq2SeqTask

    data = SyntheticDataModule(kind="copy", train_size=128, val_size=8, test_size=8, batch_size=8)
    data.setup()
    task = Seq2SeqTask(model=dict(name="encoder_decoder", vocab_size=data.vocab_size, d_model=16,
                                  n_heads=2, n_layers=1))  # fmt: skip
    trainer = L.Trainer(
        max_steps=12, log_every_n_steps=2, logger=CSVLogger(tmp_path, name="", version=""),
        callbacks=[TokenThroughput(warmup_steps=1, peak_flops=1e9)], enable_progress_bar=False,
        enable_checkpointing=False, limit_val_batches=0, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(task, datamodule=data)
    with open(tmp_path / "metrics.csv", newline="") as f:
        values = [float(r["perf/mfu"]) for r in csv.DictReader(f) if r.get("perf/mfu")]
    assert values and all(0 < v < 1e3 for v in values)
