"""What a first run on one or several GPUs would meet, checked on a CPU: each rank's own
device, sharded memory needs, FSDP's clipping and weight-decay groups, compiled pooling,
host syncs, MFU peaks, and the launcher environments (fake ``LOCAL_RANK``/``SLURM_*``)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from attnlab.cli import pipeline
from attnlab.cli.common import config_dir, register_resolvers
from attnlab.errors import ConfigError


def trainer_config(name: str, *overrides: str):  # noqa: ANN201
    register_resolvers()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=[f"trainer={name}", *overrides]).trainer


def test_free_memory_is_read_on_this_ranks_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare torch.cuda.mem_get_info() opens a context on GPU 0 in every rank."""
    asked: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda device=None: (asked.append(device), (2**30, 2**31))[1])  # fmt: skip
    monkeypatch.setenv("LOCAL_RANK", "3")
    have, where = pipeline.available_memory("gpu")
    assert asked == [torch.device("cuda", 3)] and have == 2**30 and "GPU 3" in where
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("SLURM_LOCALID", "5")  # srun starts the tasks itself
    pipeline.available_memory("gpu")
    assert asked[-1] == torch.device("cuda", 5)


@pytest.mark.parametrize(("name", "overrides", "expected"), [
    ("fsdp", ["trainer.devices=4", "trainer.num_nodes=2"], 8),
    ("ddp", ["trainer.devices=4", "trainer.num_nodes=2"], 1),  # a whole copy on each rank
    ("gpu", [], 1),
])  # fmt: skip
def test_sharded_strategies_divide_the_training_state(
    name: str, overrides: list[str], expected: int
) -> None:
    assert pipeline.shards(trainer_config(name, *overrides)) == expected


def test_a_model_that_fits_when_sharded_is_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model = {"name": "decoder_only", "d_model": 64, "n_heads": 4, "n_layers": 2,
             "vocab_size": 100}  # fmt: skip
    from attnlab.models import ModelConfig, build_model

    with torch.device("meta"):
        params = build_model(ModelConfig.from_dict(model), "lm").num_params()
    need = params * pipeline.TRAINING_BYTES_PER_PARAM
    monkeypatch.setattr(pipeline, "available_memory", lambda accelerator: (need // 4, "free"))
    with pytest.raises(ConfigError, match="need at least"):
        pipeline.check_memory(model, "gpu", "lm")
    pipeline.check_memory(model, "gpu", "lm", sharded_over=8)  # 1/8 of it on each device
    with pytest.raises(ConfigError, match="sharded over 2 devices"):
        pipeline.check_memory(model, "gpu", "lm", sharded_over=2)


def test_the_run_builds_its_model_once_and_refuses_it_while_building(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from attnlab.models import ModelConfig, build_model

    cfg = ModelConfig.from_dict({"name": "decoder_only", "d_model": 64, "n_heads": 4,
                                 "n_layers": 2, "vocab_size": 100})  # fmt: skip
    torch.manual_seed(0)
    expected = build_model(cfg, "lm").state_dict()
    params = sum(v.numel() for v in expected.values())
    need = params * pipeline.TRAINING_BYTES_PER_PARAM
    monkeypatch.setattr(pipeline, "available_memory", lambda accelerator: (need * 2, "free"))
    builds = []
    monkeypatch.setattr("attnlab.models.build_model",
                        lambda *a: builds.append(a) or build_model(*a))  # fmt: skip
    torch.manual_seed(0)
    model = pipeline.build_model_within_memory(cfg, "lm", "gpu")
    assert len(builds) == 1  # the run's one build: the same weights as a plain build
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    monkeypatch.setattr(pipeline, "available_memory", lambda accelerator: (need // 4, "free"))
    with pytest.raises(ConfigError, match=f"{params / 1e9:.2f} G parameters, which need at least"):
        pipeline.build_model_within_memory(cfg, "lm", "gpu")


def test_a_model_whose_one_matrix_outgrows_memory_is_refused_before_it_is_allocated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """d_model = 2^20: one W_Q alone is 4 TiB, which no allocator gives; the parameters are
    counted first (on the meta device), so the refusal is the one-line memory error."""
    from attnlab.models import ModelConfig

    # a vocabulary of 4: the embeddings (4 M parameters) fit, W_Q, W_K, W_V do not
    cfg = ModelConfig.from_dict({"name": "decoder_only", "d_model": 2**20, "n_heads": 4,
                                 "n_layers": 2, "vocab_size": 4})  # fmt: skip
    monkeypatch.setattr(pipeline, "available_memory", lambda accelerator: (2**30, "available"))
    with pytest.raises(ConfigError, match="choose a smaller model.d_model or n_layers"):
        pipeline.build_model_within_memory(cfg, "lm", "cpu")


@pytest.mark.parametrize(("name", "task", "keys"), [
    ("decoder_only", "lm", {"n_layers": 3}),
    ("decoder_only", "lm", {"n_layers": 3, "param": "mup", "mup_base_width": 16}),
    ("encoder_decoder", "seq2seq", {"n_layers": 3, "n_encoder_layers": 2, "n_decoder_layers": 4}),
    ("encoder_decoder", "seq2seq", {"n_layers": 3, "tie_embeddings": False}),
    ("rnn", "seq2seq", {"n_layers": 3}),
    ("conv", "lm", {"n_layers": 4}),
    ("vit", "image_classification", {"n_layers": 2, "image_size": 8, "patch_size": 4,
                                     "channels": 3}),
])  # fmt: skip
def test_the_parameter_count_is_exact_at_any_depth(name: str, task: str, keys: dict) -> None:
    """Counted at depth 1 and 2 per stack and extrapolated: the same as the built model's."""
    from attnlab.models import ModelConfig, build_model

    cfg = ModelConfig.from_dict({"name": name, "d_model": 32, "n_heads": 4, "vocab_size": 50,
                                 **keys}, strict=False)  # fmt: skip (rnn, conv: no heads)
    assert pipeline.parameter_count(cfg, task) == build_model(cfg, task).num_params()


@pytest.mark.parametrize(("keys", "named"), [
    ({"n_layers": 10**9}, "G parameters"),  # built layer by layer: hours
    ({"pos": "learned", "max_len": 10**11}, "G parameters"),  # one table: the allocator fails
    ({"d_model": 10**11}, "G parameters"),  # a weight of more than 2^63 elements
    ({"param": "mup", "mup_base_width": 10**11}, "model.mup_base_width="),  # μP's base model
])  # fmt: skip
def test_a_model_too_large_for_memory_is_refused_before_it_is_built(
    keys: dict, named: str
) -> None:
    from attnlab.models import ModelConfig
    from fuzzing import time_limit

    cfg = ModelConfig.from_dict({"name": "decoder_only", "d_model": 16, "n_heads": 2,
                                 "vocab_size": 50, **keys})  # fmt: skip
    with time_limit(20), pytest.raises(ConfigError, match=named):
        pipeline.build_model_within_memory(cfg, "lm", "cpu")


def test_is_primary_process_reads_slurm_procid(monkeypatch: pytest.MonkeyPatch) -> None:
    """submitit and srun start every task themselves: only task 0 writes train.log."""
    from attnlab.cli.rundir import is_primary_process

    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert is_primary_process()
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert not is_primary_process()
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert is_primary_process()


def test_qk_norm_under_mixed_precision_hands_one_dtype_to_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CUDA autocast runs LayerNorm/RMSNorm in fp32, so normalised queries and keys come back
    fp32 while V is bf16; the attention kernel (FlexAttention, SDPA) gets one dtype."""
    from attnlab.models import ModelConfig, build_model
    from attnlab.nn import flex

    seen: list[tuple[torch.dtype, ...]] = []

    def kernel(device_type: str):  # noqa: ANN202
        def attend(q, k, v, block_mask=None):  # noqa: ANN001, ANN202
            seen.append((q.dtype, k.dtype, v.dtype))
            return torch.zeros_like(v)

        return attend

    monkeypatch.setattr(flex, "_kernel", kernel)
    cfg = ModelConfig.from_dict(dict(
        name="decoder_only", vocab_size=40, d_model=32, n_heads=4, n_layers=1, dropout=0.0,
        attention="sliding_window", window=8, attn_impl="flex", qk_norm=True, max_len=64,
    ))  # fmt: skip
    model = build_model(cfg, "lm").to(torch.bfloat16).eval()
    for module in model.modules():  # as CUDA autocast computes the norms: in fp32
        if getattr(module, "q_norm", None) is not None:
            for norm in (module.q_norm.float(), module.k_norm.float()):
                norm.forward = (lambda f: lambda x: f(x.float()))(norm.forward)
    with torch.no_grad():
        model(torch.randint(6, 40, (2, 16)))
    assert seen and all(len(set(dtypes)) == 1 for dtypes in seen), seen


# -- FSDP: weight-decay groups by name, clipping through the root, one unit per layer ------
PARAM_CASES = [
    {"name": "encoder_decoder", "norm_type": "rmsnorm", "pos": "learned", "qk_norm": True},
    {"name": "encoder_decoder", "tie_embeddings": False, "ffn": "swiglu", "n_kv_heads": 1},
    {"name": "decoder_only", "pos": "xl_relative", "block": "parallel", "norm": "pre"},
    {"name": "decoder_only", "pos": "t5_relative", "norm": "sandwich"},
    {"name": "decoder_only", "pos": "rope", "attention": "linear", "norm_type": "rmsnorm"},
    {"name": "encoder_only", "pos": "rope", "attention": "linformer", "linformer_k": 8},
    {"name": "encoder_only", "pos": "alibi", "norm": "deepnorm", "tie_embeddings": "output"},
    {"name": "rnn", "cell": "lstm", "rnn_attention": "bahdanau", "bidirectional": True},
    {"name": "rnn", "cell": "gru", "rnn_attention": "luong_general", "input_feeding": True},
]  # fmt: skip


@pytest.mark.parametrize("settings", PARAM_CASES)
@pytest.mark.parametrize("task", ["seq2seq", "classification"])
def test_weight_decay_groups_by_name_are_the_groups_by_shape(settings: dict, task: str) -> None:
    """FSDP hands the optimiser 1-D shards, so the groups are chosen by name; on an unwrapped
    model they are what ``param.dim() < 2`` (and embeddings, positions) gave."""
    from attnlab.models import ModelConfig, build_model
    from attnlab.tasks.base import _no_decay

    if settings["name"] == "decoder_only" and task == "classification":
        settings = {**settings, "pool": "mean"}
    if settings["name"] == "rnn" and task == "classification":
        settings = {**settings, "pool": "attention"}
    cfg = ModelConfig.from_dict({"vocab_size": 30, "d_model": 16, "n_heads": 2, "n_layers": 1,
                                 "max_len": 64, **settings}, strict=False)  # fmt: skip
    model = build_model(cfg, task)
    for name, param in model.named_parameters():
        by_shape = param.dim() < 2 or "embedding" in name or "positions" in name
        assert _no_decay(name) == by_shape, name
        wrapped = "_fsdp_wrapped_module." + name.replace(".", "._fsdp_wrapped_module.", 1)
        assert _no_decay(wrapped) == by_shape, wrapped


def test_vit_weight_decay_groups_by_name_are_the_groups_by_shape() -> None:
    from attnlab.models import ModelConfig, build_model
    from attnlab.tasks.base import _no_decay

    for pool, pos in (("cls", "learned"), ("mean", "learned_2d")):
        cfg = ModelConfig.from_dict({"name": "vit", "d_model": 16, "n_heads": 2, "n_layers": 1,
                                     "image_size": 8, "channels": 3, "patch_size": 4,
                                     "pool": pool, "pos": pos})  # fmt: skip
        for name, param in build_model(cfg, "image_classification").named_parameters():
            assert _no_decay(name) == (param.dim() < 2 or "embedding" in name
                                       or "positions" in name), name  # fmt: skip


@pytest.fixture
def one_process_group(tmp_path):  # noqa: ANN001, ANN201
    """A gloo process group of one rank: FSDP can wrap and clip on the CPU."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1)  # fmt: skip
    yield
    dist.destroy_process_group()


def test_lightnings_fsdp_plugin_refuses_norm_clipping() -> None:
    """Why Task.configure_gradient_clipping clips through the FSDP root itself."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.plugins.precision import FSDPPrecision
    from lightning.pytorch.utilities.enums import GradClipAlgorithmType

    with pytest.raises(MisconfigurationException, match="not supported"):
        FSDPPrecision("bf16-mixed").clip_gradients(None, 1.0, GradClipAlgorithmType.NORM)


def test_fsdp_wraps_each_layer_and_the_task_clips_through_the_root(one_process_group) -> None:  # noqa: ANN001
    import copy
    from types import SimpleNamespace

    from hydra.utils import instantiate
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    from attnlab.nn.layers import DecoderLayer
    from attnlab.tasks.language_modeling import LanguageModelTask

    policy = instantiate(trainer_config("fsdp").strategy.auto_wrap_policy)
    model = {"name": "decoder_only", "vocab_size": 30, "d_model": 16, "n_heads": 2,
             "n_layers": 3, "dropout": 0.0}  # fmt: skip
    task = LanguageModelTask(model=model)
    reference = copy.deepcopy(task.model)
    root = FSDP(task.model, auto_wrap_policy=policy, use_orig_params=True,
                device_id=torch.device("cpu"))
    units = [m for m in root.modules() if isinstance(m, FSDP) and m is not root]
    assert len(units) == 3 and all(isinstance(u.module, DecoderLayer) for u in units)

    tokens = torch.randint(6, 30, (2, 9))
    for net in (root, reference):
        (net(tokens[:, :-1]).float().pow(2).mean() * 1e3).backward()  # norms well above 1
    task._trainer = SimpleNamespace(model=root)
    task.configure_gradient_clipping(None, 0.5, "norm")
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    with FSDP.summon_full_params(root, with_grads=True):
        got = dict(root.named_parameters())
        for name, param in reference.named_parameters():
            wrapped = next(v for k, v in got.items() if k.replace("_fsdp_wrapped_module.", "")
                           == name)  # fmt: skip
            torch.testing.assert_close(wrapped.grad, param.grad, rtol=1e-5, atol=1e-7)


def test_under_ddp_the_ranks_agree_on_a_stop_every_n_steps_not_every_batch() -> None:
    """One all-reduce (and host sync) every 10 optimizer steps, however many batches each
    step accumulates; a signal between checks stops every rank at the next check."""
    from types import SimpleNamespace

    from attnlab.callbacks.stop import GracefulStop

    reduces: list[int] = []

    def reduce_boolean_decision(decision: bool, all: bool = True) -> bool:  # noqa: A002
        reduces.append(trainer.global_step)
        return decision

    trainer = SimpleNamespace(world_size=2, global_step=0, should_stop=False,
                              strategy=SimpleNamespace(reduce_boolean_decision=reduce_boolean_decision),
                              save_checkpoint=lambda path: None, checkpoint_callback=None,
                              default_root_dir="/nonexistent")  # fmt: skip
    stop = GracefulStop()
    for step in range(1, 26):
        trainer.global_step = step
        for _ in range(2):  # two accumulated batches per optimizer step
            stop.on_train_batch_end(trainer)  # type: ignore[arg-type]
    assert reduces == [10, 20]
    stop.status = "preempted"  # a signal at step 25
    for step in (26, 29, 30):
        trainer.global_step = step
        stop.on_train_batch_end(trainer)  # type: ignore[arg-type]
        assert trainer.should_stop == (step == 30)


@pytest.mark.parametrize(("model", "unused"), [
    (["model=encoder_decoder", "model.pool=mean"], "model.decoder."),  # the encoder is pooled
    (["model=encoder_only", "model.tie_embeddings=false"], "model.lm_head."),  # LM-only head
])  # fmt: skip
def test_under_ddp_the_parameters_no_classification_loss_reaches_are_frozen(
    model: list[str], unused: str, tmp_path
) -> None:  # noqa: ANN001
    """DDP (find_unused_parameters=False) fails at the second step on a parameter with no
    gradient; frozen, it is skipped, and everything the loss reaches still trains."""
    from composed_runs import compose_run

    cfg = compose_run(["trainer=ddp_cpu", "data=majority", "data.train_size=16", "data.val_size=8",
                       "data.test_size=8", "model.d_model=16", "model.n_heads=2",
                       "model.n_layers=1", *model], tmp_path)  # fmt: skip
    task = pipeline.build_task(cfg, pipeline.build_data(cfg))
    frozen = {n for n, p in task.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith(unused) for n in frozen), sorted(frozen)[:5]
    assert task.model.embedding.weight.requires_grad  # shared with the frozen part: trains
    logits = task(torch.full((2, 5), 7))
    logits.sum().backward()
    assert all(p.grad is not None for p in task.parameters() if p.requires_grad)


def test_bleu_by_length_scores_every_ranks_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under DDP each rank decodes its share of the test set; the per-length BLEU is over
    all of them (gathered), not rank 0's share."""
    from attnlab.callbacks import resume
    from attnlab.tasks import seq2seq

    task = seq2seq.Seq2SeqTask(model={"name": "encoder_decoder", "vocab_size": 20,
                                      "d_model": 16, "n_heads": 2, "n_layers": 1},
                               task={"bleu_by_length": [3]})  # fmt: skip
    task.bleu_enabled = True
    mine = [(2, "a b", "a b")]
    other_rank = [(5, "c d e f g", "c d e f g"), (1, "h", "x")]
    monkeypatch.setattr(resume, "gather_objects", lambda own: [own, other_rank])
    scored: list[list] = []
    real = seq2seq.bleu_by_length
    monkeypatch.setattr(seq2seq, "bleu_by_length",
                        lambda examples, edges: (scored.append(examples), real(examples, edges))[1])
    monkeypatch.setattr(task, "log", lambda *args, **kwargs: None)
    monkeypatch.setattr(task, "_log_bleu", lambda stage: None)
    task._by_length = list(mine)
    task.on_test_epoch_end()
    assert scored == [mine + other_rank]


def test_diagnostics_turn_themselves_off_under_fsdp() -> None:
    """Rank 0 holds only shards under FSDP: the probe forward and the weight norms of
    callbacks=diagnostics would read partial weights (or hang in an all-gather)."""
    from types import SimpleNamespace

    from lightning.pytorch.strategies import FSDPStrategy

    from attnlab.callbacks.diagnostics import TrainingDiagnostics

    callback = TrainingDiagnostics(every_n_steps=1)
    trainer = SimpleNamespace(strategy=FSDPStrategy(), is_global_zero=True, global_step=0)
    with pytest.warns(UserWarning, match="off under FSDP"):
        callback.setup(trainer, None, "fit")  # type: ignore[arg-type]
    callback.on_fit_start(trainer, None)  # type: ignore[arg-type]
    callback.on_train_batch_start(trainer, None, None, 0)  # type: ignore[arg-type]
    assert callback.probe is None and callback._hooks == []
