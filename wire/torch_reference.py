"""The PyTorch side of validating a captured model: its exported core-ATen graph run by PyTorch
itself, in float64 (every narrower float widened, dtype arguments included), as a function of the
captured wire program's inputs; the placeholders capture folded away keep their own values."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

NARROW_FLOATS = ("float16", "bfloat16", "float32")


def float64_reference(graph_module: Any, input_names: Sequence[str], fixed: dict[str, np.ndarray]
                      ) -> Callable[..., list[np.ndarray]]:
    """A function of the wire program's inputs (numpy, in order; floats may be float64) running
    `graph_module`'s core-ATen graph in float64 by PyTorch, returning its flat outputs as numpy."""
    import torch

    wide = torch.float64
    narrow = {getattr(torch, name) for name in NARROW_FLOATS}

    def widen(x: Any) -> Any:
        if isinstance(x, torch.dtype):
            return wide if x in narrow else x
        if isinstance(x, torch.Tensor) and x.dtype in narrow:
            return x.to(wide)
        return x

    class Float64(torch.fx.Interpreter):
        def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
            args, kwargs = torch.utils._pytree.tree_map(widen, (args, kwargs))
            return super().call_function(target, args, kwargs)

    placeholders = [n.name for n in graph_module.graph.nodes if n.op == "placeholder"]
    position = {name: i for i, name in enumerate(input_names)}

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        # np.require, not np.ascontiguousarray: that makes a 0-d array 1-d (a scalar buffer's shape lost)
        values = [torch.from_numpy(np.require(inputs[position[p]], requirements="C")) if p in position
                  else torch.from_numpy(np.require(fixed[p], requirements="C")) if isinstance(fixed[p], np.ndarray)
                  else fixed[p] for p in placeholders]  # a fixed flag or number stays as export saw it
        with torch.no_grad():
            outs = Float64(graph_module).run(*[widen(v) for v in values])
        return [o.numpy() for o in torch.utils._pytree.tree_leaves(outs)]

    return run
