"""`torch.compile(model, backend="optu")`: each graph Dynamo hands over (one per graph break) is
traced per input signature to core ATen, captured, optimized (in-process or by a server) and run
as JAX behind DLPack. Options: hardware, time_limit_s, server, and any OptimizeOptions field."""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Callable

from service.client import DEFAULT_HARDWARE, optimize_program
from service.torch_client import TorchFunction
from validation.response_json import ResponseJSON
from wire.torch_capture import TorchCaptureError, capture_torch

# options torch.compile passes that are the client's, not OptimizeOptions fields
CLIENT_OPTIONS = ("hardware", "server", "timeout")
KEPT_RESPONSES = 64  # optimized requests this process keeps for graphs traced again


class _Responses:
    """The responses this process's backends got, by the request they answer: a graph Dynamo
    traces again (after a recompile, or as one graph with symbolic sizes where it had static ones)
    is optimized at a signature it has seen once, as a server's cache answers a request twice."""

    def __init__(self, kept: int):
        self.kept, self.by_request, self.lock = kept, OrderedDict(), threading.Lock()

    def get(self, request: dict[str, Any], optimize: Callable[[], ResponseJSON]) -> ResponseJSON:
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        with self.lock:
            if key in self.by_request:
                self.by_request.move_to_end(key)
                return self.by_request[key] | {"cache": "hit"}
        response = optimize()
        with self.lock:
            self.by_request[key] = response
            while len(self.by_request) > self.kept:
                self.by_request.popitem(last=False)
        return response


RESPONSES = _Responses(KEPT_RESPONSES)


def optu_backend(gm: Any, example_inputs: list[Any], options: dict[str, Any] | None = None,
                 **_: Any) -> Callable[..., Any]:
    """The Dynamo backend: a callable of the graph's flat inputs that optimizes once per input
    signature (shapes, dtypes) and runs the optimized program."""
    return _SignatureCache(_views_as_reshapes(gm), [_is_weight(x) for x in example_inputs], dict(options or {}))


def _views_as_reshapes(gm: Any) -> Any:
    """`gm` with each `view` a `reshape`: the same values, but no demand on strides. Dynamo traced
    the graph with eager's layouts; traced again to core ATen, an attention that decomposes
    otherwise hands a view a transposed tensor it cannot view (GPT-2's heads merged back)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_method" and node.target == "view" and not _is_dtype_view(node):
            node.target, changed = "reshape", True
    if changed:
        gm.recompile()
    return gm


def _is_dtype_view(node: Any) -> bool:
    """`x.view(torch.int32)` reinterprets bits: not a reshape."""
    import torch

    return len(node.args) == 2 and isinstance(node.args[1], torch.dtype) or "dtype" in node.kwargs


def _is_weight(x: Any) -> bool:
    import torch

    return isinstance(x, torch.nn.Parameter)


class _SignatureCache:
    """One optimized program per input signature (shapes, dtypes, and the values of the sizes a
    graph Dynamo traced with symbolic shapes takes): each new one is traced with static sizes and
    optimized afresh."""

    def __init__(self, gm: Any, weights: list[bool], options: dict[str, Any]):
        self.gm, self.weights = gm, weights
        self.client = {k: options.pop(k) for k in CLIENT_OPTIONS if k in options}
        self.options = options
        self.compiled: dict[tuple, Callable[..., Any]] = {}
        self.responses: dict[tuple, ResponseJSON] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        import torch

        if torch.is_grad_enabled() and any(getattr(a, "requires_grad", False) for a in args):
            raise TorchCaptureError("the optu backend compiles inference: gradients would not flow through "
                                    "the optimized program; call the compiled model under torch.no_grad() "
                                    "or torch.inference_mode()")
        key = tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else a for a in args)
        with self._lock:
            if key not in self.compiled:
                self.compiled[key] = self._compile(args, key)
        return self.compiled[key](*args)

    def _compile(self, args: tuple, key: tuple) -> Callable[..., Any]:
        import torch

        def at_these_sizes(*tensors: Any) -> Any:
            # the sizes Dynamo passes as numbers (a graph traced with symbolic shapes) are fixed here
            it = iter(tensors)
            return self.gm(*[next(it) if isinstance(a, torch.Tensor) else a for a in args])

        # torch.export traces the graph again with static sizes: functionalized, decomposed to core
        # ATen with oneDNN off (RNNs become their steps), exactly as a model given to `optimize`
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        captured = capture_torch(at_these_sizes, *tensors)
        weights = [w for w, a in zip(self.weights, args) if isinstance(a, torch.Tensor)]
        for spec, weight in zip(captured.program["inputs"][len(captured.weights):], weights):
            if weight:  # a parameter Dynamo passes as an input: constant across calls
                spec["role"] = "weight"
        request = {"program": captured.program, "hardware": self.client.get("hardware", DEFAULT_HARDWARE),
                   "server": self.client.get("server"), "options": self.options}
        response = RESPONSES.get(request, lambda: optimize_program(
            captured.program, server=request["server"], hardware=request["hardware"],
            timeout=self.client.get("timeout", 120), options=self.options))
        self.responses[key] = response
        run = TorchFunction(response["program"], captured)
        return lambda *call_args: run(*[a for a in call_args if isinstance(a, torch.Tensor)])
