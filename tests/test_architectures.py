"""The architecture interface: declarations, the shared model config, and the Vision Transformer.

The ViT's patching and 2-D positions are checked against hand computations
(Dosovitskiy et al. 2021, eq. 1 and App. D.4).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from attnlab.errors import ConfigError
from attnlab.models import ARCHITECTURES, ModelConfig, build_model
from attnlab.models.interface import TASK_KINDS
from attnlab.models.vit import VisionTransformer, patchify
from attnlab.nn.norms import DeepNormResidual
from attnlab.nn.positions import POSITIONS, Learned2DPositions, Sinusoidal2DPositions
from attnlab.tasks import check_compatible
from composed_runs import TINY_MODEL, compose_run

REPO = Path(__file__).resolve().parents[1]
FILLED_FROM_DATA = {"vocab_size", "image_size", "channels", "patch_size"}


def test_the_shared_yaml_lists_every_key_a_component_reads_and_sets_none() -> None:
    """conf/model/_base.yaml makes each key settable from the command line; the defaults are
    the components' own, so a key left alone is not 'set' (and never refused)."""
    from attnlab.model_config import every_key

    base = yaml.safe_load((REPO / "conf/model/_base.yaml").read_text(encoding="utf-8"))
    assert set(base) == set(every_key()) - FILLED_FROM_DATA
    assert set(base.values()) == {"???"}


def test_each_architecture_file_only_names_its_architecture() -> None:
    for path in sorted((REPO / "conf/model").glob("[!_]*.yaml")):
        own = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert own == {"defaults": ["_base", "_self_"], "name": path.stem}, path.name
        assert path.stem in ARCHITECTURES


def test_models_and_nn_import_neither_lightning_nor_hydra() -> None:
    code = (
        "import sys, attnlab.models, attnlab.nn.attention, attnlab.inference.generation\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('lightning', 'pytorch_lightning', 'hydra', 'omegaconf', 'torchmetrics'))\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_no_model_class_is_checked_outside_models() -> None:
    names = "|".join(cls.__name__ for _, cls in ARCHITECTURES.items())
    out = subprocess.run(
        ["grep", "-rnE", rf"isinstance\([^)]*({names}|TransformerModel|Architecture)",
         "src/attnlab/tasks", "src/attnlab/inference", "src/attnlab/generate.py",
         "src/attnlab/callbacks", "src/attnlab/bench", "src/attnlab/cli"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert out.stdout == "", out.stdout


@pytest.mark.parametrize("name", ARCHITECTURES.names())
def test_every_architecture_declares_a_feeding_it_can_serve(name: str) -> None:
    cls = ARCHITECTURES.get(name)
    served = [task for task in TASK_KINDS if cls.feeding.serves(task)]
    assert served, name
    for task in TASK_KINDS:
        if task not in served:
            with pytest.raises(ConfigError, match=f"model={name} does not fit"):
                check_compatible(name, task)


def test_deepnorm_owns_its_constants_and_init() -> None:
    """α in the residual, β in its initialize: nothing but its class and its config names
    DeepNorm."""
    model = build_model(ModelConfig.from_dict(
        {"name": "encoder_decoder", "vocab_size": 20, "norm": "deepnorm", "n_layers": 6}
    ))  # fmt: skip
    N = M = 6
    enc_alpha = model.encoder.layers[0].attn_residual.alpha
    assert enc_alpha == pytest.approx(0.81 * (N**4 * M) ** (1 / 16))
    assert model.decoder.layers[0].ffn_residual.alpha == pytest.approx((3 * M) ** 0.25)
    beta = (12 * M) ** -0.25  # decoder β: Xavier-normal std = β·√(2/(fan_in+fan_out))
    w = model.decoder.layers[0].ffn.linear2.weight
    assert w.std().item() == pytest.approx(beta * (2 / sum(w.shape)) ** 0.5, rel=0.05)
    out = subprocess.run(["grep", "-rln", "deepnorm", "src/attnlab"], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    # the catalog is the table of every registry's names, where each class lives
    assert sorted(out.stdout.split()) == ["src/attnlab/components/layers.py",
                                          "src/attnlab/nn/norms.py"]  # its config and class
    assert isinstance(model.encoder.layers[0].attn_residual, DeepNormResidual)


def vit(**overrides: object) -> VisionTransformer:
    cfg = {
        "name": "vit",
        "d_model": 32,
        "n_heads": 4,
        "n_layers": 2,
        "image_size": 8,
        "channels": 1,
        "patch_size": 2,
        "pos": "learned",
        "dropout": 0.0,
        **overrides,
    }
    model = build_model(ModelConfig.from_dict(cfg), "image_classification")
    assert isinstance(model, VisionTransformer)
    return model.eval()


def test_patches_are_raster_ordered_and_flattened_per_channel() -> None:
    pixels = torch.arange(2 * 4 * 4, dtype=torch.float).view(1, 2, 4, 4)
    patches = patchify(pixels, 2)  # (1, 4, 2·2·2)
    assert patches.shape == (1, 4, 8)
    # patch 1 is row 0, column 1: pixels (0..1, 2..3) of each channel, channel-major
    expected = torch.cat([pixels[0, c, 0:2, 2:4].flatten() for c in range(2)])
    torch.testing.assert_close(patches[0, 1], expected)


@pytest.mark.parametrize("pos", ["learned", "learned_2d", "sinusoidal_2d", "rope", "none"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_pools_one_vector_per_image(pos: str, pool: str) -> None:
    model = vit(pos=pos, pool=pool)
    pixels = torch.randn(3, 1, 8, 8)
    pooled = model.pooled(pixels)
    assert pooled.shape == (3, 32) and torch.isfinite(pooled).all()
    assert model.sequence_length == 16 + (pool == "cls")
    pooled.sum().backward()
    assert model.patch_embedding.weight.grad is not None


def test_vit_images_are_independent_in_a_batch() -> None:
    model = vit()
    pixels = torch.randn(4, 1, 8, 8)
    torch.testing.assert_close(model.pooled(pixels)[1:2], model.pooled(pixels[1:2]))


def test_two_d_positions_follow_the_grid() -> None:
    """learned_2d: [row embedding ; column embedding] (App. D.4); [CLS] at 0 its own vector."""
    learned = Learned2DPositions(8, 2, 64, False, grid=(3, 3))
    x = torch.zeros(1, 10, 8)
    out = learned.embed(x, torch.arange(10))
    # position 6 = patch 5 = row 1, column 2
    torch.testing.assert_close(
        out[0, 6], torch.cat([learned.row_table.weight[1], learned.column_table.weight[2]])
    )
    torch.testing.assert_close(out[0, 0], learned.cls)
    sinus = Sinusoidal2DPositions(8, 2, 64, False, grid=(3, 3)).embed(x, torch.arange(10))
    assert torch.equal(sinus[0, 0], torch.zeros(8))
    row, col = 1.0, 2.0  # the same patch: sin/cos of the row in 0:4, of the column in 4:8
    expected = [row, row, row / 100, row / 100, col, col, col / 100, col / 100]
    trig = [torch.sin, torch.cos] * 4
    want = torch.tensor([f(torch.tensor(v)).item() for f, v in zip(trig, expected, strict=True)])
    torch.testing.assert_close(sinus[0, 6], want)


def test_grid_positions_are_refused_for_sequences() -> None:
    assert POSITIONS.get("learned_2d").needs_grid
    with pytest.raises(ConfigError, match="model=vit"):
        ModelConfig.from_dict({"name": "decoder_only", "vocab_size": 9, "pos": "learned_2d"})


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"patch_size": 3}, "does not divide"),
        ({"image_size": 0}, "data=digits"),
        ({"pool": "last"}, "model.pool=last"),
        ({"patch_size": 1, "max_len": 16}, "max_len"),
    ],
)
def test_bad_vit_settings_are_one_line(overrides: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        vit(**overrides)


VIT_FAST = ["model=vit", "data=digits", *TINY_MODEL, "trainer.fast_dev_run=true",
            "trainer.enable_progress_bar=false", "callbacks=none"]  # fmt: skip


@pytest.mark.parametrize("pos", ["learned", "learned_2d", "sinusoidal_2d"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_vit_ablation_axes_train_through_the_configs(pos: str, norm: str, tmp_path: Path):
    from attnlab.cli.run import train

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = train(compose_run([*VIT_FAST, f"model.pos={pos}", f"model.norm={norm}"], run_dir),
                   run_dir)  # fmt: skip
    assert result["status"] == "completed"
    assert 0.0 <= result["metrics"]["test/acc"] <= 1.0


def test_a_vit_run_is_evaluated_from_its_directory(tmp_path: Path, capsys) -> None:
    from omegaconf import OmegaConf

    from attnlab import eval as attnlab_eval
    from attnlab.cli.run import train

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    overrides = [o for o in VIT_FAST if o != "trainer.fast_dev_run=true"]
    overrides += ["trainer.max_steps=3", "trainer.limit_val_batches=1", "trainer.max_epochs=1"]
    cfg = compose_run(overrides, run_dir)
    result = train(cfg, run_dir)
    assert result["status"] == "completed"
    (run_dir / ".hydra").mkdir()  # what Hydra writes in a real run
    OmegaConf.save({k: v for k, v in cfg.items() if k != "hydra"}, run_dir / ".hydra/config.yaml")
    code = attnlab_eval.main([f"run_dir={run_dir}"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "test/acc" in printed
    saved = torch.load(run_dir / "checkpoints/last.ckpt", weights_only=True)
    assert saved["hyper_parameters"]["model"]["image_size"] == 8  # filled in from the data


def test_vit_on_text_and_text_models_on_images_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reads images"):
        check_compatible("vit", "classification")
    with pytest.raises(ConfigError, match="use model=vit"):
        check_compatible("encoder_only", "image_classification")
