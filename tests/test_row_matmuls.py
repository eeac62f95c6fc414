"""The inductor pass for one-row matmuls of the compiled decoding step on a CPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import profile

from attnlab.inference.row_matmuls import OneRowMatmuls


def block(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
          b2: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """A feed-forward sublayer on one token: the linear layers of a decoding step."""
    h = F.gelu(F.linear(F.layer_norm(x, (x.size(-1),)), w1, b1))
    return F.linear(h, w2, b2) + x


def aten_ops_of_one_call(options: dict) -> set[str]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    args = (torch.randn(1, 1, 32), torch.randn(64, 32), torch.randn(64), torch.randn(32, 64),
            torch.randn(32))  # fmt: skip
    compiled = torch.compile(block, options=options)
    with torch.inference_mode():
        out = compiled(*args)
        with profile() as prof:
            compiled(*args)
        expected = block(*args)
    torch.testing.assert_close(out, expected)
    return {event.key for event in prof.key_averages() if event.key.startswith("aten::")}


def test_one_row_matmuls_reach_blas_without_a_clone_or_a_bias_copy() -> None:
    # without the pass, inductor's (0, 1) strides for the row make aten clone it, and
    # addmm copies the broadcast bias into its output: both are gone with it
    before = aten_ops_of_one_call({"cpp_wrapper": True})
    assert {"aten::clone", "aten::copy_", "aten::expand"} <= before
    options = {"cpp_wrapper": True, "post_grad_custom_post_pass": OneRowMatmuls()}
    after = aten_ops_of_one_call(options)
    assert not after & {"aten::clone", "aten::copy_", "aten::expand"}, after


def column(w: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    # a column taken as a row: viewed with row strides it would read other elements
    return m[:, :1].t() @ w


def row_of_an_input(w: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return m[2:3, :] @ w  # at a storage offset


def row_of_an_intermediate(w: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (m * 2)[1:2, :] @ w


@pytest.mark.parametrize("fn", [column, row_of_an_input, row_of_an_intermediate])
def test_rows_that_are_not_plain_keep_their_elements(fn: Callable[..., torch.Tensor]) -> None:
    torch._dynamo.reset()
    w, m = torch.randn(5, 3), torch.randn(5, 5)
    options = {"post_grad_custom_post_pass": OneRowMatmuls()}
    torch.testing.assert_close(torch.compile(fn, options=options)(w, m), fn(w, m))
