"""model=conv: ConvS2S (Gehring et al. 2017) and the gated convolutional LM (Dauphin et al. 2017).

The gated convolution, multi-step attention, the parameter count and the FLOP count are
checked against hand computations; decoding against recomputation; padding, causality and
every parameter's gradient directly.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlab.errors import ConfigError
from attnlab.inference.generation import DecodeConfig, generate
from attnlab.models import ModelConfig, build_model
from attnlab.models.convolutional import ConvSeq2Seq
from attnlab.nn.convolution import ConvMemory, GatedConvolution, GradScale, MultiStepAttention
from attnlab.special_tokens import BOS, PAD
from composed_runs import train_fast
from decoding_inputs import FORCED, VOCAB, close, left_padded_prompts, sources, step_logits


def make(task: str = "seq2seq", **overrides: object) -> ConvSeq2Seq:
    values = dict(name="conv", vocab_size=VOCAB, d_model=16, conv_channels=12, n_layers=2,
                  kernel_size=3, dropout=0.0, pos="learned")  # fmt: skip  (conf/model/conv.yaml)
    values.update(overrides)
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict(values), task)
    assert isinstance(model, ConvSeq2Seq)
    return model.eval()


def decoder_input() -> torch.Tensor:
    return torch.cat([torch.full((3, 1), BOS), FORCED], dim=1)


# -- (1) the blocks against hand computations --------------------------------------------------
@pytest.mark.parametrize("causal", [True, False])
@torch.no_grad()
def test_the_gated_convolution_is_a_times_sigmoid_b_over_each_window(causal: bool) -> None:
    torch.manual_seed(0)
    C, k, T = 3, 3, 5
    block = GatedConvolution(C, k, dropout=0.0, causal=causal).eval()
    x = torch.randn(1, T, C)
    W, b = block.conv.weight, block.conv.bias  # (2C, C, k): the weight-normalised W
    left = k - 1 if causal else (k - 1) // 2
    padded = torch.cat([torch.zeros(left, C), x[0], torch.zeros(k - 1 - left, C)])
    for i in range(T):
        window = padded[i : i + k]  # inputs i − left … i − left + k − 1
        y = torch.einsum("ocj,jc->o", W, window) + b  # [A B] = W * X + b_w
        A, B = y[:C], y[C:]
        close(block(x)[0, i], A * torch.sigmoid(B))
    if causal:
        close(block.window(padded[None, T - 1 : T - 1 + k]), block(x)[:, -1:])


@torch.no_grad()
def test_multi_step_attention_is_equations_one_and_two_with_the_sqrt_m_scale() -> None:
    torch.manual_seed(0)
    C, f, S = 4, 6, 5
    attention = MultiStepAttention(C, f)
    h, g = torch.randn(1, 2, C), torch.randn(1, 2, f)
    z, e = torch.randn(1, S, f), torch.randn(1, S, f)
    real = torch.tensor([[True, True, True, False, False]])
    m = 3
    memory = ConvMemory(z, (z + e) * math.sqrt(0.5), real, torch.tensor([[[math.sqrt(m)]]]))
    out, weights = attention(h, g, memory)
    Wd, bd = attention.query.weight, attention.query.bias
    Wc, bc = attention.back.weight, attention.back.bias
    for i in range(2):
        d = (Wd @ h[0, i] + bd + g[0, i]) * math.sqrt(0.5)
        scores = torch.stack([d @ z[0, j] for j in range(m)])
        a = torch.exp(scores) / torch.exp(scores).sum()  # eq. 1, over the real source
        close(weights[0, i, :m], a)
        assert torch.equal(weights[0, i, m:], torch.zeros(S - m))
        c = sum(a[j] * (z[0, j] + e[0, j]) * math.sqrt(0.5) for j in range(m))  # eq. 2
        c = c * m * math.sqrt(1 / m)  # §3.4
        close(out[0, i], (h[0, i] + Wc @ c + bc) * math.sqrt(0.5))


def test_the_encoder_gradient_is_divided_by_the_attention_layers_reading_it() -> None:
    x = torch.ones(3, requires_grad=True)
    GradScale.apply(x, 0.25).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 0.25))
    model = make(n_layers=4)
    assert model.encoder.readers == 4  # one attention per decoder layer


def test_initialisation_is_section_3_5_and_every_layer_is_weight_normalised() -> None:
    model = make(d_model=64, conv_channels=96, kernel_size=5, dropout=0.2, n_layers=1)
    conv = model.encoder.layers[0].conv.conv
    assert hasattr(conv.parametrizations, "weight")  # weight normalisation
    k, C, p = 5, 96, 0.8  # p: the probability of keeping an input
    assert conv.weight.std().item() == pytest.approx(math.sqrt(4 * p / (k * C)), rel=0.05)
    into = model.decoder.into  # fed by dropped-out embeddings, not a GLU
    assert into.weight.std().item() == pytest.approx(math.sqrt(p / 64), rel=0.05)
    assert model.embedding.weight[1:].std().item() == pytest.approx(0.1, rel=0.05)
    assert torch.equal(model.embedding.weight[PAD], torch.zeros(64))


def test_the_parameter_count_is_a_hand_count_of_the_layer_shapes() -> None:
    f, C, k, V, L, T = 16, 12, 3, VOCAB, 2, 512  # T: model.max_len learned positions
    conv = 2 * C * C * k + 2 * C + 2 * C  # W, b_w and weight norm's g per output channel
    linear_fc = lambda n_in, n_out: n_in * n_out + n_out + n_out  # noqa: E731  (+ g)
    ends = linear_fc(f, C) + linear_fc(C, f)
    attention = linear_fc(C, f) + linear_fc(f, C)
    encoder = T * f + ends + L * conv
    decoder = T * f + ends + L * (conv + attention)
    tied = V * f + V  # one embedding for both sides and the output; the output bias
    assert make().num_params() == tied + encoder + decoder
    untied = 2 * V * f + linear_fc(f, V)
    assert make(tie_embeddings=False).num_params() == untied + encoder + decoder
    assert make("lm").num_params() == V * f + V + T * f + ends + L * conv


@pytest.mark.parametrize(("task", "src_len"), [("seq2seq", 6), ("lm", 0)])
def test_flops_are_the_matrix_products_torch_counts(task: str, src_len: int) -> None:
    model = make(task)
    tokens = torch.randint(6, VOCAB, (1, 5))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        if task == "seq2seq":
            model(torch.randint(6, VOCAB, (1, src_len)), tokens)
        else:
            model(tokens)
    assert ConvSeq2Seq.flops(model.cfg, src_len, 5) == counter.get_total_flops()


# -- (2) causality, padding --------------------------------------------------------------------
@pytest.mark.parametrize("task", ["seq2seq", "lm"])
@torch.no_grad()
def test_a_decoder_output_does_not_depend_on_later_positions(task: str) -> None:
    model = make(task, n_layers=3)
    tokens = decoder_input()
    changed = tokens.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % VOCAB
    run = (lambda t: model(sources(), t)) if task == "seq2seq" else model
    close(run(changed)[:, :4], run(tokens)[:, :4])
    assert not torch.allclose(run(changed)[:, 4:], run(tokens)[:, 4:])


@torch.no_grad()
def test_a_source_padded_further_gives_the_same_logits() -> None:
    model = make(n_layers=3)
    longer = torch.nn.functional.pad(sources(), (0, 3), value=PAD)
    close(model(longer, decoder_input()), model(sources(), decoder_input()))
    alone = model(sources()[2:, :2], decoder_input()[2:])  # unpadded
    close(alone, model(sources(), decoder_input())[2:])


def test_a_left_padded_lm_prompt_gives_the_logits_of_the_unpadded_one() -> None:
    model = make("lm", n_layers=3)
    batched = step_logits(model, left_padded_prompts(), use_cache=True)
    alone = step_logits(model, left_padded_prompts()[2:, 4:], use_cache=True, forced=FORCED[2:])
    close(batched[2:], alone)


@pytest.mark.parametrize("pool", ["mean", "max"])
@torch.no_grad()
def test_pooling_ignores_padding(pool: str) -> None:
    model = make("classification", pool=pool)
    src = sources()
    close(model.pooled(torch.nn.functional.pad(src, (0, 3), value=PAD)), model.pooled(src))
    close(model.pooled(src[2:, :2]), model.pooled(src)[2:])


# -- (3) the cache: each layer's last k − 1 inputs ---------------------------------------------
@pytest.mark.parametrize("kernel_size", [1, 2, 3, 5])
def test_cached_seq2seq_decoding_gives_the_logits_of_full_recomputation(kernel_size: int) -> None:
    model = make(kernel_size=kernel_size, n_layers=3)
    cached = step_logits(model, sources(), use_cache=True)
    close(cached, step_logits(model, sources(), use_cache=False))
    with torch.no_grad():  # and the teacher-forced forward
        close(cached, model(sources(), decoder_input()))


@pytest.mark.parametrize("kernel_size", [2, 4])
def test_cached_lm_decoding_gives_the_logits_of_full_recomputation(kernel_size: int) -> None:
    model = make("lm", kernel_size=kernel_size, n_layers=3)
    prompts = left_padded_prompts()
    close(step_logits(model, prompts, True), step_logits(model, prompts, False))
    with torch.no_grad():  # an unpadded prompt: the logits of the forward over it
        whole = model(torch.cat([prompts[:1], FORCED[:1]], dim=1))[:, 5:]
    close(step_logits(model, prompts[:1], True, FORCED[:1]), whole)


@pytest.mark.parametrize(("task", "inputs"), [("seq2seq", sources), ("lm", left_padded_prompts)])
def test_beam_size_one_equals_greedy_and_a_wider_beam_runs(task: str, inputs) -> None:  # noqa: ANN001
    model = make(task)
    greedy = generate(model, inputs(), DecodeConfig(strategy="greedy", max_new_tokens=8))
    one = DecodeConfig(strategy="beam", beam_size=1, length_penalty=0.0, max_new_tokens=8)
    beam = generate(model, inputs(), one)
    width = max(greedy.size(1), beam.size(1))
    pad = torch.nn.functional.pad
    assert torch.equal(
        pad(greedy, (0, width - greedy.size(1))), pad(beam, (0, width - beam.size(1)))
    )
    wide = generate(model, inputs(), DecodeConfig(strategy="beam", beam_size=3, max_new_tokens=8))
    assert wide.size(0) == 3 and wide.size(1) <= 8
    sampled = generate(model, inputs(), DecodeConfig(strategy="sample", max_new_tokens=8))
    assert sampled.size(0) == 3


def test_generation_stops_at_the_position_table() -> None:
    model = make("lm", max_len=8)
    out = generate(model, left_padded_prompts(), DecodeConfig(strategy="greedy",
                                                               max_new_tokens=20))  # fmt: skip
    assert out.size(1) <= 8 - left_padded_prompts().size(1)


# -- (4) every task builds and learns: every parameter gets a gradient -------------------------
TASKS = [
    ("seq2seq", {}),
    ("seq2seq", {"tie_embeddings": "output", "kernel_size": 5, "pos": "sinusoidal"}),
    ("seq2seq", {"tie_embeddings": False, "conv_channels": None}),
    ("lm", {"pos": "none"}),
    ("classification", {"pool": "mean"}),
    ("classification", {"pool": "max"}),
]


@pytest.mark.parametrize(("task", "options"), TASKS)
def test_one_backward_step_reaches_every_parameter(task: str, options: dict) -> None:
    model = make(task, dropout=0.1, **options).train()
    src = sources()
    if task == "seq2seq":
        loss = model(src, decoder_input()).logsumexp(-1).mean()
    elif task == "lm":
        loss = model(src).logsumexp(-1).mean()
    else:
        loss = model.pooled(src).pow(2).mean()
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing and torch.isfinite(loss)


def test_tied_embeddings_share_one_table() -> None:
    model = make(tie_embeddings=True)
    assert model.lm_head.weight is model.embedding.weight is model.encoder.embedding.weight
    model = make(tie_embeddings="output")
    assert model.lm_head.weight is model.embedding.weight
    assert model.encoder.embedding.weight is not model.embedding.weight


# -- (5) options that do not apply are refused, naming the key ---------------------------------
@pytest.mark.parametrize(("overrides", "key"), [
    ({"pos": "rope"}, "model.pos=rope"),
    ({"pos": "alibi"}, "model.pos=alibi"),
    ({"pos": "learned_2d"}, "model.pos=learned_2d"),
    ({"init": "xavier"}, "model.init=xavier"),
    ({"activation_checkpointing": True}, "model.activation_checkpointing=true"),
    ({"bias": False}, "model.bias=false"),
    ({"pool": "cls"}, "model.pool=cls"),
    ({"attention": "sliding_window"}, "model.attention=sliding_window"),
    ({"kernel_size": 0}, "model.kernel_size=0"),
    ({"conv_channels": -4}, "model.conv_channels=-4"),
    ({"pos": "sinusoidal", "d_model": 15}, "model.pos=sinusoidal"),
])  # fmt: skip
def test_bad_options_are_refused_naming_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ModelConfig.from_dict(dict(name="conv", vocab_size=VOCAB, **overrides))


def test_image_data_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="model=conv .*use model=vit"):
        build_model(ModelConfig.from_dict(dict(name="conv", vocab_size=VOCAB)),
                    "image_classification")  # fmt: skip


# -- (6) through the real configs --------------------------------------------------------------
@pytest.mark.parametrize("data", ["reverse", "majority"])
def test_trains_one_fast_dev_run_on_seq2seq_and_classification(tmp_path: Path, data: str) -> None:
    result = train_fast(["model=conv", f"data={data}"], tmp_path / "run")
    assert result["status"] == "completed"
    assert torch.isfinite(torch.tensor(result["metrics"]["test/loss"]))
