"""attnlab-export: Hugging Face folders that transformers loads with the same logits and
greedy output, attnlab's native folder read back bit for bit, and the refusals.

The transformers side runs as one separate process (tests/hf_parity.py) with the folder
``make test`` installs transformers into on its path: installed in the test environment,
torchmetrics would import transformers in every process of the suite.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab import export as attnlab_export
from attnlab import train as attnlab_train
from attnlab.cli.checkpoints import default_checkpoint, load_run_config
from attnlab.data.tokenizers import load_tokenizer
from attnlab.errors import ConfigError
from attnlab.export.hf import (
    BertMapping,
    GPT2Mapping,
    LlamaMapping,
    choose_mapping,
)
from attnlab.export.mapping import half_split_rows
from attnlab.generate import load_model
from attnlab.inference.generation import generate
from attnlab.model_config import ModelConfig
from attnlab.models import build_model
from attnlab.options import DecodeConfig
from disk_fault import DiskFault

REPO = Path(__file__).resolve().parents[1]
HF_PARITY = Path(os.environ.get("ATTNLAB_HF_PARITY", REPO / ".venv" / "hf-parity"))
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak.\n" * 30
PROMPT = "Before we"
NEW_TOKENS = 12
TRAIN = ["trainer.max_steps=60", "trainer.enable_progress_bar=false", "data.batch_size=8",
         "data.block_size=32", "data.eval_blocks=2", "callbacks=none", "model.n_layers=2",
         "model.max_len=64", "model.dropout=0.0"]  # fmt: skip
GPT2_BLOCK = ["model=decoder_only", "model.pos=learned", "model.d_model=32", "model.n_heads=4"]
LLAMA_BLOCK = ["model=decoder_only", "model.norm_type=rmsnorm", "model.pos=rope",
               "model.ffn=swiglu", "model.d_model=32", "model.n_heads=4"]  # fmt: skip
GEMMA_BLOCK = ["model=decoder_only", "model.norm=sandwich", "model.norm_type=rmsnorm",
               "model.pos=rope", "model.ffn=geglu", "model.d_model=32", "model.n_heads=4"]
RUNS = {
    # GPT-2's tanh GELU; attnlab's default √d embedding scale folded in (the tables untied)
    "gpt2": [*GPT2_BLOCK, "model.ffn=gelu_tanh"],
    # exact GELU, unscaled and tied: the export ties too
    "gpt2_tied": [*GPT2_BLOCK, "model.ffn=gelu", "model.scale_embeddings=false"],
    # ReLU under μP at twice the base width: query scale and readout multiplier folded in
    "gpt2_mup": [*GPT2_BLOCK, "model.ffn=relu", "model.param=mup", "model.mup_base_width=16",
                 "model.tie_embeddings=false"],  # fmt: skip
    # no biases (nanoGPT's bias=False): zeros where GPT-2 always has them
    "gpt2_nobias": [*GPT2_BLOCK, "model.ffn=gelu", "model.bias=false"],
    # Primer's squared ReLU: transformers' relu2 activation
    "gpt2_relu2": [*GPT2_BLOCK, "model.ffn=relu2"],
    # grouped-query attention over byte-level BPE
    "llama": [*LLAMA_BLOCK, "model.n_kv_heads=2", "data.tokenizer=bpe", "data.vocab_size=300"],
    # no biases: attention_bias false, no bias tensors in the file
    "llama_nobias": [*LLAMA_BLOCK, "model.bias=false"],
    # GEGLU: Llama's MLP with the tanh GELU as its gate (hidden_act=gelu_pytorch_tanh)
    "llama_geglu": [*LLAMA_BLOCK[:3], "model.ffn=geglu", *LLAMA_BLOCK[4:]],
    # Llama 3's RoPE base: config.json's rope_theta
    "llama_theta": [*LLAMA_BLOCK, "model.rope_theta=500000"],
    # Gemma 2: sandwich RMSNorm, GeGLU, both logit soft-caps (small, so that they bite), GQA
    "gemma2": ["model=decoder_only", "model.norm=sandwich", "model.norm_type=rmsnorm",
               "model.pos=rope", "model.ffn=geglu", "model.d_model=32", "model.n_heads=4",
               "model.n_kv_heads=2", "model.attn_impl=math", "model.attn_softcap=2.0",
               "model.final_softcap=3.0"],  # fmt: skip
    # Gated DeltaNet in every layer: Qwen3.5's text model, all of its layers linear attention
    "qwen35": ["model=decoder_only", "model.norm_type=rmsnorm", "model.pos=none",
               "model.ffn=swiglu", "model.attention=gated_deltanet", "model.bias=false",
               "model.d_model=32", "model.n_heads=4", "model.delta_chunk=8"],
    # Gemma 2 with a sliding-window layer then a global one (layer_types), the window biting
    "gemma2_hybrid": [*GEMMA_BLOCK, "model.attention=hybrid",
                      "model.layer_pattern=[sliding_window,full]", "model.window=8"],
    # Gemma 3: query and key norms, RoPE bases 1M global and 100 local (small, so it bites)
    "gemma3": [*GEMMA_BLOCK, "model.qk_norm=true", "model.n_kv_heads=2",
               "model.attention=hybrid", "model.layer_pattern=[sliding_window,full]",
               "model.window=8", "model.rope_theta=1000000", "model.rope_theta_local=100"],
    # a masked LM in BERT's layout: Post-LN, learned positions, the embedding norm
    "bert": ["model=encoder_only", "model.norm=post", "model.pos=learned", "model.ffn=gelu",
             "model.embed_norm=true", "model.d_model=32", "model.n_heads=4"],  # fmt: skip
}
ENCODERS = {"bert"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export_runs")
    text = root / "text.txt"
    text.write_text(TEXT)
    common = [*TRAIN, "data=text", f"data.path={text}", f"data.cache_dir={root / 'cache'}"]
    made = {}
    for name, overrides in RUNS.items():
        run_dir = root / name
        code = attnlab_train.main([*common, *overrides, f"hydra.run.dir={run_dir}"])
        assert code == 0, name
        made[name] = run_dir
    return made


def attnlab_side(
    run_dir: Path, encoder: bool
) -> tuple[torch.Tensor, torch.Tensor, list[list[int]], list[int]]:
    """(input ids, attnlab's logits or an encoder's states, its greedy continuation, the
    prompt's ids)."""
    cfg = load_run_config(run_dir, [])
    tokenizer = load_tokenizer(run_dir / "tokenizer.json")
    model = load_model(cfg, default_checkpoint(run_dir), tokenizer.vocab_size, "cpu", "lm")
    torch.manual_seed(0)
    ids = torch.randint(6, tokenizer.vocab_size, (2, 40))
    prompt = torch.tensor([tokenizer.encode(PROMPT)])
    with torch.no_grad():
        if encoder:
            return ids, model.hidden(ids), [[]], prompt[0].tolist()
        logits = model(ids)
        decode = DecodeConfig(strategy="greedy", max_new_tokens=NEW_TOKENS)
        greedy = generate(model, prompt, decode).tolist()
    return ids, logits, greedy, prompt[0].tolist()


def export(run_dir: Path, fmt: str, out: Path) -> None:
    code = attnlab_export.main([f"run_dir={run_dir}", f"format={fmt}", f"out={out}"])
    assert code == 0 and (out / "model.safetensors").is_file() and (out / "README.md").is_file()


@pytest.fixture(scope="module")
def hf_results(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not (HF_PARITY / "transformers").is_dir():
        pytest.skip(f"no transformers for the parity tests at {HF_PARITY}; make test installs it")
    root = tmp_path_factory.mktemp("exported")
    cases, expected = [], {}
    for name, run_dir in runs.items():
        export(run_dir, "hf", root / name)
        ids, logits, greedy, prompt = attnlab_side(run_dir, name in ENCODERS)
        expected[name] = (logits, greedy, prompt)
        new = 0 if name in ENCODERS else NEW_TOKENS
        cases += [{"name": name, "folder": str(root / name), "ids": ids.tolist(),
                   "text": TEXT[:200], "max_new_tokens": new},
                  {"name": f"{name}.prompt", "folder": str(root / name), "ids": [prompt],
                   "text": PROMPT, "max_new_tokens": new}]  # fmt: skip
    spec = root / "cases.json"
    spec.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(HF_PARITY), "TRANSFORMERS_VERBOSITY": "error",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    script = REPO / "tests" / "hf_parity.py"
    done = subprocess.run([sys.executable, str(script), str(spec), str(root)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {"root": root, "results": json.loads((root / "results.json").read_text()),
            "expected": expected, "runs": runs}  # fmt: skip


@pytest.mark.parametrize("name,hf_class", [("gpt2", "GPT2LMHeadModel"),
                                           ("gpt2_tied", "GPT2LMHeadModel"),
                                           ("gpt2_mup", "GPT2LMHeadModel"),
                                           ("gpt2_nobias", "GPT2LMHeadModel"),
                                           ("gpt2_relu2", "GPT2LMHeadModel"),
                                           ("llama", "LlamaForCausalLM"),
                                           ("llama_nobias", "LlamaForCausalLM"),
                                           ("llama_geglu", "LlamaForCausalLM"),
                                           ("llama_theta", "LlamaForCausalLM"),
                                           ("gemma2", "Gemma2ForCausalLM"),
                                           ("qwen35", "Qwen3_5ForCausalLM"),
                                           ("gemma2_hybrid", "Gemma2ForCausalLM"),
                                           ("gemma3", "Gemma3ForCausalLM"),
                                           ("bert", "BertModel")])  # fmt: skip
def test_transformers_computes_the_same_outputs_and_greedy_continuation(
    hf_results: dict, name: str, hf_class: str
) -> None:
    from safetensors.torch import load_file

    result = hf_results["results"][name]
    assert result["class"] == hf_class
    # every tensor in the file is used and none is made up by transformers
    assert result["loading"].get("missing_keys", []) == []
    assert result["loading"].get("unexpected_keys", []) == []
    assert result["loading"].get("mismatched_keys", []) == []
    logits, greedy, prompt = hf_results["expected"][name]
    theirs = load_file(str(hf_results["root"] / f"{name}.safetensors"))["logits"]
    assert theirs.shape == logits.shape
    assert torch.allclose(theirs, logits, atol=1e-5, rtol=0), (theirs - logits).abs().max()
    assert logits.std() > 0.1  # a trained model, not a constant
    if name in ENCODERS:
        return  # BertModel returns states; it does not generate
    on_prompt = hf_results["results"][f"{name}.prompt"]
    assert on_prompt["generated"][0][: len(greedy[0])] == greedy[0]
    assert len(greedy[0]) == NEW_TOKENS


@pytest.mark.parametrize("name", list(RUNS))
def test_the_exported_tokenizer_encodes_as_the_run_does(hf_results: dict, name: str) -> None:
    tokenizer = load_tokenizer(hf_results["runs"][name] / "tokenizer.json")
    result = hf_results["results"][name]
    assert result["text_ids"] == tokenizer.encode(TEXT[:200])
    assert result["decoded"] == TEXT[:200]


def test_the_model_card_says_what_was_trained_and_what_was_folded(
    hf_results: dict,
) -> None:
    card = (hf_results["root"] / "gpt2_mup" / "README.md").read_text()
    assert "library_name: transformers" in card
    assert "attnlab-train " in card and "model.param=mup" in card
    assert "| val/loss |" in card and "| model.ffn | relu |" in card
    assert "readout multiplier 0.5" in card and "query scale" in card
    config = json.loads((hf_results["root"] / "gpt2_tied" / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["activation_function"] == "gelu"
    assert json.loads((hf_results["root"] / "gpt2" / "config.json").read_text())[
        "tie_word_embeddings"] is False  # fmt: skip


def test_native_export_reads_back_bit_for_bit(runs: dict[str, Path], tmp_path: Path) -> None:
    run_dir = runs["llama"]
    export(run_dir, "native", tmp_path / "native")
    model, tokenizer, task = attnlab_export.load_native(tmp_path / "native")
    cfg = load_run_config(run_dir, [])
    original = load_model(cfg, default_checkpoint(run_dir), tokenizer.vocab_size, "cpu", "lm")
    assert task == "lm" and tokenizer.encode(PROMPT) == load_tokenizer(
        run_dir / "tokenizer.json").encode(PROMPT)  # fmt: skip
    for key, value in original.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    ids = torch.randint(6, tokenizer.vocab_size, (2, 20))
    with torch.no_grad():
        assert torch.equal(model(ids), original(ids))
    assert not list((tmp_path / "native").glob("*.ckpt")) and not list(
        (tmp_path / "native").glob("*.pt"))  # fmt: skip


def test_half_split_rows_turn_interleaved_pairs_into_halves() -> None:
    assert half_split_rows(2, 4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


GEMMA = {"norm": "sandwich", "norm_type": "rmsnorm", "pos": "rope", "ffn": "geglu",
         "attn_impl": "math", "attn_softcap": 50.0, "final_softcap": 30.0}


def config_with(**values: object) -> ModelConfig:
    base = {"name": "decoder_only", "vocab_size": 40, "d_model": 32, "n_heads": 4,
            "pos": "learned"}  # fmt: skip
    return ModelConfig.from_dict({**base, **values}, strict=False)  # base keys rnn does not read


@pytest.mark.parametrize(
    "values,named",
    [
        ({"pos": "alibi"}, "model.pos=alibi"),
        ({"pos": "sinusoidal"}, "model.pos=sinusoidal"),
        ({"norm": "deepnorm"}, "model.norm=deepnorm"),
        ({"norm": "sandwich"}, "model.norm=sandwich"),
        ({"norm": "post"}, "model.norm=post"),
        # no Hugging Face class has DyT; Olmo2's reordered norm comes with a whole-width QK-norm
        ({"norm_type": "dyt"}, "model.norm_type=dyt"),
        ({"pos": "rope", "norm_type": "dyt", "ffn": "swiglu"}, "model.norm_type=dyt"),
        ({"norm": "olmo2"}, "model.norm=olmo2"),
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu", "norm": "olmo2",
          "qk_norm": True}, "model.norm=olmo2"),  # fmt: skip
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "relu2"}, "model.ffn=relu2"),
        ({"ffn": "geglu"}, "model.norm_type=layernorm"),
        ({"attention": "sliding_window"}, "model.attention=sliding_window"),
        ({"attention": "sigmoid"}, "model.attention=sigmoid"),
        ({"attention": "differential"}, "model.attention=differential"),
        ({"attention": "mamba2", "pos": "none"}, "model.attention=mamba2"),
        # Qwen3.5's Gated DeltaNet model has no biases
        ({"attention": "gated_deltanet", "pos": "none", "norm_type": "rmsnorm", "ffn": "swiglu"},
         "model.bias=true"),
        ({"attention": "mla", "pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu"},
         "model.attention=mla"),
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu", "attention": "sigmoid"},
         "model.attention=sigmoid"),  # fmt: skip
        ({"qk_norm": True}, "model.qk_norm=true"),
        ({"n_kv_heads": 2}, "model.n_kv_heads=2"),
        ({"block": "parallel"}, "model.block=parallel"),
        ({"pos": "rope", "norm_type": "rmsnorm"}, "model.ffn=relu"),
        ({"pos": "rope", "ffn": "swiglu"}, "model.norm_type=layernorm"),
        ({"name": "encoder_decoder"}, "model=encoder_decoder"),
        ({"name": "vit", "image_size": 8, "patch_size": 4}, "model=vit"),
        ({"name": "rnn"}, "model=rnn"),
        ({"name": "encoder_only", "norm": "post"}, "model.embed_norm=false"),
        ({"name": "encoder_only", "embed_norm": True}, "model.norm=pre"),
        ({"name": "encoder_only", "norm": "post", "embed_norm": True, "pos": "rope"},
         "model.pos=rope"),  # fmt: skip
        # no norm over the embeddings in GPT-2 or Llama (logits off by up to 1.4 otherwise)
        ({"embed_norm": True}, "model.embed_norm=true"),
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu", "embed_norm": True},
         "model.embed_norm=true"),  # fmt: skip
        # attnlab's attention hides the keys of pad_id; the exported pad token is <pad>, 0
        ({"pad_id": 7}, "model.pad_id=7"),
        # a mixture of experts is not mapped onto a Hugging Face MoE class (format=native)
        ({"ffn": "moe"}, "model.ffn=moe"),
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "moe"}, "model.ffn=moe"),
        ({"name": "encoder_only", "norm": "post", "embed_norm": True, "ffn": "moe"},
         "model.ffn=moe"),  # fmt: skip
        ({"name": "encoder_only", "norm": "post", "embed_norm": True, "pad_id": 7},
         "model.pad_id=7"),  # fmt: skip
        # Gemma 2's soft-capping: GPT-2, Llama and BERT compute uncapped logits
        # partial rotary (GPT-NeoX's rotary_pct): Llama rotates every feature of a head
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu", "rotary_fraction": 0.5},
         "model.rotary_fraction=0.5"),  # fmt: skip
        ({"final_softcap": 30.0}, "model.final_softcap=30.0 is Gemma 2's logit soft-capping, "
         "which only Gemma2ForCausalLM computes, and model.norm=pre"),
        # Gemma 2 scales its embeddings by √d_model and rotates every feature of a head
        ({**GEMMA, "scale_embeddings": False}, "model.scale_embeddings=false"),
        ({**GEMMA, "rotary_fraction": 0.5}, "model.rotary_fraction=0.5"),
        # μP: embeddings scaled by √base, and Gemma 3's q_norm after its query scale
        ({**GEMMA, "param": "mup", "mup_base_width": 16}, "model.param=mup"),
        ({**GEMMA, "qk_norm": True, "param": "mup", "mup_base_width": 16}, "model.param=mup"),
        ({"attn_impl": "math", "attn_softcap": 50.0}, "model.attn_softcap=50.0"),
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu", "final_softcap": 30.0},
         "model.final_softcap=30.0"),  # fmt: skip
        ({"name": "encoder_only", "norm": "post", "embed_norm": True, "attn_impl": "flex",
          "attn_softcap": 50.0}, "model.attn_softcap=50.0"),  # fmt: skip
        # per-layer kinds: Gemma's layer_types hold a sliding window or full attention only
        ({**GEMMA, "attention": "hybrid", "layer_pattern": ["longformer", "full"]},
         "model.layer_pattern's longformer"),
        ({"pos": "rope", "norm_type": "rmsnorm", "ffn": "swiglu", "attention": "hybrid"},
         "model.attention=hybrid .it needs full. has no equivalent in LlamaForCausalLM"),
        ({"name": "encoder_only", "norm": "post", "embed_norm": True, "attention": "hybrid"},
         "model.attention=hybrid"),  # ModernBERT's class is not mapped
        # a RoPE base per layer type is Gemma 3's, whose layers norm queries and keys
        ({**GEMMA, "attention": "hybrid", "rope_theta_local": 10000.0},
         "model.rope_theta_local=10000.0 is Gemma 3's RoPE base of the local layers, which "
         "only Gemma3ForCausalLM computes, and model.qk_norm=false"),
    ],
)
def test_options_without_an_equivalent_are_refused_by_name(values: dict, named: str) -> None:
    try:
        cfg = config_with(**values)
    except ConfigError:  # a combination attnlab itself refuses never reaches the export
        pytest.skip(f"{values} is not a valid attnlab model")
    with pytest.raises(ConfigError, match=named.replace("=", "=").replace("+", r"\+")):
        choose_mapping(cfg, "lm")


def test_the_two_families_are_chosen_by_their_options() -> None:
    assert choose_mapping(config_with(ffn="gelu_tanh"), "lm") is GPT2Mapping
    llama = config_with(pos="rope", norm_type="rmsnorm", ffn="swiglu", n_kv_heads=1)
    assert choose_mapping(llama, "lm") is LlamaMapping
    assert choose_mapping(config_with(ffn="relu2"), "lm") is GPT2Mapping
    assert choose_mapping(config_with(pos="rope", norm_type="rmsnorm", ffn="geglu"),
                          "lm") is LlamaMapping  # fmt: skip
    bert = config_with(name="encoder_only", norm="post", embed_norm=True)
    assert choose_mapping(bert, "classification") is BertMapping
    assert choose_mapping(config_with(**GEMMA), "lm").hf_class == "Gemma2ForCausalLM"
    assert choose_mapping(config_with(**GEMMA, qk_norm=True),
                          "lm").hf_class == "Gemma3ForCausalLM"  # fmt: skip
    with pytest.raises(ConfigError, match="classification"):
        choose_mapping(config_with(), "classification")


@pytest.mark.parametrize("attention,keys,types", [
    ("full", {}, ["full_attention"] * 3),
    ("sliding_window", {"window": 8}, ["sliding_attention"] * 3),
    ("hybrid", {"window": 8, "layer_pattern": ["full", "sliding_window"]},
     ["full_attention", "sliding_attention", "full_attention"]),
])  # fmt: skip
def test_gemma_writes_each_layers_kind_and_the_window(attention: str, keys: dict,
                                                      types: list[str]) -> None:  # fmt: skip
    cfg = config_with(**{**GEMMA, "attention": attention, "n_layers": 3, **keys})
    config = choose_mapping(cfg, "lm")(build_model(cfg)).config()
    assert config["layer_types"] == types
    assert config["sliding_window"] == keys.get("window", cfg.max_len)


def test_bad_export_commands_get_one_line_and_leave_the_disk_alone(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    cases = [
        ([f"run_dir={runs['gpt2']}", "format=onnx"], "format=onnx"),
        ([f"run_dir={runs['gpt2']}", "format=hf", f"out={taken}"], "already exists"),
        ([f"run_dir={tmp_path / 'nowhere'}", "format=hf"], "no such directory"),
        ([f"run_dir={runs['gpt2']}", "format=hf", "model.pos=rope"], "not an attnlab-export"),
    ]
    for argv, message in cases:
        assert attnlab_export.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert (taken / "keep.txt").read_text() == "mine" and len(list(taken.iterdir())) == 1
    assert not (runs["gpt2"] / "export").exists()


def export_code(run_dir: Path, fmt: str, out: Path) -> int:
    return attnlab_export.main([f"run_dir={run_dir}", f"format={fmt}", f"out={out}"])


@pytest.mark.parametrize("fmt", ["hf", "native"])
def test_every_file_of_an_export_is_written_where_a_full_disk_is_an_os_error(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """The weights and the tokenizer too, not only the JSON files: safetensors and
    tokenizers serialise in memory and Python writes, so a full disk is never their own
    error type (SafetensorError) with a traceback."""
    counter = DiskFault(tmp_path, errno.ENOSPC, at=None)
    with monkeypatch.context() as patch:
        counter.install(patch)
        assert export_code(runs["gpt2"], fmt, tmp_path / "out") == 0
    names = {Path(p).name.lstrip(".").removesuffix(".tmp") for p in counter.paths}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= names, names


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
@pytest.mark.parametrize("fmt", ["hf", "native"])
def test_a_full_or_read_only_disk_while_exporting_is_one_line_and_leaves_nothing(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], fmt: str, code: int,
) -> None:  # fmt: skip
    counter = DiskFault(tmp_path / "count", code, at=None)
    with monkeypatch.context() as patch:
        counter.install(patch)
        assert export_code(runs["gpt2"], fmt, tmp_path / "count" / "out") == 0
    capsys.readouterr()
    for at in range(len(counter.paths)):
        parent = tmp_path / f"at{at}"
        parent.mkdir()
        with monkeypatch.context() as patch:
            DiskFault(parent, code, at).install(patch)
            assert export_code(runs["gpt2"], fmt, parent / "out") == 2, at
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (at, err)
        assert os.strerror(code) in err[0] and str(parent) in err[0], err[0]
        assert "nothing was exported" in err[0] and "out=" in err[0], err[0]
        assert list(parent.iterdir()) == [], at  # the staging folder is gone, no out folder
