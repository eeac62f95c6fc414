"""An inductor pass for the compiled one-token decoding step on a CPU: one-row matmuls.

At batch 1 every linear layer of a decoding step multiplies a single row, (1, k) by
(k, n). Inductor gives such a row the strides (0, 1) (a size-1 dimension's stride is
free), which aten's CPU ``addmm``/``mm`` do not accept as a BLAS operand: they clone the
row before every call. And ``addmm`` copies the broadcast bias into its output first.
This pass, run on the post-grad graph, views each one-row input with the strides of a
row, (k, 1) — the same elements, as its last dimension is contiguous — and, in full
precision, splits ``addmm`` into ``mm`` and an add that inductor fuses into the next
pointwise kernel.

At the baby size, batch 1, 2 threads, decoding took 538 µs a token against 602 µs
without the pass (``attnlab.bench.decode_builds``, 7 rounds in turns; see
docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten


def _call(graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
    """A new node ``target(*args)``, its metadata computed on the fake tensors of its
    inputs (``node.meta["val"]``), as inductor's lowering reads it."""
    node = graph.call_function(target, args)
    values = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
    with values[0].fake_mode:
        node.meta["val"] = target(*values)
    return node


_FULL_PRECISION = (torch.float32, torch.float64)


def _one_contiguous_row(value: Any) -> bool:
    """Whether a node's value is a (1, k) tensor of static shape, contiguous along k."""
    if not isinstance(value, torch.Tensor) or value.dim() != 2:
        return False
    if not all(isinstance(n, int) for n in (*value.shape, value.stride(1))):
        return False
    return value.size(0) == 1 and value.stride(1) == 1


class OneRowMatmuls(CustomGraphPass):
    """``addmm(bias, a, b)`` and ``mm(a, b)`` with ``a`` of one row whose elements are
    contiguous: ``mm(as_strided(a, (1, k), (k, 1)), b)`` (+ ``bias``)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function" or node.kwargs:
                continue
            if node.target is aten.addmm.default and len(node.args) == 3:
                bias, a, b = node.args
            elif node.target is aten.mm.default:
                (a, b), bias = node.args, None
            else:
                continue
            row = a.meta.get("val")
            if not _one_contiguous_row(row):
                continue
            k = row.size(1)
            with graph.inserting_before(node):
                strided = _call(graph, aten.as_strided.default, a, [1, k], [k, 1])
                if bias is not None and row.dtype not in _FULL_PRECISION:
                    # half precision: keep the bias inside, where BLAS adds it unrounded
                    out = _call(graph, aten.addmm.default, bias, strided, b)
                else:
                    out = _call(graph, aten.mm.default, strided, b)
                    if bias is not None:
                        out = _call(graph, aten.add.Tensor, out, bias)
            node.replace_all_uses_with(out)
            graph.erase_node(node)

    def uuid(self) -> Any:
        """Inductor's cache key for graphs compiled with this pass: this file's contents."""
        return get_hash_for_files((__file__,))
