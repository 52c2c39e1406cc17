"""Run one ATen overload two ways: captured into a wire program (through a one-node FX graph, as
torch.export would hand it over) and executed as JAX, and eagerly by PyTorch."""
from __future__ import annotations

import operator
from typing import Any

import jax
import numpy as np
import torch

from wire.execute import program_to_callable, typecheck
from wire.torch_capture import graph_to_wire, to_numpy


def aten_graph(
    op: Any, args: tuple, kwargs: dict, outputs: int | None = None
) -> tuple[torch.fx.Graph, list[torch.Tensor], list[torch.Tensor]]:
    """A graph of `op` applied to placeholders for the tensors in args/kwargs, returning its first
    `outputs` outputs (all when None); each node's meta holds the eager value, as export's fake
    tensors would."""
    graph, inputs = torch.fx.Graph(), []

    def lift(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            node = graph.placeholder(f"x{len(inputs)}")
            node.meta["val"] = a
            inputs.append(a)
            return node
        if isinstance(a, (list, tuple)):
            return type(a)(lift(x) for x in a)
        return a

    node = graph.call_function(op, lift(tuple(args)), {k: lift(v) for k, v in kwargs.items()})
    value = op(*args, **kwargs)
    node.meta["val"] = value
    results = (list(value) if isinstance(value, (list, tuple)) else [value])[:outputs]
    outs = []
    for i, r in enumerate(results):
        item = graph.call_function(operator.getitem, (node, i)) if isinstance(value, (list, tuple)) else node
        item.meta["val"] = r
        outs.append(item)
    graph.output(outs)
    return graph, inputs, results


def run_both(op: Any, *args: Any, outputs: int | None = None, **kwargs: Any
             ) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    """(wire program's outputs, torch's outputs, the program) of `op` at these arguments."""
    graph, inputs, expected = aten_graph(op, args, kwargs, outputs)
    program, guard = graph_to_wire(graph, ["activation"] * len(inputs))
    with jax.enable_x64(True):  # int64/float64 run as declared
        typecheck(program)
        got = program_to_callable(program)(*[to_numpy(t) for t in inputs])
        if guard is not None:  # torch ran the op at these arguments, so no index was out of range
            typecheck(guard.program)
            assert not any(program_to_callable(guard.program)(*[to_numpy(t) for t in inputs])), guard.checks
    return [np.asarray(g) for g in got], [to_numpy(e) for e in expected], program


def assert_matches_torch(op: Any, *args: Any, rtol: float = 1e-5, atol: float = 1e-6, outputs: int | None = None,
                         **kwargs: Any) -> dict:
    got, expected, program = run_both(op, *args, outputs=outputs, **kwargs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return program
