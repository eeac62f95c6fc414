"""Resuming with ``ckpt_path=last`` continues a run exactly; checkpoints are never truncated."""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from attnlab.callbacks.resume import AtomicCheckpointIO, RngState
from attnlab.cli.compose import find_last_run
from attnlab.cli.run import train
from attnlab.data.sampling import EpochRandomSampler, ResumableDataLoader
from cli_runs import compose_run

# 128 examples in batches of 32: 4 steps per epoch; 12 steps = 3 epochs. Validation every
# 2 steps (across epochs), a fixed schedule length, dropout on (the RNG states matter).
STEPS_PER_EPOCH, TOTAL = 4, 12
RUN = [
    "data=reverse", "data.train_size=128", "data.val_size=16", "data.batch_size=32",
    "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.dropout=0.2",
    "optim.warmup_steps=2", f"optim.decay_steps={TOTAL}", "trainer.max_epochs=-1",
    "trainer.val_check_interval=2", "trainer.check_val_every_n_epoch=null",
    "trainer.enable_progress_bar=false", "test=false", "seed=3",
]  # fmt: skip


def _train(run_dir: Path, max_steps: int, *extra: str) -> dict:
    cfg = compose_run([*RUN, f"trainer.max_steps={max_steps}", *extra], run_dir)
    return train(cfg, run_dir)


# the variants a resume must restore exactly: name → their overrides
VARIANTS = {
    "full": ("model.attention=full",),
    "sigmoid": ("model.attention=sigmoid",),
    "differential": ("model.attention=differential",),
    # Mamba-2 is causal only: a decoder-only model of the same data
    "mamba2": ("model=decoder_only", "model.attention=mamba2", "model.pos=none",
               "model.ssm_state=8", "model.ssm_chunk=8"),
    "gated_deltanet": ("model=decoder_only", "model.attention=gated_deltanet", "model.pos=none",
                       "model.delta_chunk=8"),
    "mla": ("model.attention=mla", "model.pos=rope", "model.q_latent_rank=8"),
    # a local and a global layer, each rotated by its own base
    "hybrid": ("model.attention=hybrid", "model.layer_pattern=[sliding_window,full]",
               "model.window=4", "model.pos=rope", "model.rope_theta_local=100",
               "model.n_layers=2"),
    # a mixture of experts whose balancing bias moves each step: a buffer the resume restores
    "moe": ("model.ffn=moe", "model.moe_experts=4", "model.moe_bias_rate=0.05"),
    # each optimiser's state, and a schedule stopped inside its decay
    "muon": ("optim.name=muon",),
    "lion": ("optim.name=lion",),
    "adafactor": ("optim.name=adafactor",),
    "wsd": ("optim.schedule=wsd", "optim.decay_fraction=0.5"),
}


@pytest.fixture(scope="module", params=["full"])
def uninterrupted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict, Path]:
    """The run of the variant ``request.param`` (a name of ``VARIANTS``) with no stop."""
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    return _train(run_dir, TOTAL, *VARIANTS[request.param]), run_dir


def _interrupted(run_dir: Path, stop: int, *extra: str) -> dict:
    first = _train(run_dir, stop, *extra)
    assert first["status"] == "completed"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    return _train(run_dir, TOTAL, "ckpt_path=last", *extra)


def _val_losses(run_dir: Path) -> list[float]:
    with (run_dir / "metrics.csv").open() as handle:
        return [float(r["val/loss"]) for r in csv.DictReader(handle) if r.get("val/loss")]


@pytest.mark.parametrize(
    ("uninterrupted", "stop"),
    [("full", STEPS_PER_EPOCH + 2), ("full", STEPS_PER_EPOCH), ("sigmoid", STEPS_PER_EPOCH + 2),
     ("differential", STEPS_PER_EPOCH + 2), ("moe", STEPS_PER_EPOCH + 2),
     ("muon", STEPS_PER_EPOCH + 2), ("lion", STEPS_PER_EPOCH + 2),
     ("adafactor", STEPS_PER_EPOCH + 2), ("wsd", 10),  # wsd: decaying after step 6 of 12
     ("mamba2", STEPS_PER_EPOCH + 2), ("gated_deltanet", STEPS_PER_EPOCH + 2),
     ("mla", STEPS_PER_EPOCH + 2), ("hybrid", STEPS_PER_EPOCH + 2)],
    ids=["mid-epoch", "epoch-end", "sigmoid-mid-epoch", "differential-mid-epoch",
         "mid-epoch-ffn=moe", "muon-mid-epoch", "lion-mid-epoch", "adafactor-mid-epoch",
         "wsd-mid-decay", "mamba2-mid-epoch", "gated_deltanet-mid-epoch", "mla-mid-epoch",
         "hybrid-mid-epoch"],
    indirect=["uninterrupted"],
)  # fmt: skip
def test_a_resumed_run_ends_with_the_same_val_loss_as_an_uninterrupted_one(
    uninterrupted: tuple[dict, Path], tmp_path: Path, stop: int, request: pytest.FixtureRequest
) -> None:
    reference, reference_dir = uninterrupted
    variant = request.node.callspec.params["uninterrupted"]
    resumed = _interrupted(tmp_path, stop, *VARIANTS[variant])
    assert resumed["status"] == "completed"
    final = reference["metrics"]["val/loss"]
    assert resumed["metrics"]["val/loss"] == pytest.approx(final, abs=1e-6)
    # the tokens and FLOPs spent count on from the checkpoint (equal-compute comparisons)
    assert resumed["tokens"] == reference["tokens"] > 0
    assert resumed["flops"] == pytest.approx(reference["flops"])
    # every validation of the resumed run, before and after the stop, is in metrics.csv
    assert _val_losses(tmp_path) == pytest.approx(_val_losses(reference_dir), abs=1e-6)


def _parallel_files(folder: Path) -> list[str]:
    """A tiny de→en-like corpus of 96 pairs of varied length (bucketing has work to do)."""
    folder.mkdir(parents=True, exist_ok=True)
    words = "a b c d e f g h".split()
    src = [" ".join(words[(i + j) % 8] for j in range(1 + i % 7)) for i in range(96)]
    tgt = [" ".join(reversed(line.split())) for line in src]
    (folder / "train.src").write_text("\n".join(src) + "\n")
    (folder / "train.tgt").write_text("\n".join(tgt) + "\n")
    (folder / "val.src").write_text("\n".join(src[:16]) + "\n")
    (folder / "val.tgt").write_text("\n".join(tgt[:16]) + "\n")
    return [
        "data=translation", f"data.files.train.src={folder / 'train.src'}",
        f"data.files.train.tgt={folder / 'train.tgt'}", f"data.files.val.src={folder / 'val.src'}",
        f"data.files.val.tgt={folder / 'val.tgt'}", "data.tokenizer=char", "data.batch_size=8",
        "data.bucket_batches=4", f"data.cache_dir={folder / 'cache'}", "task.bleu=false",
    ]  # fmt: skip


@pytest.mark.parametrize("stop", [6, 12], ids=["mid-epoch", "epoch-end"])
def test_a_resumed_translation_run_with_bucketed_batches_ends_like_an_uninterrupted_one(
    tmp_path: Path, stop: int
) -> None:
    data = _parallel_files(tmp_path / "data")  # 96 pairs / 8 = 12 bucketed batches an epoch
    args = [*[a for a in RUN if not a.startswith(("data.", "optim.decay"))], *data,
            "optim.decay_steps=30"]  # fmt: skip

    def run(run_dir: Path, max_steps: int, *extra: str) -> dict:
        return train(compose_run([*args, f"trainer.max_steps={max_steps}", *extra], run_dir),
                     run_dir)  # fmt: skip

    reference = run(tmp_path / "uninterrupted", 30)
    assert run(tmp_path / "resumed", stop)["status"] == "completed"
    resumed = run(tmp_path / "resumed", 30, "ckpt_path=last")
    assert resumed["metrics"]["val/loss"] == pytest.approx(reference["metrics"]["val/loss"],
                                                           abs=1e-6)  # fmt: skip
    assert _val_losses(tmp_path / "resumed") == pytest.approx(
        _val_losses(tmp_path / "uninterrupted"), abs=1e-6)  # fmt: skip


def test_checkpoints_load_with_weights_only(uninterrupted: tuple[dict, Path]) -> None:
    _, run_dir = uninterrupted
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == TOTAL
    assert any("RngState" in key for key in checkpoint["callbacks"])


def test_rng_states_are_restored_just_before_the_next_training_step() -> None:
    callback = RngState()
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    saved = callback.state_dict()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    callback.load_state_dict(saved)
    torch.rand(5)  # e.g. a new dataloader iterator drawing its seed
    np.random.rand(5)
    random.random()
    callback.on_train_batch_start(ONE_PROCESS, None, None, 0)  # type: ignore[arg-type]
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    torch.rand(1)
    callback.on_train_batch_start(ONE_PROCESS, None, None, 1)  # only once after a resume
    assert torch.rand(1).item() != expected[2]


ONE_PROCESS = SimpleNamespace(world_size=1, global_rank=0)


def test_each_rank_saves_and_restores_its_own_random_states(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under DDP every rank draws its own dropout masks: the checkpoint holds each rank's
    states (gathered), and rank r restores rank r's — not rank 0's."""
    from attnlab.callbacks import resume

    per_rank = []
    for seed in (10, 11):  # what two ranks' generators hold at the checkpoint
        torch.manual_seed(seed)
        per_rank.append(resume.own_rng_states())
    monkeypatch.setattr(resume, "gather_objects", lambda own: per_rank)
    saved = RngState().state_dict()
    assert len(saved["ranks"]) == 2
    expected = []
    for seed in (10, 11):
        torch.manual_seed(seed)
        expected.append(torch.rand(3))
    for rank in (0, 1):
        callback = RngState()
        callback.load_state_dict(saved)
        torch.manual_seed(99)
        callback.on_train_batch_start(SimpleNamespace(world_size=2, global_rank=rank), None,
                                      None, 0)  # type: ignore[arg-type]  # fmt: skip
        assert torch.equal(torch.rand(3), expected[rank]), rank


def test_cuda_states_of_more_gpus_than_this_machine_has_are_restored_for_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint from a node with 8 GPUs resumed where 1 is visible: one CUDA state is
    set, instead of torch.cuda.set_rng_state_all failing on device 1."""
    from attnlab.callbacks import resume

    states = resume.own_rng_states()
    states["torch.cuda"] = [torch.zeros(16, dtype=torch.uint8)] * 8
    set_for: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda new: set_for.append(len(new)))
    callback = RngState()
    callback.load_state_dict({"ranks": [states]})
    callback.on_train_batch_start(ONE_PROCESS, None, None, 0)  # type: ignore[arg-type]
    assert set_for == [1]


def test_checkpoints_written_before_per_rank_states_still_resume() -> None:
    """A checkpoint holding one flat set of states (attnlab before per-rank states)."""
    from attnlab.callbacks.resume import own_rng_states

    torch.manual_seed(4)
    flat = own_rng_states()
    expected = torch.rand(2)
    callback = RngState()
    callback.load_state_dict(flat)
    callback.on_train_batch_start(ONE_PROCESS, None, None, 0)  # type: ignore[arg-type]
    assert torch.equal(torch.rand(2), expected)


def test_the_shuffled_order_depends_on_seed_and_epoch_only() -> None:
    data = list(range(50))
    first, again, other_seed = (EpochRandomSampler(data, seed=s) for s in (7, 7, 8))
    orders = []
    for epoch in (0, 1):
        for sampler in (first, again, other_seed):
            sampler.set_epoch(epoch)
        orders.append(list(first))
        assert list(again) == orders[-1]
        assert list(other_seed) != orders[-1]
        assert sorted(orders[-1]) == data
    assert orders[0] != orders[1]


def test_a_restored_loader_continues_after_the_batches_it_had_served() -> None:
    data = list(range(40))

    def loader() -> ResumableDataLoader:
        return ResumableDataLoader(data, batch_size=4, sampler=EpochRandomSampler(data, seed=0))

    before = loader()
    before.sampler.set_epoch(2)
    batches = iter(before)
    seen = [next(batches).tolist() for _ in range(3)]
    state = before.state_dict()
    rest = [b.tolist() for b in batches]
    assert state == {"epoch": 2, "batches_served": 3}

    after = loader()
    after.load_state_dict(state)
    assert [b.tolist() for b in after] == rest
    assert len(after) == len(seen) + len(rest)  # Lightning still counts the whole epoch


def test_a_crash_while_saving_keeps_the_previous_last_ckpt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io, path = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 1, "weights": torch.ones(1000)}, path)
    real_save = torch.save

    def save_half_then_die(obj: object, handle: object, *args: object, **kwargs: object) -> None:
        real_save(obj, handle, *args, **kwargs)
        handle.truncate(100)  # type: ignore[attr-defined]
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(torch, "save", save_half_then_die)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 2, "weights": torch.zeros(1000)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary left over


def test_ckpt_path_last_finds_the_newest_run_with_the_same_settings(tmp_path: Path) -> None:
    def fake_run(name: str, overrides: list[str]) -> Path:
        run_dir = tmp_path / "train" / "runs" / name
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / "checkpoints").mkdir()
        OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
        return run_dir

    older = fake_run("a", ["model.norm=post", "seed=1"])
    os.utime(older / "checkpoints" / "last.ckpt", (1_000_000, 1_000_000))
    wanted = fake_run("b", ["model.norm=post", "seed=1", "trainer.max_steps=5"])
    fake_run("c", ["model.norm=pre", "seed=1"])
    cfg = OmegaConf.create({"paths": {"log_dir": str(tmp_path)}, "task_name": "train"})
    # more steps, another logger: still the same run
    found = find_last_run(cfg, ["seed=1", "model.norm=post", "trainer.max_steps=10",
                                "logger=wandb", "ckpt_path=last"])  # fmt: skip
    assert found == wanted


def test_a_run_preempted_by_sigusr1_mid_epoch_resumes_exactly(
    uninterrupted: tuple[dict, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from attnlab.tasks.seq2seq import Seq2SeqTask

    reference, _ = uninterrupted
    real_step, sent = Seq2SeqTask.training_step, []

    def signal_at_step_5(self, batch, batch_idx):  # noqa: ANN001, ANN202
        if self.global_step == 5 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGUSR1)  # what SLURM sends before a time limit
        return real_step(self, batch, batch_idx)

    with monkeypatch.context() as patch:
        patch.setattr(Seq2SeqTask, "training_step", signal_at_step_5)
        first = _train(tmp_path, TOTAL)
    assert first["status"] == "preempted" and first["stopped_at_step"] == 6  # mid-epoch 2
    resumed = _train(tmp_path, TOTAL, "ckpt_path=last")
    assert resumed["status"] == "completed"
    assert resumed["metrics"]["val/loss"] == pytest.approx(reference["metrics"]["val/loss"],
                                                           abs=1e-6)  # fmt: skip


def test_a_resumed_run_with_no_step_left_keeps_its_validation_metrics(tmp_path: Path) -> None:
    first = _train(tmp_path, TOTAL)
    again = _train(tmp_path, TOTAL, "ckpt_path=last")  # nothing left to train or validate
    assert again["status"] == "completed"
    val = {k: v for k, v in first["metrics"].items() if k.startswith("val/")}
    assert val and {k: again["metrics"][k] for k in val} == pytest.approx(val)



@pytest.mark.parametrize("data", ["reverse", "tokens"])
def test_a_run_that_crashed_after_a_mid_epoch_validation_checkpoint_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: str
) -> None:
    """The cosine schedule's length from the trainer (no optim.decay_steps) with an epoch
    bound: Lightning builds the training loader before it reads the checkpoint, and the
    loader's saved position must still be put back (the epoch does not start again)."""
    from attnlab.tasks.language_modeling import LanguageModelTask
    from attnlab.tasks.seq2seq import Seq2SeqTask

    if data == "tokens":
        from token_folders import prepared_folder

        (tmp_path / "corpus").mkdir()
        data_args = ["model=decoder_only", "data=tokens",
                     f"data.path={prepared_folder(tmp_path / 'corpus')}", "data.block_size=16",
                     "data.batch_size=8", "data.samples_per_epoch=80"]  # fmt: skip
        task = LanguageModelTask
    else:
        data_args = ["data=reverse", "data.train_size=160", "data.val_size=16",
                     "data.batch_size=16"]  # fmt: skip
        task = Seq2SeqTask
    kept = [a for a in RUN if not a.startswith(("data", "optim.decay", "trainer.max_epochs",
                                                "trainer.check_val"))]  # fmt: skip
    # 10 steps an epoch, 2 epochs; validation (and its checkpoints) every 2 steps
    args = [*kept, *data_args, "trainer.max_epochs=2", "trainer.max_steps=20"]

    def fit(run_dir: Path, *extra: str) -> dict:
        return train(compose_run([*args, *extra], run_dir), run_dir)

    reference = fit(tmp_path / "uninterrupted")
    real_step = task.training_step

    def crash_at_step_7(self, batch, batch_idx):  # noqa: ANN001, ANN202
        if self.global_step == 7:
            raise RuntimeError("the machine went away")
        return real_step(self, batch, batch_idx)

    with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="went away"):
        patch.setattr(task, "training_step", crash_at_step_7)
        fit(tmp_path / "crashed")
    saved = torch.load(tmp_path / "crashed" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 6
    resumed = fit(tmp_path / "crashed", "ckpt_path=last")
    assert resumed["status"] == "completed"
    assert resumed["metrics"]["val/loss"] == pytest.approx(reference["metrics"]["val/loss"],
                                                           abs=1e-6)  # fmt: skip
