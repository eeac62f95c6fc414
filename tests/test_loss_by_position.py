"""``task.loss_by_position``: a causal language model's val/test loss per context-length bucket,
against a hand computation; refused where no token's context grows with its position."""

from __future__ import annotations

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.options import TaskConfig
from attnlab.tasks.language_modeling import LanguageModelTask, context_lengths, position_buckets

MODEL = {"name": "decoder_only", "vocab_size": 11, "d_model": 16, "n_heads": 2, "n_layers": 1,
         "max_len": 16}  # fmt: skip


def test_buckets_are_named_by_their_context_lengths() -> None:
    assert position_buckets([4, 8]) == [("loss_pos_1-4", 1, 4), ("loss_pos_5-8", 5, 8),
                                        ("loss_pos_9+", 9, None)]  # fmt: skip
    names = [name for name, _, _ in position_buckets([128, 512])]
    assert names == ["loss_pos_001-128", "loss_pos_129-512", "loss_pos_513+"]


def test_a_prediction_reads_its_position_plus_one_tokens_or_its_document_only() -> None:
    assert context_lengths(4).tolist() == [[1, 2, 3, 4]]
    documents = torch.tensor([[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 5, 5]])
    assert context_lengths(6, documents).tolist() == [[1, 2, 1, 2, 3, 1], [1, 2, 3, 4, 5, 6]]


def logged_evaluation(task: LanguageModelTask, batches: list[dict[str, torch.Tensor]]) -> dict:
    """The val metrics the task logs over ``batches``, computed as at the end of an epoch."""
    logged: dict[str, object] = {}
    task.log = lambda name, value, **kw: logged.__setitem__(name, value)  # type: ignore[method-assign]
    task.eval()
    with torch.no_grad():
        for index, batch in enumerate(batches):
            task.validation_step(batch, index)
    return {name: float(value.compute()) for name, value in logged.items()}


def test_each_bucket_is_the_mean_token_loss_of_its_context_lengths() -> None:
    torch.manual_seed(0)
    task = LanguageModelTask(model=MODEL, task={"loss_by_position": [3, 6]})
    batches = [{"tokens": torch.randint(4, 11, (2, 10))} for _ in range(3)]
    metrics = logged_evaluation(task, batches)
    by_bucket: dict[str, list[float]] = {"1-3": [], "4-6": [], "7+": []}
    with torch.no_grad():
        for batch in batches:
            tokens = batch["tokens"]
            logits = task.model(tokens[:, :-1])
            for row in range(tokens.size(0)):
                for j in range(tokens.size(1) - 1):  # the label at j is read from j + 1 tokens
                    loss = -torch.log_softmax(logits[row, j], -1)[tokens[row, j + 1]].item()
                    seen = j + 1
                    by_bucket["1-3" if seen <= 3 else "4-6" if seen <= 6 else "7+"].append(loss)
    for name, losses in by_bucket.items():
        assert metrics[f"val/loss_pos_{name}"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    every = [loss for losses in by_bucket.values() for loss in losses]  # the buckets cover all
    assert metrics["val/loss"] == pytest.approx(sum(every) / len(every), rel=1e-5)


def test_given_labels_count_only_where_they_are_set() -> None:
    """Associative recall labels only the answers: a bucket averages its labelled tokens."""
    torch.manual_seed(1)
    task = LanguageModelTask(model=MODEL, task={"loss_by_position": [4]})
    tokens = torch.randint(4, 11, (1, 9))
    labels = torch.full((1, 8), -100)
    labels[0, 1], labels[0, 6] = tokens[0, 2], tokens[0, 7]  # read from 2 and 7 tokens
    metrics = logged_evaluation(task, [{"tokens": tokens, "labels": labels}])
    with torch.no_grad():
        log_p = torch.log_softmax(task.model(tokens[:, :-1]), -1)
    assert metrics["val/loss_pos_1-4"] == pytest.approx(-log_p[0, 1, tokens[0, 2]].item(), rel=1e-5)
    assert metrics["val/loss_pos_5+"] == pytest.approx(-log_p[0, 6, tokens[0, 7]].item(), rel=1e-5)


@pytest.mark.parametrize("edges", [[], [8, 4], [0, 4], [4, 4]])
def test_bad_edges_are_refused_in_one_line(edges: list[int]) -> None:
    with pytest.raises(ConfigError, match=r"task.loss_by_position=.* increasing context lengths"):
        TaskConfig(loss_by_position=edges)


def test_a_masked_language_model_is_refused() -> None:
    model = {**MODEL, "name": "encoder_only"}
    with pytest.raises(ConfigError, match=r"task.loss_by_position=\[4\] .* masked LM"):
        LanguageModelTask(model=model, task={"loss_by_position": [4]})
