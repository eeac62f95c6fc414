"""model=rnn: the LSTM/GRU/RNN baselines with Bahdanau and Luong attention."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.inference.generation import DecodeConfig, generate
from attnlab.models import ModelConfig, RecurrentModel, build_model
from attnlab.nn.recurrent import BahdanauAttention, LuongAttention, RecurrentStack, attend
from attnlab.special_tokens import BOS, PAD
from composed_runs import compose_run, train_fast
from decoding_inputs import FORCED, VOCAB, close, left_padded_prompts, sources, step_logits

# (rnn_attention, input_feeding): every decoder the study compares
DECODERS = [("bahdanau", False), ("luong_dot", False), ("luong_general", False),
            ("luong_dot", True), ("luong_general", True), ("none", False)]  # fmt: skip


def make(task: str = "seq2seq", **overrides: object) -> RecurrentModel:
    values = dict(name="rnn", vocab_size=VOCAB, d_model=16, n_layers=2, dropout=0.0)
    values.update(overrides)
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict(values), task)
    assert isinstance(model, RecurrentModel)
    return model.eval()


# -- (1) the recurrent stack against torch's own ----------------------------------------------
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_a_decoder_layer_stepped_one_token_at_a_time_equals_torch_over_the_sequence(
    cell: str,
) -> None:
    model = make(cell=cell, n_layers=1, rnn_attention="bahdanau")
    stack: RecurrentStack = model.decoder.rnn
    d_in, d = stack.rnn.input_size, stack.rnn.hidden_size
    reference = type(stack.rnn)(d_in, d, batch_first=True)
    reference.load_state_dict(stack.rnn.state_dict())
    x = torch.randn(3, 7, d_in)
    h0 = torch.randn(1, 3, d)
    state = (h0, torch.randn(1, 3, d)) if cell == "lstm" else (h0,)
    with torch.no_grad():
        expected, final = reference(x, state if cell == "lstm" else h0)
        outputs = []
        for t in range(x.size(1)):
            out, state = stack(x[:, t : t + 1], state)
            outputs.append(out)
    close(torch.cat(outputs, dim=1), expected)
    close(state[-1], final[-1] if cell == "lstm" else final)


def test_packed_padding_gives_the_final_state_of_the_last_real_token() -> None:
    stack = RecurrentStack("lstm", 4, 5, 2, 0.0)
    x = torch.randn(2, 6, 4)
    with torch.no_grad():
        _, (h, c) = stack(x, lengths=torch.tensor([6, 3]))
        _, (h_short, c_short) = stack(x[1:, :3])
    close(h[:, 1:], h_short)
    close(c[:, 1:], c_short)


# -- (2) the attention scores against the papers' formulas ------------------------------------
def memory() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries (2, 3, 4), encoder states (2, 5, 4), real (2, 5) with two padded positions."""
    gen = torch.Generator().manual_seed(3)
    real = torch.ones(2, 5, dtype=torch.bool)
    real[1, 3:] = False
    return torch.randn(2, 3, 4, generator=gen), torch.randn(2, 5, 4, generator=gen), real


@torch.no_grad()
def test_bahdanau_score_is_v_tanh_of_w_s_plus_u_h() -> None:
    s, h, real = memory()
    attention = BahdanauAttention(4)
    W, U, v = attention.W.weight, attention.U.weight, attention.v.weight[0]
    scores = attention.scores(s, attention.keys(h), real)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                expected = v @ torch.tanh(W @ s[b, i] + U @ h[b, j])
                got = scores[b, i, j]
                assert got == float("-inf") if not real[b, j] else torch.isclose(got, expected)


@pytest.mark.parametrize("general", [False, True])
@torch.no_grad()
def test_luong_scores_are_dot_and_general_products(general: bool) -> None:
    h_t, h_s, real = memory()
    attention = LuongAttention(4, general=general)
    W_a = attention.W_a.weight if general else torch.eye(4)
    scores = attention.scores(h_t, attention.keys(h_s), real)
    expected = torch.einsum("bti,ij,bsj->bts", h_t, W_a, h_s)  # h_tᵀ W_a h̄_s
    close(scores[real[:, None].expand_as(scores)], expected[real[:, None].expand_as(scores)])
    assert torch.isinf(scores[1, :, 3:]).all()


def test_attention_weights_padding_zero_and_an_all_padding_source_gives_zero_context() -> None:
    _, h, real = memory()
    real[0] = False
    scores = torch.randn(2, 3, 5).masked_fill(~real[:, None], float("-inf"))
    context, weights = attend(scores, h, real)
    assert torch.equal(context[0], torch.zeros(3, 4)) and not context.isnan().any()
    close(weights[1].sum(-1), torch.ones(3))
    assert torch.equal(weights[1, :, 3:], torch.zeros(3, 2))


# -- (3) the cache is the recurrent state ------------------------------------------------------
@pytest.mark.parametrize(("attention", "feeding"), DECODERS)
def test_cached_seq2seq_decoding_gives_the_logits_of_full_recomputation(
    attention: str, feeding: bool
) -> None:
    model = make(rnn_attention=attention, input_feeding=feeding)
    cached = step_logits(model, sources(), use_cache=True)
    close(cached, step_logits(model, sources(), use_cache=False))
    with torch.no_grad():  # and the teacher-forced forward
        decoder_in = torch.cat([torch.full((3, 1), BOS), FORCED], dim=1)
        close(cached, model(sources(), decoder_in))


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_cached_lm_decoding_gives_the_logits_of_full_recomputation(cell: str) -> None:
    model = make("lm", cell=cell)
    prompts = left_padded_prompts()
    close(step_logits(model, prompts, True), step_logits(model, prompts, False))
    with torch.no_grad():  # an unpadded prompt: the logits of the forward over it
        whole = model(torch.cat([prompts[:1], FORCED[:1]], dim=1))[:, 5:]
    close(step_logits(model, prompts[:1], True, FORCED[:1]), whole)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cached_decoding_holds_for_every_cell_and_direction(cell: str, bidirectional: bool) -> None:
    model = make(cell=cell, bidirectional=bidirectional, rnn_attention="luong_general")
    close(step_logits(model, sources(), True), step_logits(model, sources(), False))


# -- (4) greedy and beam search drive the state ------------------------------------------------
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


# -- (5) padding never changes a real position -------------------------------------------------
@pytest.mark.parametrize(("attention", "feeding"), DECODERS)
@torch.no_grad()
def test_a_source_padded_further_gives_the_same_logits(attention: str, feeding: bool) -> None:
    model = make(rnn_attention=attention, input_feeding=feeding)
    src = sources()
    longer = torch.nn.functional.pad(src, (0, 3), value=PAD)
    decoder_in = torch.cat([torch.full((3, 1), BOS), FORCED], dim=1)
    close(model(longer, decoder_in), model(src, decoder_in))


def test_a_left_padded_lm_prompt_gives_the_logits_of_the_unpadded_one() -> None:
    model = make("lm")
    batched = step_logits(model, left_padded_prompts(), use_cache=True)
    alone = step_logits(model, left_padded_prompts()[2:, 4:], use_cache=True, forced=FORCED[2:])
    close(batched[2:], alone)


@pytest.mark.parametrize("pool", ["last", "attention", "mean"])
@pytest.mark.parametrize("bidirectional", [True, False])
@torch.no_grad()
def test_pooling_ignores_padding(pool: str, bidirectional: bool) -> None:
    model = make("classification", pool=pool, bidirectional=bidirectional)
    src = sources()
    close(model.pooled(torch.nn.functional.pad(src, (0, 3), value=PAD)), model.pooled(src))
    close(model.pooled(src[2:, :2]), model.pooled(src)[2:])


# -- (6) every task builds and learns: every parameter gets a gradient -------------------------
TASKS = [
    *[("seq2seq", {"rnn_attention": a, "input_feeding": f}) for a, f in DECODERS],
    ("seq2seq", {"rnn_attention": "none", "bidirectional": False, "cell": "gru"}),
    ("seq2seq", {"tie_embeddings": "output", "cell": "rnn"}),
    ("lm", {}),
    *[("classification", {"pool": p}) for p in ("last", "attention", "mean")],
]


@pytest.mark.parametrize(("task", "options"), TASKS)
def test_one_backward_step_reaches_every_parameter(task: str, options: dict) -> None:
    model = make(task, dropout=0.1, **options).train()
    src = sources()
    if task == "seq2seq":
        loss = model(src, torch.cat([torch.full((3, 1), BOS), FORCED], dim=1)).logsumexp(-1).mean()
    elif task == "lm":
        loss = model(src).logsumexp(-1).mean()
    else:
        loss = model.pooled(src).pow(2).mean()
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing and torch.isfinite(loss)


def test_tied_output_layer_is_the_target_embedding() -> None:
    model = make(tie_embeddings=True)
    assert model.lm_head.weight is model.embedding.weight is model.src_embedding.weight
    model = make(tie_embeddings="output")
    assert model.lm_head.weight is model.embedding.weight
    assert model.src_embedding.weight is not model.embedding.weight


def test_flops_count_gates_attention_and_output() -> None:
    cfg = ModelConfig.from_dict(dict(name="rnn", vocab_size=10, d_model=8, n_layers=1,
                                     rnn_attention="luong_dot", bidirectional=False))  # fmt: skip
    S, T, d, V = 5, 3, 8, 10
    lstm = 2 * 4 * (d + d) * d  # per token and layer
    expected = S * lstm + T * lstm + T * (2 * 2 * S * d + 2 * 2 * d * d) + T * 2 * d * V
    assert RecurrentModel.flops(cfg, S, T) == expected
    gru = ModelConfig.from_dict({**cfg.to_dict(), "cell": "gru"})
    assert RecurrentModel.flops(gru, 0, T) == T * 2 * 3 * (d + d) * d + T * 2 * d * V  # an LM


# -- (7) options that do not apply are refused, naming the key ---------------------------------
@pytest.mark.parametrize(("overrides", "key"), [
    ({"input_feeding": True, "rnn_attention": "bahdanau"}, "model.input_feeding=true"),
    ({"input_feeding": True, "rnn_attention": "none"}, "model.rnn_attention=luong_dot"),
    ({"n_encoder_layers": 2, "n_decoder_layers": 1}, "model.n_encoder_layers=2"),
    ({"activation_checkpointing": True}, "model.activation_checkpointing=true"),
    ({"bias": False}, "model.bias=false"),
    ({"pool": "decoder_start"}, "model.pool=decoder_start"),
    ({"cell": "transformer"}, "model.cell=transformer"),
    ({"rnn_attention": "multihead"}, "model.rnn_attention=multihead"),
])  # fmt: skip
def test_bad_options_are_refused_naming_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ModelConfig.from_dict(dict(name="rnn", vocab_size=VOCAB, **overrides))


@pytest.mark.parametrize("key", ["norm", "pos", "ffn", "n_heads", "attn_impl", "qk_norm"])
def test_a_transformer_key_is_refused_naming_who_reads_it(key: str) -> None:
    value = {"norm": "post", "pos": "rope", "ffn": "swiglu", "n_heads": 2, "attn_impl": "math",
             "qk_norm": True}[key]  # fmt: skip
    with pytest.raises(ConfigError, match=rf"model\.{key}=.* applies to .*decoder_only.*, "
                       r"not model=rnn; remove it"):  # fmt: skip
        make(**{key: value})
    assert make().stacks() == {}


# -- (8) through the real configs --------------------------------------------------------------
@pytest.mark.parametrize("data", ["reverse", "majority"])
def test_trains_one_fast_dev_run_on_seq2seq_and_classification(tmp_path: Path, data: str) -> None:
    result = train_fast(["model=rnn", f"data={data}"], tmp_path / "run")
    assert result["status"] == "completed"
    assert torch.isfinite(torch.tensor(result["metrics"]["test/loss"]))


def test_trains_one_fast_dev_run_as_a_character_language_model(tmp_path: Path) -> None:
    from attnlab.cli.run import train

    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 40)
    cfg = compose_run([
        "model=rnn", "model.d_model=16", "model.n_layers=1", "data=text", f"data.path={text}",
        "data.block_size=16", "data.eval_blocks=4", "data.samples_per_epoch=16",
        f"data.cache_dir={tmp_path / 'cache'}", "trainer.fast_dev_run=true",
        "trainer.enable_progress_bar=false", "callbacks=none",
    ], tmp_path / "run")  # fmt: skip
    result = train(cfg, tmp_path / "run")
    assert result["status"] == "completed"
    assert torch.isfinite(torch.tensor(result["metrics"]["test/loss"]))


def test_bahdanau_attention_learns_to_reverse_short_sequences(tmp_path: Path) -> None:
    from attnlab.cli.run import train

    cfg = compose_run([
        "model=rnn", "model.rnn_attention=bahdanau", "model.d_model=64", "model.n_layers=1",
        "model.dropout=0.0", "data=reverse", "data.n_symbols=5", "data.max_len=5",
        "data.train_size=2000", "data.val_size=64", "data.test_size=64", "data.batch_size=32",
        "trainer.max_epochs=3", "optim.lr=1e-2", "optim.warmup_steps=20",
        "task.decode_every_n_epochs=100", "trainer.enable_progress_bar=false", "callbacks=none",
    ], tmp_path / "run")  # fmt: skip
    result = train(cfg, tmp_path / "run")  # ~190 steps, a few seconds
    assert result["metrics"]["test/exact_match"] >= 0.9
