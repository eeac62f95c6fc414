"""data=tokens: memory-mapped shards, an order that is a function of (seed, epoch, rank,
world size), disjoint ranks, and a loader that resumes with the next unseen batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.data.shards import open_split, read_index
from attnlab.data.tokens import TokenBatches, TokensDataModule, TokenStreamLoader, sample_starts
from cli_runs import run
from token_folders import prepared_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 40 k character tokens in shards of 4096: blocks cross shard boundaries."""
    return prepared_folder(tmp_path_factory.mktemp("tokens"))


def module(folder: Path, **kwargs) -> TokensDataModule:  # noqa: ANN003
    data = TokensDataModule(path=str(folder), **{"block_size": 32, "batch_size": 4, **kwargs})
    data.setup()
    return data


def batches(loader, n: int) -> list[torch.Tensor]:  # noqa: ANN001
    out = []
    for batch in loader:
        out.append(batch["tokens"])
        if len(out) == n:
            break
    return out


def test_a_split_reads_as_one_stream_across_its_shards(folder: Path) -> None:
    index = read_index(folder)
    stream = open_split(folder, "train")
    parts = [np.fromfile(folder / s["file"], dtype=index["dtype"])
             for s in index["splits"]["train"]["shards"]]  # fmt: skip
    whole = np.concatenate(parts).astype(np.int64)
    assert len(stream) == len(whole) == index["splits"]["train"]["tokens"]
    for a, b in [(0, 10), (4090, 4100), (4000, 12300), (len(whole) - 5, len(whole))]:
        assert stream[a:b].tolist() == whole[a:b].tolist()
    starts = np.array([0, 4080, 8190, len(whole) - 33])
    blocks = stream.blocks(starts, 33)
    assert blocks.dtype == torch.int64
    assert all(blocks[i].tolist() == whole[s : s + 33].tolist() for i, s in enumerate(starts))


def test_random_blocks_depend_on_seed_and_epoch_and_cover_the_split(folder: Path) -> None:
    n = len(open_split(folder, "train"))
    idx = np.arange(20_000)
    starts = sample_starts(idx, n, 32, "random", seed=0, epoch=0)
    assert starts.min() >= 0 and starts.max() <= n - 33
    assert np.array_equal(starts, sample_starts(idx, n, 32, "random", seed=0, epoch=0))
    assert not np.array_equal(starts, sample_starts(idx, n, 32, "random", seed=0, epoch=1))
    assert not np.array_equal(starts, sample_starts(idx, n, 32, "random", seed=1, epoch=0))
    counts = np.bincount(starts * 10 // (n - 32), minlength=10)  # roughly uniform
    assert counts.min() > 0.8 * counts.mean()
    sequential = sample_starts(idx[:5], n, 32, "sequential", seed=0, epoch=3)
    assert sequential.tolist() == [0, 32, 64, 96, 128]


@pytest.mark.parametrize("sampling", ["random", "sequential"])
def test_ranks_read_disjoint_slices_of_one_global_order(folder: Path, sampling: str) -> None:
    """The two ranks' batches at step t are, together, the one-process run's samples
    2t·B … 2t·B + 2B: the order does not depend on the world size."""
    stream = open_split(folder, "train")

    def data(rank: int, world: int, batch: int) -> TokenBatches:
        return TokenBatches(stream, 32, batch, sampling, 5, 400, rank, world)

    single = list(data(0, 1, 8))
    ranks = [list(data(r, 2, 4)) for r in (0, 1)]
    assert len(single) == 50 and len(ranks[0]) == len(ranks[1]) == 50
    for step in range(50):
        joined = torch.cat([ranks[0][step]["tokens"], ranks[1][step]["tokens"]])
        assert torch.equal(joined, single[step]["tokens"])


def test_workers_hand_out_the_batches_in_the_same_order(folder: Path) -> None:
    one = batches(module(folder).train_dataloader(), 12)
    two = batches(module(folder, num_workers=2).train_dataloader(), 12)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


@pytest.mark.parametrize("world", [1, 2], ids=["same world size", "world size 2 to 1"])
def test_a_restored_loader_continues_with_the_next_unseen_samples(folder: Path, world: int
                                                                  ) -> None:  # fmt: skip
    stream = open_split(folder, "train")
    # the run that never stopped, on one process with the global batch of the first part
    whole = TokenStreamLoader(TokenBatches(stream, 32, 4 * world, "random", 0, 400))
    expected = batches(whole, 10)
    # the first part: 4 steps on `world` ranks, each batch 4 (global batch 4 × world)
    parts = [TokenStreamLoader(TokenBatches(stream, 32, 4, "random", 0, 400, r, world))
             for r in range(world)]  # fmt: skip
    first = [batches(p, 4) for p in parts]
    state = parts[0].state_dict()
    assert state["samples_taken"] == 4 * 4 * world and state["world_size"] == world
    for step in range(4):
        assert torch.equal(torch.cat([f[step] for f in first]), expected[step])
    # resumed on one process with batches of 4 × world: the steps after the first four
    resumed = TokenStreamLoader(TokenBatches(stream, 32, 4 * world, "random", 0, 400))
    resumed.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(batches(resumed, 6), expected[4:], strict=True))
    # the next epoch starts afresh
    assert len(list(resumed)) == len(whole)


def test_a_short_train_run_reads_the_shards_and_logs_a_val_loss(folder: Path, tmp_path: Path
                                                                ) -> None:  # fmt: skip
    from attnlab.cli.run import train
    from cli_runs import compose_run

    cfg = compose_run(["model=decoder_only", "data=tokens", f"data.path={folder}",
                       "data.block_size=32", "data.batch_size=8", "model.d_model=32",
                       "model.n_heads=2", "model.n_layers=1", "trainer.max_steps=4",
                       "trainer.enable_progress_bar=false", "test=false"], tmp_path)  # fmt: skip
    result = train(cfg, tmp_path)
    assert result["status"] == "completed" and result["metrics"]["val/loss"] > 0
    assert (tmp_path / "tokenizer.json").is_file()


def test_a_bad_data_path_is_one_line_with_exit_2(tmp_path: Path) -> None:
    done = run("train", "model=decoder_only", "data=tokens", f"data.path={tmp_path / 'nowhere'}",
               "trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "attnlab-prepare" in lines[0]


@pytest.mark.parametrize("case", ["unset", "not prepared", "block too long"])
def test_a_folder_that_cannot_serve_is_refused_naming_the_fix(folder: Path, tmp_path: Path,
                                                               case: str) -> None:  # fmt: skip
    from attnlab.errors import DataError

    path = {"unset": None, "not prepared": tmp_path, "block too long": folder}[case]
    expect = {"unset": "data.path is not set", "not prepared": "holds no index.json",
              "block too long": "data.block_size<="}[case]  # fmt: skip
    data = TokensDataModule(path=path, block_size=100_000 if case == "block too long" else 32)
    with pytest.raises(DataError, match=expect):
        data.setup()


# 48 samples an epoch in batches of 8: 6 steps; a stop at step 4 is mid-epoch
RESUME = [
    "model=decoder_only", "data=tokens", "data.block_size=32", "data.batch_size=8",
    "data.samples_per_epoch=48", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
    "model.dropout=0.2", "optim.warmup_steps=2", "optim.decay_steps=10",
    "trainer.max_epochs=-1", "trainer.val_check_interval=2",
    "trainer.check_val_every_n_epoch=null", "data.eval_blocks=16",
    "trainer.enable_progress_bar=false", "test=false", "seed=3",
]  # fmt: skip


def test_a_resumed_run_on_tokens_ends_like_an_uninterrupted_one(folder: Path, tmp_path: Path
                                                                ) -> None:  # fmt: skip
    from attnlab.cli.run import train
    from cli_runs import compose_run

    def fit(run_dir: Path, steps: int, *extra: str) -> dict:
        cfg = compose_run([*RESUME, f"data.path={folder}", f"trainer.max_steps={steps}",
                           *extra], run_dir)  # fmt: skip
        return train(cfg, run_dir)

    whole = fit(tmp_path / "whole", 10)
    assert fit(tmp_path / "parts", 4)["status"] == "completed"
    resumed = fit(tmp_path / "parts", 10, "ckpt_path=last")
    assert resumed["status"] == "completed"
    assert resumed["metrics"]["val/loss"] == pytest.approx(whole["metrics"]["val/loss"], abs=1e-6)
    assert resumed["tokens"] == whole["tokens"]


def test_documents_count_the_eos_before_each_position() -> None:
    from attnlab.data.tokens import documents_of
    from attnlab.special_tokens import EOS

    tokens = torch.tensor([[7, 8, EOS, 9, EOS, EOS, 10], [EOS, 7, 7, 7, 7, 7, 7]])
    assert documents_of(tokens).tolist() == [[0, 0, 0, 1, 1, 2, 3], [0, 1, 1, 1, 1, 1, 1]]


def test_the_document_mask_is_causal_within_each_document() -> None:
    from attnlab.models.stack import attention_mask

    index = torch.arange(5)
    documents = torch.tensor([[0, 0, 1, 1, 1]])
    mask = attention_mask(index, index, None, True, documents=documents)[0, 0].int()
    assert mask.tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0],
                             [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]  # fmt: skip
    both_ways = attention_mask(index, index, None, False, documents=documents)[0, 0].int()
    assert both_ways.tolist()[0] == [1, 1, 0, 0, 0] and both_ways.tolist()[4] == [0, 0, 1, 1, 1]


@pytest.mark.parametrize("name", ["decoder_only", "encoder_only"])
def test_with_the_document_mask_a_document_sees_nothing_of_the_one_before(name: str) -> None:
    """Changing the first document changes no output of the second, with the mask; without
    it, it does (so the check can fail)."""
    from attnlab.data.tokens import documents_of
    from attnlab.models import ModelConfig, build_model
    from attnlab.special_tokens import EOS

    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({"name": name, "vocab_size": 20, "d_model": 16, "n_heads": 2,
                                 "n_layers": 2, "dropout": 0.0, "pos": "learned",
                                 "max_len": 16})  # fmt: skip
    model = build_model(cfg, "lm").eval()
    a = torch.tensor([[7, 8, 9, EOS, 10, 11, 12, 13]])
    b = torch.tensor([[13, 6, 7, EOS, 10, 11, 12, 13]])  # the same second document
    with torch.no_grad():
        masked = [model(t, documents=documents_of(t)) for t in (a, b)]
        plain = [model(t) for t in (a, b)]
    assert torch.allclose(masked[0][0, 4:], masked[1][0, 4:], atol=1e-6)
    assert not torch.allclose(plain[0][0, 4:], plain[1][0, 4:], atol=1e-4)
    assert not torch.allclose(masked[0][0, :4], masked[1][0, :4], atol=1e-4)


def test_a_run_with_the_document_mask_trains_and_bad_models_are_refused(
    folder: Path, tmp_path: Path
) -> None:
    from attnlab.cli.pipeline import check_document_mask
    from attnlab.cli.run import train
    from attnlab.errors import ConfigError
    from attnlab.models import ModelConfig
    from cli_runs import compose_run

    cfg = compose_run(["model=decoder_only", "data=tokens", f"data.path={folder}",
                       "data.document_mask=true", "data.block_size=32", "data.batch_size=8",
                       "model.d_model=32", "model.n_heads=2", "model.n_layers=1",
                       "trainer.max_steps=2", "trainer.enable_progress_bar=false",
                       "test=false"], tmp_path)  # fmt: skip
    assert train(cfg, tmp_path)["status"] == "completed"
    for settings, expect in (({"name": "rnn"}, "takes no such mask"),
                             ({"name": "decoder_only", "attention": "sliding_window"},
                              "does not take")):  # fmt: skip
        with pytest.raises(ConfigError, match=expect):
            check_document_mask(ModelConfig.from_dict(settings))


def test_a_pickled_stream_maps_the_shards_again_instead_of_copying_them(folder: Path) -> None:
    import pickle

    stream = open_split(folder, "train")
    blob = pickle.dumps(stream)
    assert len(blob) < 20_000 < len(stream)  # the index, not the tokens
    again = pickle.loads(blob)
    assert again[100:200].tolist() == stream[100:200].tolist()
