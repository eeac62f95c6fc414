"""The bad-input battery: each case ends with exit code 2 and one ``error:`` line naming the
problem, with no traceback, and nothing already on disk lost or overwritten.

Table-driven, in this process, through the console entry points (``main``) that
``attnlab-train``, ``attnlab-eval``, ``attnlab-generate`` and ``attnlab-compare``
call. Each table row is (arguments, text the error line must contain).
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from attnlab import eval as attnlab_eval
from attnlab import generate as attnlab_generate
from attnlab import train as attnlab_train
from attnlab.compare import main as compare_main
from cli_runs import TINY
from composed_runs import TINY_MODEL

EARLIER = Path("train") / "runs" / "2000-01-01_00-00-00_00000000"

CONFIG_CASES: dict[str, tuple[list[str], str]] = {
    "norm": (["model.norm=mid"], "model.norm=mid"),
    "pos": (["model.pos=nonsense"], "model.pos=nonsense"),
    "ffn": (["model.ffn=tanh"], "model.ffn=tanh"),
    "norm_type": (["model.norm_type=batchnorm"], "model.norm_type=batchnorm"),
    "attn_impl": (["model.attn_impl=flash9"], "model.attn_impl=flash9"),
    "init": (["model.init=he"], "model.init=he"),
    "heads_divide": (["model.d_model=30", "model.n_heads=4"], "model.d_model=30"),
    "no_layers": (["model.n_layers=0"], "model.n_layers=0"),
    "dropout_text": (["model.dropout=abc"], "model.dropout=abc must be a number"),
    "dropout_range": (["model.dropout=1.5"], "model.dropout=1.5"),
    "tie": (["model.tie_embeddings=maybe"], "model.tie_embeddings=maybe"),
    "max_len": (["model.max_len=0"], "model.max_len=0"),
    "d_model_float": (["model.d_model=16.5"], "model.d_model=16.5 must be an integer"),
    "lr_text": (["optim.lr=abc"], "optim.lr=abc must be a number"),
    "lr_negative": (["optim.lr=-1"], "optim.lr=-1"),
    "betas_one": (["optim.betas=[0.9]"], "optim.betas=[0.9]"),
    "betas_range": (["optim.betas=[0.9,1.5]"], "optim.betas"),
    "schedule": (["optim.schedule=linear"], "optim.schedule=linear"),
    "warmup": (["optim.warmup_steps=-5"], "optim.warmup_steps=-5"),
    "eps": (["optim.eps=0"], "optim.eps=0"),
    "weight_decay": (["optim.weight_decay=-0.1"], "optim.weight_decay=-0.1"),
    "fused_text": (["optim.fused=sometimes"], "optim.fused=sometimes"),
    "max_steps": (["trainer.max_steps=foo"], "trainer.max_steps=foo must be an integer"),
    "max_epochs": (["trainer.max_epochs=abc"], "trainer.max_epochs=abc"),
    "accumulate": (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0"),
    "clip": (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1"),
    "precision": (["trainer.precision=8-bit"], "trainer.precision=8-bit"),
    "log_every": (["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps=0"),
    "trainer_typo": (["+trainer.max_step=3"], "did you mean trainer.max_steps?"),
    "seed_negative": (["seed=-1"], "seed=-1"),
    "data_seed_negative": (["data=reverse", "data.seed=-3"], "data.seed=-3 must be an integer in"),
    "addition_too_long": (["data=addition", "data.max_len=19"], "data.max_len=19 digits is too"),
    "seed_text": (["seed=abc"], "seed=abc must be an integer"),
    "train_flag": (["train=maybe"], "train=maybe must be true or false"),
    "task_name": (["task_name=a/b"], "task_name=a/b"),
    "label_smoothing": (["task.label_smoothing=2"], "task.label_smoothing=2"),
    "mlm_probability": (["task.mlm_probability=0"], "task.mlm_probability=0"),
    "decode_every": (["task.decode_every_n_epochs=0"], "task.decode_every_n_epochs=0"),
    "task_typo": (["+task.label_smothing=0.1"], "did you mean task.label_smoothing?"),
    "beam_size": (["decode.beam_size=0"], "decode.beam_size=0"),
    "top_p": (["decode.top_p=2"], "decode.top_p=2"),
    "temperature": (["decode.temperature=-1"], "decode.temperature=-1"),
    "top_k": (["decode.top_k=0"], "decode.top_k=0"),
    "strategy": (["decode.strategy=nucleus"], "decode.strategy=nucleus"),
    "top_level_typo": (["+sed=1"], "did you mean seed?"),
    "model_typo_plus": (["+model.nrom=pre"], "did you mean model.norm?"),
    "model_typo": (["model.nrom=pre"], "did you mean model.norm?"),
    "paths_typo": (["paths.log_dr=x"], "did you mean paths.log_dir?"),
    "data_unknown": (["+data.foo=1"], "data.foo is not a config key"),
    "batch_negative": (["data.batch_size=-1"], "data.batch_size=-1"),
    "batch_text": (["data.batch_size=abc"], "data.batch_size=abc must be an integer"),
    "data_target": (["data._target_=builtins.open"], "data._target_=builtins.open is refused"),
    "unknown_model": (["model=nosuch"], "model/nosuch"),
    "encoder_only_seq2seq": (["model=encoder_only", "data=reverse"], "model=encoder_only"),
    "sweep_without_m": (["model.norm=pre,post"], "add -m"),
    "sweep_bad_value": (["-m", "model.norm=pre,mid"], "model.norm=mid"),
    "sweep_by_hydra_mode_bad_value": (["hydra.mode=MULTIRUN", "model.norm=pre,mid"],
                                      "model.norm=mid"),  # fmt: skip
    "two_hydra_modes": (["-m", "model.norm=pre,post", "--cfg", "hydra"],
                        "--cfg and --multirun cannot be combined"),  # fmt: skip
    "grammar": (["tags=[a"], "quote the value"),
    "resume_single_run": (["resume=true"], "resume=true continues a sweep"),
    "wandb_log_model_offline": (
        ["logger=wandb", "logger.wandb.log_model=true"],
        "an offline run cannot do",
    ),  # fmt: skip
    "lightning_refuses": (["trainer.limit_train_batches=1.5"], "limit_train_batches"),
    # TINY's epoch has 2 training batches: Lightning's fit refuses it once it counts them
    # (optim.decay_steps set: the schedule does not count them first)
    "val_check_past_an_epoch": (
        ["optim.decay_steps=10", "trainer.val_check_interval=5"], "val_check_interval",
    ),  # fmt: skip
    # optim.decay_steps unset: the schedule counts the batches first, and is refused the same
    "val_check_past_an_epoch_counted_by_the_schedule": (
        ["trainer.val_check_interval=5"], "trainer.val_check_interval=5",
    ),  # fmt: skip
    "optimiser_typo": (["optim.name=adam"], "optim.name=adam is not valid"),
    "betas_under_adafactor": (
        ["optim.name=adafactor", "optim.betas=[0.9,0.99]"],
        "optim.betas does not apply to optim.name=adafactor",
    ),  # fmt: skip
    "muon_key_under_adamw": (["optim.momentum=0.9"], "optim.momentum does not apply"),
    "wsd_key_under_cosine": (["optim.decay_fraction=0.1"], "optim.decay_fraction does not apply"),
    "decay_key_under_constant": (
        ["optim.schedule=constant", "optim.min_lr=0.1"], "optim.min_lr does not apply",
    ),  # fmt: skip
    "wsd_shape_typo": (["optim.schedule=wsd", "optim.decay_shape=exp"], "optim.decay_shape=exp"),
    "muon_under_fsdp": (["optim.name=muon", "trainer=fsdp"], "optim.name=muon needs each"),
    "adafactor_under_fsdp": (["optim.name=adafactor", "trainer=fsdp"], "optim.name=adafactor"),
    "real_key_needs_plus": (["trainer.detect_anomaly=true"], "+trainer.detect_anomaly=true"),
    "strategy_is_a_preset": (["trainer.strategy=ddp"], "trainer=ddp"),
    "flex_on_cpu": (
        ["model.attention=sliding_window", "model.attn_impl=flex"],
        "model.attn_impl=flex has no backward pass on CPU",
    ),  # fmt: skip
    "attn_softcap_on_sdpa": (["model.attn_softcap=50"], "model.attn_softcap=50 applies to"),
    "attn_softcap_infinite": (
        ["model.attn_impl=math", "model.attn_softcap=inf"], "model.attn_softcap=inf must be a",
    ),  # fmt: skip
    "final_softcap_on_classification": (
        ["model=decoder_only", "data=majority", "model.final_softcap=30"],
        "model.final_softcap=30 applies to lm or seq2seq data",
    ),  # fmt: skip
    "z_loss_on_classification": (
        ["model=decoder_only", "data=majority", "task.z_loss=1e-4"],
        "task.z_loss=0.0001 is PaLM's loss",
    ),  # fmt: skip
    "loss_by_position_on_translation": (
        ["data=reverse", "task.loss_by_position=[4]"],
        "task.loss_by_position=[4] buckets a language model's loss",
    ),  # fmt: skip
    "vit_on_tokens": (["model=vit", "data=reverse"], "model=vit does not fit a seq2seq"),
    "accelerator_typo": (["trainer.accelerator=tpu_typo"], "trainer.accelerator=tpu_typo"),
    "gpu_on_a_cpu_machine": (["trainer=gpu"], "trainer.accelerator=gpu asks for a device"),
    "mps_off_apple_silicon": (["trainer=mps"], "trainer.accelerator=mps asks for a device"),
    "conv_kernel_wider_than_any_sequence": (
        ["model=conv", "~model.n_heads", "model.kernel_size=1001"],  # ~: TINY's heads removed
        "model.kernel_size=1001 is wider",
    ),  # fmt: skip
    "conv_kernel_wider_than_the_data": (
        ["model=conv", "~model.n_heads", "model.kernel_size=100"],
        "model.kernel_size=100 is wider",
    ),  # fmt: skip
    # a position table shorter than the data's longest sequence, as each task lays it out
    "max_len_source_sep_target": (
        ["model=decoder_only", "model.pos=learned", "model.max_len=8"], "model.max_len=8",
    ),  # fmt: skip
    "max_len_teacher_forcing": (["model.pos=learned", "model.max_len=10"], "model.max_len=10"),
    "max_len_lm_block": (
        ["model=decoder_only", "model.pos=learned", "model.max_len=64", "data=associative_recall"],
        "model.max_len=64",
    ),  # fmt: skip
    "max_len_classification": (
        ["model=encoder_only", "model.pos=learned", "model.max_len=5", "data=majority"],
        "model.max_len=5",
    ),  # fmt: skip
}
# refused after Hydra made the run directory (the job itself found it): a failed summary
IN_THE_JOB = (
    "lightning_refuses", "val_check_past_an_epoch", "wandb_log_model_offline",
    "val_check_past_an_epoch_counted_by_the_schedule",
    "max_len_source_sep_target", "max_len_teacher_forcing", "max_len_lm_block",
    "max_len_classification", "conv_kernel_wider_than_the_data", "addition_too_long",
)  # fmt: skip


def logs_with_an_earlier_run(root: Path) -> Path:
    earlier = root / EARLIER
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text('{"status": "completed"}')
    return root


def earlier_run_untouched(logs: Path) -> None:
    earlier = logs / EARLIER
    assert json.loads((earlier / "summary.json").read_text()) == {"status": "completed"}
    assert sorted(p.name for p in earlier.iterdir()) == ["summary.json"]


def one_error_line(capfd: pytest.CaptureFixture[str]) -> str:
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    return errors[0]


def train_exit(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        attnlab_train.main(args)
    return int(exit_info.value.code)


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_a_bad_config_value_is_refused_in_one_line(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    overrides, named = CONFIG_CASES[case]
    logs = logs_with_an_earlier_run(tmp_path)
    assert train_exit([*TINY, *overrides, f"paths.log_dir={logs}"]) == 2
    assert named in one_error_line(capfd)
    earlier_run_untouched(logs)
    made = [p for p in logs.glob("train/*/*") if p != logs / EARLIER]
    assert (made == []) != (case in IN_THE_JOB), made
    for run_dir in made:  # refused by the job itself: a failed summary that says why
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "failed" and named.split("=")[0] in summary["error"]
        assert not (run_dir / "checkpoints").exists()


@pytest.mark.parametrize("preset", ["multi30k_base_gpu", "gpt2_small"])
def test_a_gpu_preset_on_a_machine_without_one_is_refused_before_its_run_directory(
    preset: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = logs_with_an_earlier_run(tmp_path)
    assert train_exit([f"experiment={preset}", f"paths.log_dir={logs}"]) == 2
    assert f"experiment={preset} is a preset for GPUs" in one_error_line(capfd)
    assert [p for p in logs.glob("*/*/*") if p != logs / EARLIER] == []
    earlier_run_untouched(logs)


@pytest.mark.parametrize(("overrides", "max_len"), [
    (["model=decoder_only"], 22),  # source 10 + SEP + target 10 + EOS
    ([], 11),  # the encoder-decoder's BOS + target 10
])  # fmt: skip
def test_a_position_table_just_long_enough_trains_and_decodes(
    overrides: list[str], max_len: int, tmp_path: Path
) -> None:
    """The longest sequence fits exactly; validation decoding stops at the table's end."""
    args = [*TINY, *overrides, "model.pos=learned", f"model.max_len={max_len}",
            f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    assert attnlab_train.main(args) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


# -- data files -----------------------------------------------------------------------------
def _gz(path: Path, lines: list[str]) -> Path:
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _translation(tmp: Path, src: Path, tgt: Path) -> list[str]:
    return ["data=translation", f"data.files.train.src={src}", f"data.files.train.tgt={tgt}",
            f"data.files.val.src={src}", f"data.files.val.tgt={tgt}",
            f"data.cache_dir={tmp / 'cache'}"]  # fmt: skip


def corrupt_gzip(tmp: Path) -> list[str]:
    good = _gz(tmp / "good.en.gz", ["a b c"] * 20)
    bad = tmp / "bad.de.gz"
    bad.write_bytes(good.read_bytes()[:25])  # a truncated stream
    return _translation(tmp, bad, good)


def corrupt_gzip_stream(tmp: Path) -> list[str]:
    good = _gz(tmp / "good.en.gz", [f"a b c {i}" for i in range(200)])
    damaged = bytearray(good.read_bytes())
    for i in range(60, 68):  # inside the deflate stream, past the 10-byte header
        damaged[i] ^= 0xFF
    bad = tmp / "flipped.de.gz"
    bad.write_bytes(bytes(damaged))
    return _translation(tmp, bad, good)


def unequal_lines(tmp: Path) -> list[str]:
    return _translation(tmp, _gz(tmp / "a.de.gz", ["x"] * 20), _gz(tmp / "a.en.gz", ["y"] * 19))


def missing_text(tmp: Path) -> list[str]:
    return ["model=decoder_only", "data=text", f"data.path={tmp / 'nowhere.txt'}"]


def empty_text(tmp: Path) -> list[str]:
    (tmp / "empty.txt").write_text("")
    return ["model=decoder_only", "data=text", f"data.path={tmp / 'empty.txt'}",
            f"data.cache_dir={tmp / 'cache'}"]  # fmt: skip


def binary_text(tmp: Path) -> list[str]:
    (tmp / "blob.txt").write_bytes(bytes(range(256)) * 50)
    return ["model=decoder_only", "data=text", f"data.path={tmp / 'blob.txt'}",
            f"data.cache_dir={tmp / 'cache'}"]  # fmt: skip


def non_ascii_missing(tmp: Path) -> list[str]:
    return ["model=decoder_only", "data=text", f"data.path={tmp / 'données' / 'corpus.txt'}"]


def classification_without_label(tmp: Path) -> list[str]:
    (tmp / "reviews.tsv").write_text("text\tscore\ngood\t1\nbad\t0\n" * 10)
    return ["model=encoder_only", "data=classification", f"data.path={tmp / 'reviews.tsv'}",
            f"data.cache_dir={tmp / 'cache'}"]  # fmt: skip


def translation_without_files(tmp: Path) -> list[str]:
    return ["data=translation"]


DATA_CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "corrupt_gzip": (corrupt_gzip, "bad.de.gz"),
    "corrupt_gzip_stream": (corrupt_gzip_stream, "flipped.de.gz is a corrupt gzip file"),
    "unequal_lines": (unequal_lines, "differ in length"),
    "missing_text": (missing_text, "nowhere.txt"),
    "empty_text": (empty_text, "empty.txt"),
    "binary_text": (binary_text, "blob.txt"),
    "non_ascii_path": (non_ascii_missing, "données"),
    "missing_label_column": (classification_without_label, "label"),
    "translation_without_files": (translation_without_files, "data.files"),
}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_a_bad_data_file_is_refused_in_one_line(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    make, named = DATA_CASES[case]
    logs = logs_with_an_earlier_run(tmp_path / "logs")
    args = [*TINY_MODEL, "trainer.enable_progress_bar=false", *make(tmp_path)]
    assert train_exit([*args, f"paths.log_dir={logs}"]) == 2
    assert named in one_error_line(capfd)
    earlier_run_untouched(logs)


# -- checkpoints, run directories, eval and generate ----------------------------------------
ONE_EPOCH = ["trainer.max_epochs=1", "trainer.enable_progress_bar=false", "data.batch_size=8"]
REVERSE = ["data=reverse", "data.train_size=16", "data.val_size=8", "data.test_size=8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trained")
    text = root / "text.txt"
    text.write_text("to be or not to be, that is the question.\n" * 30)
    settings = {
        "seq2seq": ["model=decoder_only", *REVERSE],
        "encdec": [*REVERSE, "model.d_model=32"],
        "char_lm": [
            "model=decoder_only",
            "data=text",
            f"data.path={text}",
            "data.block_size=16",
            "data.eval_blocks=2",
            "data.samples_per_epoch=16",
            f"data.cache_dir={root / 'cache'}",
        ],  # fmt: skip
        "classifier": [
            "model=encoder_only",
            "data=majority",
            "data.train_size=16",
            "data.val_size=8",
            "data.test_size=8",
        ],  # fmt: skip
    }
    out = {}
    for name, overrides in settings.items():
        out[name] = root / name
        code = attnlab_train.main([*TINY_MODEL, *ONE_EPOCH, *overrides,
                                   f"hydra.run.dir={out[name]}"])  # fmt: skip
        assert code == 0
    return out


@pytest.fixture
def run_copy(runs: dict[str, Path], tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(runs[name], dest)
        return dest

    return copy


def truncated(run: Path) -> Path:
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:2000])
    return ckpt


def text_file(run: Path) -> Path:
    path = run / "notes.ckpt"
    path.write_text("these are my notes, not a checkpoint\n")
    return path


def corrupt_config(run: Path) -> Path:
    (run / ".hydra" / "config.yaml").write_text("model: [unclosed\n  - : :\n")
    return run


def binary_config(run: Path) -> Path:
    (run / ".hydra" / "config.yaml").write_bytes(b"\xff\xfe\x00garbage")
    return run


EvalCase = tuple[str, Callable[[Callable[[str], Path]], list[str]], str]
EVAL_CASES: dict[str, EvalCase] = {
    "no_run": ("eval", lambda c: [], "no run given"),
    "missing_run_dir": ("eval", lambda c: ["run_dir=/nonexistent/run"], "no such directory"),
    "missing_ckpt": ("eval", lambda c: ["ckpt_path=/nonexistent/x.ckpt"], "no such file"),
    "not_a_run_dir": (
        "eval",
        lambda c: [f"run_dir={c('seq2seq') / 'checkpoints'}"],
        "not an attnlab run directory",
    ),  # fmt: skip
    "truncated_ckpt": (
        "eval",
        lambda c: [f"ckpt_path={truncated(c('seq2seq'))}"],
        "corrupt or truncated",
    ),  # fmt: skip
    "text_as_ckpt": (
        "eval",
        lambda c: [f"run_dir={(r := c('seq2seq'))}", f"ckpt_path={text_file(r)}"],
        "notes.ckpt",
    ),  # fmt: skip
    "other_architecture": (
        "eval",
        lambda c: [
            f"run_dir={c('seq2seq')}",
            f"ckpt_path={c('encdec') / 'checkpoints' / 'last.ckpt'}",
        ],
        "another shape",
    ),  # fmt: skip
    "corrupt_config": (
        "eval",
        lambda c: [f"run_dir={corrupt_config(c('seq2seq'))}"],
        "not a readable config",
    ),  # fmt: skip
    "binary_config": (
        "eval",
        lambda c: [f"run_dir={binary_config(c('seq2seq'))}"],
        "not a readable config",
    ),  # fmt: skip
    "bad_split": ("eval", lambda c: [f"run_dir={c('seq2seq')}", "split=train"], "split=train"),
    "unknown_key": (
        "eval",
        lambda c: [f"run_dir={c('seq2seq')}", "model.nrom=pre"],
        "model.nrom",
    ),  # fmt: skip
    "replace_group": (
        "eval",
        lambda c: [f"run_dir={c('seq2seq')}", "data=copy"],
        "whole 'data' group",
    ),  # fmt: skip
    "not_key_value": ("eval", lambda c: ["logs/run"], "not key=value"),
    "eval_bad_value": (
        "eval",
        lambda c: [f"run_dir={c('seq2seq')}", "model.dropout=abc"],
        "model.dropout=abc",
    ),  # fmt: skip
    "unknown_chars": (
        "generate",
        lambda c: [f"run_dir={c('char_lm')}", "prompt=ЖЖЖ"],
        "'Ж'",
    ),  # fmt: skip
    "no_prompt": ("generate", lambda c: [f"run_dir={c('seq2seq')}"], "no prompt"),
    "empty_prompt": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt= "],
        "prompt is empty",
    ),  # fmt: skip
    "gen_top_p": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1 2", "decode.top_p=2"],
        "decode.top_p=2",
    ),  # fmt: skip
    "gen_temperature": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1 2", "decode.temperature=-1"],
        "decode.temperature=-1",
    ),  # fmt: skip
    "gen_beam": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1 2", "decode.beam_size=0"],
        "decode.beam_size=0",
    ),  # fmt: skip
    "num_samples_zero": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1 2", "num_samples=0"],
        "num_samples=0",
    ),  # fmt: skip
    "samples_greedy": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1 2", "num_samples=2"],
        "strategy=sample",
    ),  # fmt: skip
    "encoder_only": (
        "generate",
        lambda c: [f"run_dir={c('classifier')}", "prompt=1 2"],
        "encoder-only",
    ),  # fmt: skip
    "unknown_symbol": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1 2 99"],
        "'99'",
    ),  # fmt: skip
    "gen_option_typo": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1", "max_new_token=3"],
        "max_new_token",
    ),  # fmt: skip
    "comma_unquoted": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt=1,2"],
        "quote the value",
    ),  # fmt: skip
    "prompt_file_missing": (
        "generate",
        lambda c: [f"run_dir={c('seq2seq')}", "prompt_file=/nonexistent.txt"],
        "prompt_file",
    ),  # fmt: skip
    "truncated_for_generate": (
        "generate",
        lambda c: [f"ckpt_path={truncated(c('seq2seq'))}", "prompt=1 2"],
        "corrupt",
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(EVAL_CASES))
def test_a_bad_run_checkpoint_or_option_is_refused_in_one_line(
    case: str, run_copy: Callable[[str], Path], capfd: pytest.CaptureFixture[str]
) -> None:
    command, make, named = EVAL_CASES[case]
    args = make(run_copy)
    capfd.readouterr()
    entry = attnlab_eval.main if command == "eval" else attnlab_generate.main
    assert entry(args) == 2
    assert named in one_error_line(capfd)


RESUME_CASES: dict[str, tuple[Callable[[Callable[[str], Path]], str], str]] = {
    "text_file": (lambda c: str(text_file(c("seq2seq"))), "notes.ckpt"),
    "truncated": (lambda c: str(truncated(c("seq2seq"))), "corrupt or truncated"),
    "other_architecture": (
        lambda c: str(c("encdec") / "checkpoints" / "last.ckpt"),
        "another shape",
    ),  # fmt: skip
    "missing": (lambda c: "/nonexistent/last.ckpt", "does not exist"),
}


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resuming_from_a_bad_checkpoint_is_refused_in_one_line(
    case: str, run_copy: Callable[[str], Path], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    make, named = RESUME_CASES[case]
    ckpt = make(run_copy)
    capfd.readouterr()
    args = [*TINY_MODEL, *ONE_EPOCH, "model=decoder_only", *REVERSE, f"ckpt_path={ckpt}",
            f"hydra.run.dir={tmp_path / 'resumed'}"]  # fmt: skip
    assert train_exit(args) == 2
    assert named in one_error_line(capfd)


# -- attnlab-compare ------------------------------------------------------------------------
def _summary(folder: Path, text: str) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(text)


GOOD = json.dumps({"status": "completed", "overrides": ["seed=0"], "config": {},
                   "metrics": {"val/loss": 1.0}})  # fmt: skip
COMPARE_CASES = {
    "metrics_a_list": '{"status": "completed", "metrics": [1, 2]}',
    "not_an_object": "[1, 2, 3]",
    "not_json": "{status: completed",
    "overrides_a_string": '{"status": "completed", "overrides": {"a": 1}, "metrics": {}}',
}


@pytest.mark.parametrize("case", list(COMPARE_CASES))
def test_compare_skips_a_malformed_summary_with_a_warning_naming_it(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _summary(tmp_path / "sweep" / "0", GOOD)
    _summary(tmp_path / "sweep" / "1", COMPARE_CASES[case])
    assert compare_main([str(tmp_path / "sweep")]) == 0
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert f"warning: skipped: {tmp_path / 'sweep' / '1' / 'summary.json'}" in err
    assert "val/loss" in out


@pytest.mark.parametrize("case", list(COMPARE_CASES))
def test_compare_with_only_malformed_summaries_is_refused_in_one_line(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _summary(tmp_path / "sweep" / "0", COMPARE_CASES[case])
    assert compare_main([str(tmp_path / "sweep")]) == 2
    assert "summary.json" in one_error_line(capfd)


@pytest.mark.parametrize("args", [["model.d_model=-1"], ["-r", "model.norm=mid"]])
def test_a_bad_value_is_refused_before_torch_is_imported(args: list[str], tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys; from attnlab.train import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exit:\n    code = exit.code\n"
            "assert code == 2, code\n"
            "assert 'torch' not in sys.modules, 'torch imported before the refusal'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, *args, f"paths.log_dir={tmp_path}"],
                   check=True, timeout=120, capture_output=True)  # fmt: skip
    assert list(tmp_path.iterdir()) == []
