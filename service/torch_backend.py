"""`torch.compile(model, backend="optu")`: each graph Dynamo hands over (one per graph break) is
traced per input signature to core ATen, captured, optimized (in-process or by a server) and run
as JAX behind DLPack. Options: hardware, time_limit_s, server, and any OptimizeOptions field."""
from __future__ import annotations

import threading
from typing import Any, Callable

from service.client import DEFAULT_HARDWARE, optimize_program
from service.torch_client import TorchFunction
from wire.torch_capture import TorchCaptureError, TorchProgram, graph_to_wire, to_numpy

# options torch.compile passes that are the client's, not OptimizeOptions fields
CLIENT_OPTIONS = ("hardware", "server", "timeout")


def optu_backend(gm: Any, example_inputs: list[Any], options: dict[str, Any] | None = None,
                 **_: Any) -> Callable[..., Any]:
    """The Dynamo backend: a callable of the graph's flat inputs that optimizes once per input
    signature (shapes, dtypes) and runs the optimized program."""
    return _SignatureCache(gm, [_is_weight(x) for x in example_inputs], dict(options or {}))


def _is_weight(x: Any) -> bool:
    import torch

    return isinstance(x, torch.nn.Parameter) or (isinstance(x, torch.Tensor) and not x.requires_grad
                                                 and getattr(x, "_is_param", False))


class _SignatureCache:
    """One optimized program per input signature: a new shape (including one Dynamo traced with
    symbolic sizes) is traced afresh with static sizes and optimized again."""

    def __init__(self, gm: Any, weights: list[bool], options: dict[str, Any]):
        self.gm, self.weights = gm, weights
        self.client = {k: options.pop(k) for k in CLIENT_OPTIONS if k in options}
        self.options = options
        self.compiled: dict[tuple, TorchFunction] = {}
        self.responses: dict[tuple, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        import torch

        if torch.is_grad_enabled() and any(getattr(a, "requires_grad", False) for a in args):
            raise TorchCaptureError("the optu backend compiles inference: gradients would not flow through "
                                    "the optimized program; call the compiled model under torch.no_grad() "
                                    "or torch.inference_mode()")
        key = tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else ("scalar", a) for a in args)
        with self._lock:
            if key not in self.compiled:
                self.compiled[key] = self._compile(args, key)
        return self.compiled[key](*[a for a in args if hasattr(a, "shape")])

    def _compile(self, args: tuple, key: tuple) -> TorchFunction:
        import torch
        from torch._decomp import core_aten_decompositions
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils import _pytree

        with torch.no_grad():  # inference: no autograd bookkeeping in the decomposed graph
            traced = make_fx(self.gm, decomposition_table=core_aten_decompositions(), tracing_mode="fake")(*args)
        placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
        constants = {n.name: to_numpy(getattr(traced, n.target)) for n in traced.graph.nodes if n.op == "get_attr"}
        for node, a in zip(placeholders, args):
            if not hasattr(a, "shape"):  # a Python number Dynamo passes: fixed in this signature
                constants[node.name] = a
        roles = [("weight" if w else "activation") for w, a in zip(self.weights, args) if hasattr(a, "shape")]
        program = graph_to_wire(traced.graph, roles, constants)
        response = optimize_program(program, server=self.client.get("server"),
                                    hardware=self.client.get("hardware", DEFAULT_HARDWARE),
                                    timeout=self.client.get("timeout", 120), options=self.options)
        self.responses[key] = response
        with torch.no_grad():
            example_out = self.gm(*args)
        tensors = tuple(a for a in args if hasattr(a, "shape"))
        captured = TorchProgram(program, [], _pytree.tree_flatten((tensors, {}))[1],
                                _pytree.tree_flatten(example_out)[1])
        return TorchFunction(response["program"], captured)
