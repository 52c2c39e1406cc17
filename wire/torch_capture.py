"""Capture a PyTorch model as an `optu.jaxpr/v1` wire program: torch.export with the core ATen
decompositions, then each FX node lowered through the ATen table (wire.aten), traced under JAX's
x64 scoped to the capture so int64 and float64 stay as torch declares them."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import jax
import numpy as np

from wire.aten import OutSpec, Unsupported, is_tensor, load_families, numpy_dtype
from wire.aten.checks import AssertionFailed
from wire.aten.nn import Unavailable
from wire.capture import inline_calls, jaxpr_to_wire
from wire.format import WireProgram
from wire.index_guard import Bound, IndexGuard, IndexOutOfRange, collecting, split_guard
from wire.torch_hf import NamedCall, export_pretrained, is_pretrained
from wire.torch_reference import float64_reference


class TorchCaptureError(ValueError):
    """A torch model that cannot become a wire program; the message says which part and why."""


class UnsupportedAtenOp(TorchCaptureError):
    """An FX node whose ATen op (or output) the table has no lowering for."""

    def __init__(self, op: str, node: str, why: str = "has no lowering in the ATen table"):
        super().__init__(f"ATen op {op} (FX node {node!r}) {why}")
        self.op, self.node = op, node


class TorchExportError(TorchCaptureError):
    """torch.export refused the model (data-dependent control flow, unsupported Python, ...)."""


@dataclass
class TorchProgram:
    """A captured model: its wire program (weight inputs first, then the user's tensors), the
    weights' values in input order, torch's pytree specs of the user inputs and outputs, and the
    float64 reference validation compares against."""

    program: dict
    weights: list[np.ndarray]
    in_spec: Any
    out_spec: Any
    # PyTorch running the exported graph in float64, as a function of the program's inputs
    reference: Callable[..., list[np.ndarray]] | None = None
    # the user's inputs that are not tensors (a flag, a size), by position among the input
    # pytree's leaves: export fixed them, so a call must pass the same values
    fixed_leaves: dict[int, Any] = field(default_factory=dict)
    # how a call binds to a transformers model's exported inputs (by forward's names); None: as exported
    call: NamedCall | None = None
    # the user's tensors the model updates in place (a static KV cache), by position among the
    # program's user inputs: the program's first outputs are their new values, in this order
    mutated: list[int] = field(default_factory=list)
    # the index bounds eager PyTorch checks on each call (None: every index is decided by the capture)
    guard: IndexGuard | None = None


def to_numpy(tensor: Any) -> np.ndarray:
    t = tensor.detach().cpu()
    if t.dtype.is_floating_point and t.dtype.itemsize == 2 and str(t.dtype) != "torch.float16":
        return t.float().numpy().astype(numpy_dtype(t.dtype))  # exact: widening then narrowing
    return t.resolve_conj().resolve_neg().numpy()


def export(model: Any, args: Sequence[Any], kwargs: dict | None = None) -> Any:
    """torch.export of an nn.Module or a function of tensors, decomposed to core ATen."""
    return _export(model, args, kwargs or {})[0]


def _export(model: Any, args: Sequence[Any], kwargs: dict) -> tuple[Any, NamedCall | None]:
    import torch

    module = model if isinstance(model, torch.nn.Module) else _as_module(model)
    try:
        if is_pretrained(model):  # exported as transformers exports it: caches as pytrees, flags fixed
            exported, call = export_pretrained(model, args, kwargs)
        else:
            exported, call = torch.export.export(module, tuple(args), kwargs or None), None
    except Exception as exc:  # torch.export raises many types; each means "cannot be exported"
        reason = str(exc).strip().split("\n")
        raise TorchExportError(f"torch.export cannot export {_describe(model)}: {type(exc).__name__}: "
                               f"{' '.join(line.strip() for line in reason[:6])[:1200]}") from exc
    return exported.run_decompositions(), call


def capture_torch(model: Any, *args: Any, **kwargs: Any) -> TorchProgram:
    """The wire program of `model` (an nn.Module, a transformers model or a function of tensors)
    called with `args` and `kwargs`."""
    exported, call = _export(model, args, kwargs)
    return replace(capture_exported(exported), call=call)


def capture_exported(exported: Any) -> TorchProgram:
    """The wire program of a core-ATen ExportedProgram (e.g. from torch.export.load): parameters
    become weight inputs; buffers (position ids, masks, running statistics) and lifted constants
    become consts, values of the program that no check draws; non-tensor inputs are fixed."""
    from torch.export.graph_signature import InputKind, OutputKind

    sig = exported.graph_signature
    mutated = [spec.target for spec in sig.output_specs if spec.kind == OutputKind.USER_INPUT_MUTATION]
    for spec in sig.output_specs:
        if spec.kind == OutputKind.TOKEN:
            raise TorchCaptureError("the model calls an op with side effects (torch.export threads an effect "
                                    "token through it); only pure inference graphs can be optimized")
        if spec.kind not in (OutputKind.USER_OUTPUT, OutputKind.USER_INPUT_MUTATION):
            raise TorchCaptureError(f"the model updates {spec.target!r} in place ({spec.kind.name}); only its "
                                    "inputs may be updated in place, not its own state (BatchNorm in training "
                                    "mode does this: call .eval() first)")
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder"]
    roles, weights, constants, fixed_leaves = [], [], {}, {}
    user_inputs = 0
    for spec, node in zip(sig.input_specs, placeholders):
        source = exported.state_dict if spec.target in exported.state_dict else exported.constants
        if spec.kind == InputKind.PARAMETER and node.users:
            roles.append("weight")
            weights.append(to_numpy(source[spec.target]))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            constants[node.name] = to_numpy(source[spec.target])
        elif spec.kind == InputKind.USER_INPUT and is_tensor(node.meta.get("val")):
            roles.append("activation")
            user_inputs += 1
        elif spec.kind == InputKind.USER_INPUT and _fixable(node.meta.get("val")):
            constants[node.name] = fixed_leaves[user_inputs] = node.meta.get("val")
            user_inputs += 1
        else:
            raise TorchCaptureError(f"input {node.name!r} ({spec.kind.name}) is neither a tensor nor a number; "
                                    "only those can be captured (pass other values by closing over them)")
    program, guard = graph_to_wire(exported.graph, roles, constants)
    inputs = [n.name for n in placeholders if n.name not in constants]
    user_tensors = inputs[len(weights):]
    return TorchProgram(program, weights, exported.call_spec.in_spec, exported.call_spec.out_spec,
                        float64_reference(exported.graph_module, inputs, constants), fixed_leaves,
                        mutated=[user_tensors.index(name) for name in mutated], guard=guard)


def _fixable(value: Any) -> bool:
    """A non-tensor input export specialized on: a flag, a number, a string or None."""
    return value is None or isinstance(value, (bool, int, float, str))


def graph_to_wire(graph: Any, roles: Sequence[str], constants: dict[str, Any] | None = None
                  ) -> tuple[dict, IndexGuard | None]:
    """The wire program of a core-ATen FX graph: its placeholders (less those in `constants`) are
    the program's inputs with `roles`, its output node's values the outputs; and the guard of the
    index bounds torch would check on its inputs."""
    constants = constants or {}
    inputs = [n for n in graph.nodes if n.op == "placeholder" and n.name not in constants]
    avals = [_aval(n) for n in inputs]
    checks: list[str] = []

    def outputs_and_flags(*xs: Any) -> list:
        with collecting() as bounds:
            outs = _interpret(graph, inputs, xs, constants, bounds)
        checks.extend(bound.what for bound in bounds)
        return outs + [bound.flag for bound in bounds]

    with jax.enable_x64(True):
        closed = inline_calls(jax.make_jaxpr(outputs_and_flags)(*avals))
        program, guard = split_guard(jaxpr_to_wire(closed, list(roles)), checks)
    WireProgram.model_validate(program)
    return program, guard


def _aval(node: Any) -> jax.ShapeDtypeStruct:
    spec = _out_spec(node)
    return jax.ShapeDtypeStruct(spec.shape, spec.dtype)


def _interpret(graph: Any, inputs: list, values: Sequence[Any], constants: dict[str, Any],
               bounds: list[Bound]) -> list:
    import jax.numpy as jnp
    from torch.fx.node import map_aggregate

    table = load_families()
    env: dict[Any, Any] = dict(zip(inputs, values))
    # array constants become JAX constants; Python numbers (a size a graph takes as input) stay numbers
    env.update((n, jnp.asarray(c) if isinstance(c, np.ndarray) else c)
               for n in graph.nodes if (c := constants.get(n.name)) is not None)

    def value(a: Any) -> Any:
        return map_aggregate(a, lambda x: env[x] if hasattr(x, "op") and x in env else x)

    for node in graph.nodes:
        if node.op == "placeholder" or node in env:  # inputs, and constants held by get_attr nodes
            continue
        if node.op == "output":
            outs = [value(x) for x in _flat(node.args[0])]
            return [_available(x, "output", node) for x in outs]
        if node.op != "call_function":
            raise UnsupportedAtenOp(str(node.target), node.name, f"is a {node.op} node, which capture cannot lower")
        if node.target is operator.getitem:
            env[node] = _available(value(node.args[0])[node.args[1]], str(node.args[0].target), node)
            continue
        op = str(node.target)
        entry = table.get(op)
        if entry is None:
            raise UnsupportedAtenOp(op, node.name)
        args = [_available(a, op, node) for a in value(list(node.args))]
        out, stated = _out_spec(node), len(bounds)
        try:
            result = entry.lower(out, *args, **value(dict(node.kwargs)))
        except (AssertionFailed, IndexOutOfRange) as failed:
            raise TorchCaptureError(f"FX node {node.name!r} ({op}): {failed}") from None
        except Unsupported as refused:
            raise UnsupportedAtenOp(op, node.name, str(refused)) from None
        _check(result, out, node)
        for bound in bounds[stated:]:  # an index lowering's operand 0 is the tensor it indexes
            bound.what = f"FX node {node.name!r} ({op}) on {getattr(node.args[0], 'name', 'its operand')} {bound.what}"
        env[node] = result
    raise TorchCaptureError("the FX graph has no output node")


def _flat(x: Any) -> list:
    return [y for item in x for y in _flat(item)] if isinstance(x, (list, tuple)) else [x]


def _available(x: Any, op: str, node: Any) -> Any:
    if isinstance(x, Unavailable):
        raise UnsupportedAtenOp(op, node.name, f"is used for {x.what}, which capture does not compute")
    return x


def _out_spec(node: Any) -> OutSpec:
    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (list, tuple)) else [val]
    specs = []
    for v in vals:
        if not is_tensor(v):
            specs.append(None)
            continue
        if not all(isinstance(d, int) for d in v.shape):
            raise TorchCaptureError(f"node {node.name!r} has a symbolic shape {tuple(v.shape)}; capture needs "
                                    "static shapes (export without dynamic_shapes)")
        specs.append((tuple(int(d) for d in v.shape), numpy_dtype(v.dtype)))
    first = next((s for s in specs if s is not None), ((), np.dtype(np.float32)))
    return OutSpec(str(node.target), first[0], first[1], tuple(specs), _promoted(node), _layout(node))


def _layout(node: Any) -> tuple[tuple[int, ...], int] | None:
    operand = node.args[0] if node.args else None
    v = operand.meta.get("val") if hasattr(operand, "meta") else None
    if not is_tensor(v) or not hasattr(v, "stride"):
        return None
    try:
        return tuple(int(s) for s in v.stride()), int(v.storage_offset())
    except (RuntimeError, TypeError):  # a tensor with no strides (sparse, nested) or symbolic ones
        return None


def _promoted(node: Any) -> np.dtype | None:
    """torch's result type of the node's first two operands, when they are tensors or numbers."""
    import torch

    operands = []
    for a in node.args[:2]:
        v = a.meta.get("val") if hasattr(a, "meta") else a
        if is_tensor(v):
            operands.append(torch.empty((1,) * v.dim(), dtype=v.dtype))
        elif isinstance(v, (bool, int, float)):
            operands.append(v)
    if not operands or not is_tensor(operands[0]):
        return None
    try:
        return numpy_dtype(torch.result_type(*operands) if len(operands) == 2 else operands[0].dtype)
    except (RuntimeError, TypeError):
        return None


def _check(result: Any, out: OutSpec, node: Any) -> None:
    """A lowering's result must have torch's shapes and dtypes exactly: the guard that makes a
    lowering bug an error here, never a wrong program."""
    got = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(got) != len(out.all):
        raise UnsupportedAtenOp(out.name, node.name, f"lowered to {len(got)} outputs; torch has {len(out.all)}")
    for g, want in zip(got, out.all):
        if want is None or isinstance(g, Unavailable):
            continue
        have = (tuple(g.shape), np.dtype(g.dtype))
        if have != want:
            raise UnsupportedAtenOp(out.name, node.name, f"lowered to {have[1].name}{list(have[0])} where torch "
                                    f"computes {want[1].name}{list(want[0])} (these arguments are not supported)")


def _describe(model: Any) -> str:
    return type(model).__name__ if hasattr(model, "forward") else getattr(model, "__name__", repr(model))


def _as_module(fn: Any) -> Any:
    """An nn.Module calling the plain function `fn`, since torch.export takes modules."""
    import torch

    class FunctionModule(torch.nn.Module):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    return FunctionModule()
