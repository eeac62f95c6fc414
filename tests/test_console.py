"""What a researcher sees: the start banner, train.log, --options, step-limited runs, and the
command-line grammar shared by every entry point."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from attnlab import train as attnlab_train
from cli_runs import TINY


def test_a_run_starts_with_its_config_tree_directory_parameters_and_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert attnlab_train.main([*TINY, f"hydra.run.dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    head = out[: out.index("parameters:")]
    assert "config\n├── model\n│   └── name: encoder_decoder" in head
    assert f"run directory: {run_dir}" in head
    assert "parameters:    " in out and "device:        cpu × 1 (32-true precision)" in out


def test_train_log_holds_the_console_without_bar_redraws(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [*TINY, "trainer.enable_progress_bar=true", f"hydra.run.dir={run_dir}"]
    assert attnlab_train.main(args) == 0
    log = (run_dir / "train.log").read_text()
    for line in ("├── model", f"run directory: {run_dir}", "parameters:", "summary:"):
        assert line in log
    assert "GPU available:" in log  # Lightning's own log lines too
    assert "\x1b[" not in log and "litlogger" not in log


def test_options_lists_every_registered_value_with_its_reference(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.nn.norms import RESIDUALS, PreNormResidual

    class ReZeroResidual(PreNormResidual):
        """x + α·Sublayer(x), α initialised to 0 (Bachlechner et al. 2021)."""

    monkeypatch.setitem(RESIDUALS._items, "rezero_test", ReZeroResidual)
    assert attnlab_train.main(["--options"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("rezero_test" in line and "Bachlechner et al. 2021" in line for line in lines)
    for key in ("model.norm", "model.pos", "model.ffn", "model.norm_type", "model.attn_impl"):
        assert any(line.startswith(key + " ") for line in lines), key
    assert any("sinusoidal" in line and "§3.5" in line for line in lines)
    assert any(line.startswith("experiment ") for line in lines)


@pytest.mark.parametrize("kind,paper", [("sigmoid", "Ramapuram et al. 2025"),
                                        ("differential", "Ye et al. 2025"),
                                        ("mamba2", "Dao & Gu 2024"),
                                        ("gated_deltanet", "Yang et al. 2025"),
                                        ("mla", "DeepSeek-V2"),
                                        ("hybrid", "Gemma 3 Technical Report")])
def test_options_lists_each_attention_kind_with_its_paper(
    capsys: pytest.CaptureFixture[str], kind: str, paper: str
) -> None:
    assert attnlab_train.main(["--options"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(kind in line.split()[:2] and paper in line for line in lines)


def test_options_lists_each_recipe_key_with_its_paper(capsys: pytest.CaptureFixture[str]) -> None:
    assert attnlab_train.main(["--options"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()
            if line[:1].strip()}  # fmt: skip
    papers = {"model.attn_softcap": "Gemma 2 §2", "model.final_softcap": "Gemma 2 §2",
              "model.rope_theta": "RoFormer", "model.rotary_fraction": "GPT-NeoX",
              "task.z_loss": "PaLM §5"}  # fmt: skip
    for key, paper in papers.items():
        assert paper in rows[key], rows.get(key)
    assert "read by model.attn_impl=flex, math" in rows["model.attn_softcap"]


def test_options_lists_every_named_model_key_and_each_group_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from attnlab.model_config import BLOCKS, PARAMETRIZATIONS
    from attnlab.models import ARCHITECTURES

    assert attnlab_train.main(["--options"]) == 0
    out = capsys.readouterr().out
    assert "@package" not in out
    headers, values, key = [], {}, ""
    for line in out.splitlines():
        if not line.strip() or line.startswith("Every other key"):
            continue
        words = line.split()
        if not line[0].isspace():  # a key heads its first row only
            key, words = words[0], words[1:]
            headers.append(key)
        values.setdefault(key, set()).add(words[0])
    assert len(headers) == len(set(headers)), headers  # model once, each group once
    assert values["model.block"] == set(BLOCKS)
    assert values["model.param"] == set(PARAMETRIZATIONS)
    pools = {pool for _, cls in ARCHITECTURES.items() for pool in cls.feeding.pools}
    assert values["model.pool"] == pools
    assert {"experiment", "debug", "logger"} <= set(headers)


def test_a_run_stopped_by_max_steps_mid_epoch_validates_at_its_last_step(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"  # TINY: 2 batches an epoch, so step 1 ends mid-epoch
    assert attnlab_train.main([*TINY, "trainer.max_steps=1", f"hydra.run.dir={run_dir}"]) == 0
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    val = [r.split(",") for r in rows[1:] if r.split(",")[header.index("val/loss")]]
    assert [r[header.index("step")] for r in val] == ["0"]  # after the first optimizer step
    assert list((run_dir / "checkpoints").glob("best-*step1.ckpt"))


@pytest.mark.parametrize(("max_steps", "max_epochs", "batches", "limited"), [
    (30, 10, 157, True), (-1, 10, 157, False), (5000, 10, 157, False), (30, -1, 157, True),
])  # fmt: skip
def test_the_bar_counts_steps_when_max_steps_is_the_limit(
    max_steps: int, max_epochs: int, batches: int, limited: bool
) -> None:
    from attnlab.callbacks.progress import step_limited

    trainer = SimpleNamespace(max_steps=max_steps, max_epochs=max_epochs,
                              num_training_batches=batches, accumulate_grad_batches=1)  # fmt: skip
    assert step_limited(trainer) is limited


def test_a_step_limited_bar_shows_optimizer_steps_across_epochs(tmp_path: Path) -> None:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from attnlab.callbacks.progress import StepProgressBar

    class Linear(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(torch.ones(3, 2)), batch_size=1)  # 3 per epoch

    class Shown(StepProgressBar):
        shown: list[tuple[float, float | None, str]] = []

        def on_train_batch_end(self, *args: object) -> None:
            super().on_train_batch_end(*args)
            bar = self.train_progress_bar
            self.shown.append((bar.completed, bar.total, bar.description))

    trainer = L.Trainer(max_steps=5, max_epochs=10, callbacks=[Shown()], logger=False,
                        default_root_dir=tmp_path, enable_checkpointing=False,
                        enable_model_summary=False)  # fmt: skip
    trainer.fit(Linear())
    assert Shown.shown == [(1, 5, "Steps (epoch 0)"), (2, 5, "Steps (epoch 0)"),
                           (3, 5, "Steps (epoch 0)"), (4, 5, "Steps (epoch 1)"),
                           (5, 5, "Steps (epoch 1)")]  # fmt: skip


def test_ckpt_path_last_matches_runs_by_what_they_compute_not_by_labels() -> None:
    from attnlab.cli.compose import run_overrides

    same = run_overrides(["model.norm=post", "seed=1"])
    assert run_overrides(["seed=1", "tags=[a,b]", "test=false", "model.norm=post",
                          "hydra/launcher=joblib", "logger=wandb", "trainer.max_epochs=9",
                          "overwrite=true"]) == same  # fmt: skip
    assert run_overrides(["model.norm=pre", "seed=1"]) != same


def test_eval_and_generate_read_values_with_hydras_grammar() -> None:
    from attnlab.cli.checkpoints import parse_arguments

    options, overrides = parse_arguments(
        ["prompt='1 2 3'", "run_dir=logs/x", "decode.top_k=3", "+decode.top_p=0.9"],
        {"prompt": None, "run_dir": None},
    )
    assert options == {"prompt": "1 2 3", "run_dir": "logs/x"}
    assert overrides == [("decode.top_k", 3), ("+decode.top_p", 0.9)]


def test_paths_data_dir_moves_every_real_data_preset() -> None:
    from attnlab.cli.compose import compose_config

    for data, key in (("multi30k", "files.train.src"), ("shakespeare_char", "path"),
                      ("sst2", "files.train")):  # fmt: skip
        cfg = compose_config([f"data={data}", "paths.data_dir=/elsewhere"])
        from omegaconf import OmegaConf

        assert str(OmegaConf.select(cfg.data, key)).startswith("/elsewhere/"), data


def test_a_non_ascii_path_is_accepted_as_typed() -> None:
    from attnlab.cli.compose import quote_non_ascii, validate_overrides

    assert quote_non_ascii(["data.path=/tmp/données.txt", "seed=1"]) == [
        "data.path='/tmp/données.txt'", "seed=1"]  # fmt: skip
    args = ["model=decoder_only", "data=text", "data.path=/tmp/données.txt"]
    cfg = validate_overrides(quote_non_ascii(args), False)
    assert cfg.data.path == "/tmp/données.txt"


@pytest.mark.parametrize(("override", "decode"), [
    ("~decode.top_k", {"strategy": "greedy"}),  # Hydra's deletion, as attnlab-train reads it
    ("+decode.top_k=3", {"strategy": "greedy", "top_k": 3}),  # + sets a key the run has
    ("decode.strategy=beam", {"strategy": "beam", "top_k": 5}),
])  # fmt: skip
def test_a_saved_run_config_takes_overrides_as_hydra_composes_them(
    override: str, decode: dict, tmp_path: Path
) -> None:
    from attnlab.cli.checkpoints import load_run_config

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(
        "data:\n  _target_: attnlab.data.synthetic.SyntheticDataModule\n"
        "decode:\n  strategy: greedy\n  top_k: 5\nseed: 1\n"
    )
    assert dict(load_run_config(tmp_path, [override]).decode) == decode
