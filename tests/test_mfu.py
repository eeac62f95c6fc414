"""FLOPs per token for the configured architecture, and device peaks for MFU."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlab.callbacks.mfu import flops_per_token, forward_flops, mfu, peak_flops, precision_key
from attnlab.models import ModelConfig, build_model
from attnlab.models import flops as flops_module
from attnlab.models.flops import attended_pairs, attention_flops
from attnlab.nn.attention_kinds import (
    BigBirdAttention,
    LongformerAttention,
    SlidingWindowAttention,
)


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
        ("decoder_only", {"ffn": "geglu", "norm": "olmo2"}),
        ("encoder_only", {"ffn": "relu2", "norm_type": "dyt"}),
        ("decoder_only", {"ffn": "moe", "moe_experts": 4, "moe_shared_experts": 1}),
        ("encoder_only", {"ffn": "moe", "moe_experts": 3, "moe_top_k": 1, "d_ff": 24}),
        ("encoder_only", {"d_ff": 48}),
        ("encoder_decoder", {"n_decoder_layers": 3}),
        ("encoder_decoder", {"tie_embeddings": False}),
        ("decoder_only", {"attention": "sigmoid"}),
        ("encoder_only", {"attention": "sigmoid", "attn_impl": "sdpa"}),
        ("decoder_only", {"attention": "differential"}),
        ("encoder_decoder", {"attention": "differential"}),
        ("decoder_only", {"attention": "mla", "pos": "rope"}),
        ("decoder_only", {"attention": "mla", "pos": "rope", "kv_latent_rank": 12,
                          "q_latent_rank": 20, "rope_head_dim": 6}),
        ("encoder_decoder", {"attention": "mla", "pos": "alibi", "q_latent_rank": 8}),
        # each layer counted as its own kind
        ("decoder_only", {"attention": "hybrid", "layer_pattern": ["sigmoid", "full*2"],
                          "n_layers": 4}),
        ("encoder_decoder", {"attention": "hybrid", "layer_pattern": ["full", "differential"],
                             "n_layers": 3}),
        ("encoder_only", {"attention": "hybrid", "layer_pattern": ["mla", "full"]}),
    ],
)
def test_training_flops_match_torch_flop_counter(name: str, overrides: dict) -> None:
    cfg = config(name, **overrides)
    src_len, tgt_len = 7, 5
    expected = counted_training_flops(cfg, src_len, tgt_len)
    assert flops_per_token(cfg, src_len, tgt_len) * (src_len + tgt_len) == pytest.approx(expected)


# a token mixer's own sizes, given its chunk length
MIXER_KEYS = {"mamba2": lambda chunk: {"ssm_state": 8, "ssm_chunk": chunk},
              "gated_deltanet": lambda chunk: {"delta_chunk": chunk}}  # fmt: skip


@pytest.mark.parametrize("chunk", [4, 5, 64], ids=["whole-chunks", "ragged-last-chunk",
                                                "one-chunk"])  # fmt: skip
@pytest.mark.parametrize("attention", ["mamba2", "gated_deltanet"])
def test_mixer_training_flops_match_torch_flop_counter(attention: str, chunk: int) -> None:
    """The projections, the depthwise conv and the chunked form's matrix products (SSD's;
    Gated DeltaNet's, its UT transform included), padding included. torch's counter ignores
    ``groups`` in a convolution's backward (it counts a depthwise conv's gradients as a
    dense conv's), so the conv's backward is taken as twice its forward, as for every other
    product."""
    cfg = config("decoder_only", attention=attention, pos="none", attn_impl="sdpa",
                 **MIXER_KEYS[attention](chunk))  # fmt: skip
    torch.manual_seed(0)
    model, batch = build_model(cfg), 3
    tokens = torch.randint(6, cfg.vocab_size, (batch, 12))
    with FlopCounterMode(display=False) as counter:
        model(tokens).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    conv = counts[torch.ops.aten.convolution]
    expected = counter.get_total_flops() - counts[torch.ops.aten.convolution_backward] + 2 * conv
    assert flops_per_token(cfg, 7, 5) * 12 == pytest.approx(expected // batch)


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


@pytest.mark.parametrize("causal", [True, False])
def test_sparse_kinds_count_the_pairs_of_their_pattern(
    causal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    T, w, g, b = 45, 6, 3, 4
    window = [(i, j) for i in range(T) for j in range(T)
              if abs(i - j) < w and (j <= i or not causal)]  # fmt: skip
    # Beltagy et al. 2020, §3.1: the window, plus g global tokens that see and are seen by all
    longformer = [(i, j) for i in range(T) for j in range(T)
                  if (abs(i - j) < w or j < g or i < g) and (j <= i or not causal)]  # fmt: skip
    name = "decoder_only" if causal else "encoder_only"
    bigbird = config(name, attention="bigbird", attn_block=b, n_random=2, max_len=64)
    expected = {
        SlidingWindowAttention: (config(name, attention="sliding_window", window=w), len(window)),
        LongformerAttention: (config(name, attention="longformer", window=w, n_global=g),
                              len(longformer)),
        BigBirdAttention: (bigbird, int(BigBirdAttention(bigbird, causal)
                                        .mask(T, T).sum())),  # the random blocks: its mask
    }  # fmt: skip
    monkeypatch.setattr(flops_module, "_MASK_ELEMENTS", 7 * T)  # a kind of one's own: 7 rows
    for kind, (cfg, pairs) in expected.items():
        assert attended_pairs(cfg, T, causal) == pairs
        items = tuple(cfg.to_dict().items())
        assert flops_module._mask_count.__wrapped__(kind, items, causal, T) == pairs


def test_full_attention_counts_every_key_even_when_causal() -> None:
    assert attended_pairs(config("decoder_only"), 100, causal=True) == 100 * 100


T, W, B, G, R, K, D, HEADS = 256, 32, 8, 2, 1, 32, 32, 2


def cpu_sdpa_flops(q: tuple, k: tuple, v: tuple, *args: object, **kwargs: object) -> int:
    """QKᵀ and AV of the fused CPU kernel, which torch's counter does not see into; the
    sparse kinds call it on (B, H, n_blocks, rows, d) blocks."""
    return 2 * 2 * math.prod(q[:-1]) * k[-2] * q[-1]


# (model, attention, keys per query its SDPA/CPU kernel computes at most, at T, w, b, g, r, k
# above); flops.py counts fewer, the pairs of the pattern, and the test holds both bounds
KERNEL_KEYS = [
    ("decoder_only", "sliding_window", B + W - 1),  # b query rows × their b + w − 1 keys
    ("encoder_only", "sliding_window", B + 2 * W - 2),
    ("decoder_only", "longformer", B + W - 1 + G),  # + the g global keys in every block
    ("encoder_only", "longformer", B + 2 * W - 2 + G + G),  # + g global rows over T keys
    ("decoder_only", "bigbird", (3 + R) * B),  # global, previous, own + r random blocks, whole
    ("encoder_only", "bigbird", (4 + R) * B + B),  # + the next block; + b global rows
    ("encoder_only", "linformer", 2 * K),  # exact: k projected keys, and E·K, F·V
    ("encoder_only", "linear", D // HEADS + 0.5),  # exact: d_head² per head, φ(Q)ᵀZ
    ("decoder_only", "linear", 64 + D // HEADS + 0.5),  # + the quadratic form in 64-chunks
]  # fmt: skip


@pytest.mark.parametrize("name,attention,kernel_keys", KERNEL_KEYS)
def test_sparse_kinds_count_their_pattern_and_the_kernel_does_no_less(
    name: str, attention: str, kernel_keys: float
) -> None:
    cfg = config(name, attention=attention, attn_impl="sdpa", d_model=D, n_heads=HEADS,
                 window=W, attn_block=B, n_global=G, n_random=R, linformer_k=K, max_len=T,
                 pos="learned")  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    tokens = torch.randint(6, cfg.vocab_size, (1, T))
    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa_flops}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter, torch.no_grad():
        model(tokens)
    counted, counted_here = counter.get_total_flops(), forward_flops(cfg, 0, T)
    kernel_excess = cfg.n_layers * (
        2 * 2 * D * T * kernel_keys - attention_flops(cfg, T, causal=name == "decoder_only")
    )
    assert counted_here <= counted <= counted_here + kernel_excess


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
        ("NVIDIA H200 NVL", "bf16-mixed", 835.5),
        ("NVIDIA H200 NVL", "tf32", 417.5),
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


def test_h200_nvl_is_not_given_the_sxm_peak() -> None:
    assert peak_flops("NVIDIA H200 NVL", "bf16") < peak_flops("NVIDIA H200", "bf16")


def lightning_peak(monkeypatch: pytest.MonkeyPatch, device: str, key: str) -> float | None:
    """Lightning's public ``get_available_flops`` for a CUDA device of that name."""
    import warnings

    from lightning.fabric.utilities.throughput import get_available_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": "tfloat32"}[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its warning for a device it does not know
        return get_available_flops(torch.device("cuda"), dtype)


@pytest.mark.parametrize("device", [
    "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA L4",
    "NVIDIA A10G", "Tesla T4", "Tesla V100-SXM2-16GB",
])  # fmt: skip
def test_lightning_peak_agrees_with_the_table_where_it_gives_a_dense_one(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("bf16", "fp16", "tf32"):
        ours = peak_flops(device, key)
        if ours is not None:
            assert lightning_peak(monkeypatch, device, key) == pytest.approx(ours, rel=5e-3)


@pytest.mark.parametrize("device", [
    "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA A10", "NVIDIA H100 NVL", "NVIDIA L40S",
    "NVIDIA GeForce RTX 4090",
])  # fmt: skip
def test_lightning_peak_lacks_the_dense_bf16_peak_the_table_keeps(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why attnlab keeps its own table (attnlab.callbacks.mfu): should this fail, Lightning
    has the device's dense peak and the table's row can go."""
    ours, theirs = peak_flops(device, "bf16"), lightning_peak(monkeypatch, device, "bf16")
    same = theirs == ours if None in (theirs, ours) else theirs == pytest.approx(ours, rel=5e-3)
    assert not same, f"Lightning now gives {device} the table's bf16 peak ({ours})"


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
