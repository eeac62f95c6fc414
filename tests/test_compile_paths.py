"""model.compile=true: what the compiled graphs cover. Dynamo only traces here
(``torch._dynamo.explain``, ``backend="eager"``), so no kernel is compiled on the CPU."""

from __future__ import annotations

import pytest
import torch

from attnlab.tasks.classification import ClassificationTask, ImageClassificationTask

BASE = dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, dropout=0.0, max_len=64)
CLASSIFIERS = {
    "encoder_only": dict(name="encoder_only"),
    "encoder_only_xl_relative": dict(name="encoder_only", pos="xl_relative"),
    "decoder_only_xl_relative": dict(name="decoder_only", pos="xl_relative"),
    "vit_learned": dict(name="vit", pos="learned", image_size=8, patch_size=4, channels=1),
    "vit_mean_learned_2d": dict(
        name="vit", pos="learned_2d", pool="mean", image_size=8, patch_size=4, channels=1
    ),
}


def classifier(case: str, **overrides: object) -> ClassificationTask:
    settings = {**BASE, **CLASSIFIERS[case], **overrides}
    task_class = ImageClassificationTask if settings["name"] == "vit" else ClassificationTask
    torch.manual_seed(0)
    return task_class(model=settings, optim={}, num_classes=3).train()


def batch(task: ClassificationTask) -> torch.Tensor:
    if isinstance(task, ImageClassificationTask):
        return torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(6, 40, (2, 20), generator=torch.Generator().manual_seed(1))
    tokens[1, 12:] = 0  # right padding
    return tokens


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.mark.parametrize("case", list(CLASSIFIERS))
def test_a_training_step_on_a_padded_batch_traces_as_one_graph(case: str) -> None:
    task = classifier(case)
    explained = torch._dynamo.explain(task.forward)(batch(task))
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


@pytest.mark.parametrize("case", list(CLASSIFIERS))
def test_the_traced_training_graph_gives_the_eager_outputs(case: str) -> None:
    task = classifier(case)
    x = batch(task)
    for name, param in task.named_parameters():  # xl_relative's u, v start at zero
        if name.endswith(("positions.u", "positions.v")):
            torch.nn.init.normal_(param)
    traced = torch.compile(task.forward, backend="eager")  # traced, run by eager PyTorch
    torch.testing.assert_close(traced(x), task(x), atol=1e-5, rtol=1e-5)


def test_model_compile_compiles_the_pooled_path_the_head_reads() -> None:
    task = classifier("encoder_only", compile=True)
    model, pooled = task.model, task.model.pooled
    task.setup("fit")
    compiled = model.pooled
    assert compiled is not pooled
    assert compiled._torchdynamo_orig_callable == pooled  # type: ignore[attr-defined]
    task.setup("validate")  # Lightning calls setup once per stage: compiled once
    assert model.pooled is compiled


def test_without_model_compile_pooled_stays_the_eager_method() -> None:
    task = classifier("encoder_only")
    task.setup("fit")
    assert "pooled" not in vars(task.model)
