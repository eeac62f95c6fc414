"""``optim.name`` and ``optim.schedule``: each optimiser computes its paper's update, Muon
takes the hidden matrices and μP's learning rates, wsd has its three phases, and each one
trains through the real configs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnlab import train as attnlab_train
from attnlab.cli.run import train
from attnlab.errors import ConfigError
from attnlab.models import ModelConfig
from attnlab.models.parametrization import lr_multipliers
from attnlab.optim.build import MuonWithAdamW, is_hidden_matrix
from attnlab.optim.lion import Lion
from attnlab.optim.registry import OPTIMISERS, SCHEDULES, optim_config
from attnlab.optim.schedules import lr_multiplier
from attnlab.options import OPTIMISERS as OPTIMISER_NAMES
from attnlab.options import SCHEDULES as SCHEDULE_NAMES
from attnlab.tasks.base import Task
from cli_runs import TINY, compose_run
from test_bad_inputs import one_error_line

MODEL = {"name": "decoder_only", "d_model": 32, "n_heads": 2, "n_layers": 2, "dropout": 0.0,
         "vocab_size": 20, "tie_embeddings": False}  # fmt: skip


def task(optim: dict, **model: object) -> Task:
    values = {**MODEL, **model}
    torch.manual_seed(0)
    return Task(model=values, optim=optim,
                model_config=ModelConfig.from_dict(values, strict=False))  # fmt: skip


def test_the_registry_declares_every_name_the_config_accepts() -> None:
    assert tuple(OPTIMISERS.members) == OPTIMISER_NAMES
    assert tuple(SCHEDULES.members) == SCHEDULE_NAMES


def test_an_optimisers_own_default_fills_a_key_left_unset() -> None:
    assert optim_config({"name": "lion", "betas": "???"}).betas == (0.9, 0.99)
    assert optim_config({"name": "adamw"}).betas == (0.9, 0.98)
    assert optim_config({"name": "muon", "betas": [0.9, 0.95]}).betas == (0.9, 0.95)


def test_lion_steps_as_algorithm_2_computed_by_hand() -> None:
    """Two steps of Lion (Chen et al. 2023, Alg. 2) on three numbers, against the rule
    written out in plain Python."""
    lr, (b1, b2), decay = 0.1, (0.9, 0.99), 0.5
    theta = [1.0, -2.0, 0.5]
    grads = [[0.3, -0.2, 0.0], [-0.1, -0.4, 0.2]]
    param = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    optimizer = Lion([param], lr=lr, betas=(b1, b2), weight_decay=decay)
    m = [0.0, 0.0, 0.0]
    for g in grads:
        param.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
        c = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
        sign = [math.copysign(1.0, ci) if ci else 0.0 for ci in c]
        theta = [t - lr * (s + decay * t) for t, s in zip(theta, sign, strict=True)]
        m = [b2 * mi + (1 - b2) * gi for mi, gi in zip(m, g, strict=True)]
        assert param.tolist() == pytest.approx(theta, abs=1e-12)
    assert optimizer.state[param]["exp_avg"].tolist() == pytest.approx(m, abs=1e-12)


def test_muon_takes_the_hidden_matrices_and_adamw_everything_else() -> None:
    module = task({"name": "muon"})
    optimizer = module.configure_optimizers()["optimizer"]
    assert isinstance(optimizer, MuonWithAdamW)
    muon = {id(p) for group in optimizer.muon.param_groups for p in group["params"]}
    names = {id(p): name for name, p in module.named_parameters()}
    hidden = {n for n, p in module.named_parameters() if p.dim() == 2 and "layers." in n}
    assert {names[i] for i in muon} == hidden and len(hidden) == 8  # 4 matrices a layer
    adamw = {names[id(p)] for g in optimizer.adamw.param_groups for p in g["params"]}
    assert adamw == set(names.values()) - hidden
    assert {"model.embedding.weight_table.weight", "model.lm_head.weight"} <= adamw
    assert not is_hidden_matrix("model.lm_head.weight", torch.zeros(2, 2))


def test_a_muon_update_has_the_rms_of_adamws_update() -> None:
    """Liu et al. 2025, §2.2: the orthogonalised update scaled by 0.2·√max(A,B) has an RMS of
    about 0.2·lr for any shape (an orthogonal A×B matrix has RMS 1/√max(A,B))."""
    for shape in [(64, 16), (16, 64), (32, 32)]:
        weight = torch.nn.Parameter(torch.zeros(shape))
        muon = torch.optim.Muon([weight], lr=0.01, weight_decay=0.0,
                                adjust_lr_fn="match_rms_adamw")  # fmt: skip
        weight.grad = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        muon.step()
        rms = float(weight.detach().pow(2).mean().sqrt())
        assert rms == pytest.approx(0.2 * 0.01, rel=0.3), shape


def test_mup_learning_rates_reach_muons_matrices_as_adamws() -> None:
    """Under μP (width 32, base 16) each hidden matrix's learning rate is lr·m and its decay
    λ/m with m = 16/32, the multipliers μP gives AdamW's groups: Muon's groups carry them."""
    module = task({"name": "muon", "lr": 0.01, "weight_decay": 0.1},
                  param="mup", mup_base_width=16)  # fmt: skip
    multiplier = lr_multipliers(module)
    muon = module.configure_optimizers()["optimizer"].muon
    names = {id(p): name for name, p in module.named_parameters()}
    seen = 0
    for group in muon.param_groups:
        for param in group["params"]:
            m = multiplier[names[id(param)]]
            assert m == pytest.approx(0.5)
            expected = (0.01 * m, 0.1 / m)  # the schedule scales lr from initial_lr
            assert (group["initial_lr"], group["weight_decay"]) == pytest.approx(expected)
            seen += 1
    assert seen == 8


@pytest.mark.parametrize(
    ("shape", "decayed"),
    [("linear", 1 - 0.5), ("sqrt", 1 - math.sqrt(0.5)), ("cosine", 0.5)],
)
def test_wsd_warms_up_holds_then_decays_over_its_last_fraction(shape: str, decayed: float) -> None:
    """100 steps, warm-up 10, decay over the last 20% (steps 81-100) to min_lr 0.1."""
    cfg = optim_config({"lr": 1.0, "warmup_steps": 10, "schedule": "wsd", "min_lr": 0.1,
                        "decay_fraction": 0.2, "decay_shape": shape})  # fmt: skip
    factor = [lr_multiplier(step, cfg, 64, 100) for step in range(100)]  # step + 1: 1 … 100
    assert factor[4] == pytest.approx(0.5)  # warm-up
    assert factor[9:80] == [1.0] * 71  # stable through step 80
    assert factor[89] == pytest.approx(0.1 + 0.9 * decayed)  # halfway through the decay
    assert factor[99] == pytest.approx(0.1)


def test_a_decaying_schedule_without_a_run_length_is_refused() -> None:
    from lightning.pytorch.trainer.states import TrainerFn

    module = task({"schedule": "wsd"})
    endless = SimpleNamespace(estimated_stepping_batches=float("inf"),
                              state=SimpleNamespace(fn=TrainerFn.FITTING))  # fmt: skip
    module.trainer = endless  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="optim.schedule=wsd decays over the run's steps"):
        module._total_steps()


@pytest.mark.parametrize(
    "optim", [["optim.name=adamw"], ["optim.name=muon"], ["optim.name=lion"],
              ["optim.name=adafactor"], ["optim.schedule=wsd", "optim.decay_shape=linear"]],
    ids=["adamw", "muon", "lion", "adafactor", "wsd"],
)  # fmt: skip
def test_each_optimiser_and_schedule_trains_a_few_steps(tmp_path: Path, optim: list[str]) -> None:
    args = [*TINY, "optim.warmup_steps=0", "optim.lr=1e-2", *optim]
    result = train(compose_run(args, tmp_path), tmp_path)
    assert result["status"] == "completed"
    assert math.isfinite(result["metrics"]["val/loss"])


# 64 examples in batches of 32: 2 steps an epoch; validation every step (the checkpoints
# every 2 steps monitor val/loss), warm-up 1 step, wsd decaying over the last half
WSD = [*[a for a in TINY if not a.startswith("trainer.max_epochs")], "trainer.max_epochs=-1",
       "trainer.val_check_interval=1", "trainer.check_val_every_n_epoch=null",
       "optim.schedule=wsd", "optim.decay_fraction=0.5", "optim.warmup_steps=1",
       "optim.lr=1e-2", "model.dropout=0.1"]  # fmt: skip


@pytest.fixture(scope="module")
def stable_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wsd run of 10 steps (decaying after step 5) keeping a checkpoint every 2 steps."""
    run_dir = tmp_path_factory.mktemp("stable")
    every = ["+callbacks.model_checkpoint.every_n_train_steps=2",
             "callbacks.model_checkpoint.save_top_k=-1"]  # fmt: skip
    assert train(compose_run([*WSD, "trainer.max_steps=10", *every], run_dir), run_dir)[
        "status"] == "completed"  # fmt: skip
    return run_dir


def _checkpoint(run_dir: Path, step: int) -> Path:
    (found,) = (run_dir / "checkpoints").glob(f"*-step{step}.ckpt")
    return found


def test_a_cooldown_branched_from_a_stable_wsd_checkpoint_ends_like_a_run_of_that_budget(
    stable_run: Path, tmp_path: Path
) -> None:
    """The stable run's checkpoint at step 4, continued with a budget of 8 steps, decays
    over steps 5-8 (the last half of 8) and ends with the loss of an 8-step wsd run: its
    first step takes the rate of its own schedule, not the one the checkpoint saved."""
    branch = [*WSD, "trainer.max_steps=8", f"ckpt_path={_checkpoint(stable_run, 4)}"]
    branched = train(compose_run(branch, tmp_path / "branch"), tmp_path / "branch")
    alone = train(compose_run([*WSD, "trainer.max_steps=8"], tmp_path / "alone"),
                  tmp_path / "alone")  # fmt: skip
    assert branched["status"] == alone["status"] == "completed"
    assert branched["metrics"]["val/loss"] == pytest.approx(alone["metrics"]["val/loss"], abs=1e-6)
    # its tokens count from the stable run's start: a point of attnlab-compare --fit nd
    assert branched["tokens"] == alone["tokens"] > 0


@pytest.mark.parametrize(
    ("step", "budget", "says"),
    [(4, 6, "at step 4, past step 3 where optim.schedule=wsd starts decaying .* at least 8"),
     (6, 12, "at step 6, in its run's decay \\(from step 5 of 10\\)")],
    ids=["past-the-branchs-decay-start", "in-the-stable-runs-decay"],
)  # fmt: skip
def test_a_branch_from_a_checkpoint_off_the_stable_rate_is_refused(
    stable_run: Path, tmp_path: Path, step: int, budget: int, says: str
) -> None:
    """Step 4 with a budget of 6 would decay from step 3 (the last half of 6); step 6 is
    already in the stable run's own decay (after step 5 of 10)."""
    branch = [*WSD, f"trainer.max_steps={budget}", f"ckpt_path={_checkpoint(stable_run, step)}"]
    with pytest.raises(ConfigError, match=says):
        train(compose_run(branch, tmp_path), tmp_path)


def test_a_sweep_over_an_optim_key_no_job_reads_is_refused_before_its_first_job(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        attnlab_train.main(["-m", *TINY, "optim.name=adamw,lion", "optim.beta2_decay=-0.5",
                            f"hydra.sweep.dir={tmp_path / 'sweep'}"])  # fmt: skip
    assert exited.value.code == 2
    assert "optim.beta2_decay does not apply to optim.name=adamw" in one_error_line(capfd)
    assert not (tmp_path / "sweep").exists()


def test_a_sweep_optim_key_some_jobs_read_is_kept_for_them_only(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    assert attnlab_train.main(["-m", *TINY, "optim.name=adamw,adafactor", "optim.betas=[0.9,0.95]",
                               f"hydra.sweep.dir={sweep}"]) == 0  # fmt: skip
    assert "note: optim.betas: the jobs whose optimiser" in capfd.readouterr().err
    summaries = [json.loads((sweep / job / "summary.json").read_text()) for job in ("0", "1")]
    assert [s["status"] for s in summaries] == ["completed", "completed"]


def test_options_lists_every_optimiser_and_schedule_with_its_paper_and_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert attnlab_train.main(["--options"]) == 0
    rows, key = {}, ""
    for line in capsys.readouterr().out.splitlines():
        if line.strip():
            key = line.split()[0] if not line[0].isspace() else key
            words = line.split()[1:] if not line[0].isspace() else line.split()
            rows[(key, words[0])] = " ".join(words[1:])
    for family in (OPTIMISERS, SCHEDULES):
        for choice in family:
            assert (f"optim.{family.key}", choice.name) in rows, choice.name
    assert "Chen et al. 2023" in rows["optim.name", "lion"]
    assert "Liu et al. 2025" in rows["optim.name", "muon"]
    assert "reads optim.momentum" in rows["optim.name", "muon"]
    assert "Hägele et al. 2024" in rows["optim.schedule", "wsd"]
    assert "reads optim.decay_fraction, optim.decay_shape" in rows["optim.schedule", "wsd"]


@pytest.mark.slow
def test_wsd_branches_of_two_stable_runs_are_the_points_of_an_nd_scaling_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two widths, each one stable wsd run of 20 steps and cool-downs branched from its
    steps 4, 8 and 12 (budgets 5, 10, 15): eight (N, D) points, read by --fit nd."""
    from attnlab.compare.cli import main as compare

    base = [*[a for a in WSD if not a.startswith(("optim.decay_fraction", "model.d_model"))],
            "trainer.val_check_interval=2"]  # fmt: skip
    for width in (16, 32):
        stable = tmp_path / f"stable_{width}"
        assert attnlab_train.main([*base, f"model.d_model={width}", "trainer.max_steps=20",
                                   "+callbacks.model_checkpoint.every_n_train_steps=4",
                                   "callbacks.model_checkpoint.save_top_k=-1",
                                   f"hydra.run.dir={stable}"]) == 0  # fmt: skip
        for step, budget in ((4, 5), (8, 10), (12, 15)):
            assert attnlab_train.main([*base, f"model.d_model={width}",
                                       f"trainer.max_steps={budget}",
                                       f"ckpt_path={_checkpoint(stable, step)}",
                                       f"hydra.run.dir={tmp_path / f'{width}_{budget}'}"]) == 0
    capsys.readouterr()
    assert compare([str(tmp_path), "--by", "optim.schedule", "--metric", "val/loss",
                    "--fit", "nd"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "| wsd | 8 | 0 |" in out
    assert "Scaling fit L(N, D)" in out and "optim.schedule=wsd: E = " in out
