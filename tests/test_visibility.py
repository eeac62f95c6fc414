"""One mask description, lowered in one place: the dense mask and FlexAttention's
``mask_mod`` say the same thing for every combination of rules, and each rule is the
hand-computed one."""

import itertools

import pytest
import torch

from attnlab.nn.visibility import Visibility

T, B = 6, 2


def rules(causal: bool, prefix: bool, documents: bool, padding: bool, window: bool):
    return Visibility(
        torch.arange(T), torch.arange(T), causal=causal,
        prefix_len=torch.tensor([2, 0]) if prefix else None,
        documents=torch.tensor([[0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 2, 2]]) if documents else None,
        key_real=torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]).bool() if padding else None,
        pattern=(lambda i, j: (i - j).abs() <= 1) if window else None,
        sees_itself=padding, fresh=True,
    )  # fmt: skip


COMBINATIONS = list(itertools.product([False, True], repeat=5))


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_the_dense_mask_and_the_flex_mask_mod_agree(combination) -> None:
    seen = rules(*combination)
    dense = seen.dense()
    allowed = seen.mask_mod()
    b, q, k = torch.meshgrid(torch.arange(B), torch.arange(T), torch.arange(T), indexing="ij")
    flex = allowed(b, torch.zeros_like(b), q, k)  # (B, T, T)
    every = torch.ones(B, T, T, dtype=torch.bool)
    expected = every if dense is None else dense[:, 0].expand(B, T, T)
    assert torch.equal(flex.expand(B, T, T), expected)


def test_each_rule_is_the_hand_computed_one() -> None:
    causal = rules(True, False, False, False, False).dense()[0, 0].int()
    assert causal.tolist() == torch.tril(torch.ones(T, T, dtype=torch.int)).tolist()
    prefix = rules(True, True, False, False, False).dense()[:, 0].int()
    assert prefix[0, 0].tolist() == [1, 1, 0, 0, 0, 0]  # the prefix is seen both ways
    assert prefix[1].tolist() == causal.tolist()  # an empty prefix is plain causality
    documents = rules(False, False, True, False, False).dense()[1, 0].int()
    assert documents[2].tolist() == [0, 1, 1, 1, 0, 0]
    padded = rules(False, False, False, True, False).dense()[0, 0].int()
    assert padded[0].tolist() == [1, 1, 1, 1, 0, 0]
    assert padded[5].tolist() == [1, 1, 1, 1, 0, 1]  # a padding query still sees itself
    window = rules(True, False, False, False, True).dense()[0, 0].int()
    assert window[4].tolist() == [0, 0, 0, 1, 1, 0]


def test_only_plain_causality_over_a_fresh_sequence_lowers_to_is_causal() -> None:
    assert rules(True, False, False, False, False).plain_causal
    assert not any(rules(True, *others).plain_causal for others in itertools.product(
        [False, True], repeat=4) if any(others))  # fmt: skip
    cached = Visibility(torch.arange(4, 6), torch.arange(6), causal=True, fresh=False)
    assert not cached.plain_causal
    assert cached.dense()[0, 0].int().tolist() == [[1, 1, 1, 1, 1, 0], [1] * 6]


def test_cross_attention_sees_every_real_memory_position() -> None:
    real = torch.tensor([[True, True, False]])
    assert Visibility.real_keys(real).dense().tolist() == [[[[True, True, False]]]]
    assert Visibility.real_keys(None).dense() is None
