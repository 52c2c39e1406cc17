"""A model's own assertions (metadata checks a dtype cast emits, size assertions, range
constraints, value checks) are decided at capture or compute nothing: a program with them captures
and runs equal to eager, and one whose assertion is false at the captured sizes is an error naming it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wire.execute import program_to_callable
from wire.torch_capture import TorchCaptureError, capture_torch, to_numpy


def _run(captured, *args):
    return [np.asarray(o) for o in program_to_callable(captured.program)(*captured.weights, *map(to_numpy, args))]


def test_a_cast_in_an_embedding_captures_through_its_metadata_assertion():
    table = torch.nn.Embedding(10, 4)
    model = lambda ids: table(ids).to(torch.float32) * 2  # noqa: E731
    ids = torch.tensor([[1, 9, 3]])
    captured = capture_torch(model, ids)
    np.testing.assert_allclose(_run(captured, ids)[0], to_numpy(model(ids)).astype(np.float32), rtol=1e-6)


def test_metadata_size_and_range_assertions_that_hold_compute_nothing():
    def checked(x):
        torch.ops.aten._assert_tensor_metadata(x, dtype=torch.float32)
        torch.ops.aten._assert_scalar(x.shape[0] == 2, "two rows")
        torch.ops.aten.sym_constrain_range(x.shape[1], min=1, max=8)
        torch.ops.aten._assert_async(x.sum() > -1e9, "finite sum")
        return x + 1

    x = torch.randn(2, 3)
    captured = capture_torch(checked, x)
    # the value check's operand is computed as the model computes it; the checks add nothing
    assert [e["op"] for e in captured.program["eqns"]] == ["reduce_sum", "gt", "add"]
    np.testing.assert_array_equal(_run(captured, x)[0], to_numpy(x + 1))


@pytest.mark.parametrize("size, dtype, says", [([3, 2], torch.float32, "size \\[3, 2\\]"),
                                               ([2, 3], torch.float64, "dtype torch.float64")])
def test_a_false_metadata_assertion_is_an_error_naming_it(size, dtype, says):
    from wire.torch_capture import graph_to_wire

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.randn(2, 3)
    check = graph.call_function(torch.ops.aten._assert_tensor_metadata.default, (x, size, None, dtype))
    check.meta["val"] = None
    graph.output([x])
    with pytest.raises(TorchCaptureError, match=f"_assert_tensor_metadata.*{says}"):
        graph_to_wire(graph, ["activation"])
