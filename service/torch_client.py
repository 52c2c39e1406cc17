"""The client's PyTorch side: capture an nn.Module, a function of tensors or a saved
ExportedProgram locally, and run the optimized wire program on torch tensors (weights bound once,
weight-only work precomputed once). Torch is imported only when a torch object arrives."""
from __future__ import annotations

import sys
from typing import Any

import jax
import numpy as np

from lowering.kernels import output_avals
from lowering.precompute import PrecomputedProgram
from validation.inputs import TRIALS, Draw, nudged, nudges
from validation.judge import Runs, Tally, judge
from validation.verdict import Verdict
from validation.widen import Widened, widen
from wire.execute import jitted_program
from wire.json_types import Program
from wire.precision import declares_64_bit, x64_when
from wire.torch_capture import TorchProgram, capture_exported, capture_torch, to_numpy


def takes_torch(fn: Any, args: tuple) -> bool:
    """Whether `fn` at `args` is a PyTorch call: a module, an ExportedProgram or torch tensors in."""
    torch = sys.modules.get("torch")  # not imported means no torch object can have been built
    if torch is None:
        return False
    return isinstance(fn, (torch.nn.Module, torch.export.ExportedProgram)) or any(
        isinstance(a, torch.Tensor) for a in torch.utils._pytree.tree_leaves(args))


def capture(fn: Any, args: tuple, kwargs: dict | None = None) -> TorchProgram:
    """The captured program of a module or function called with `args` and `kwargs`, or of an
    ExportedProgram as saved."""
    import torch

    if isinstance(fn, torch.export.ExportedProgram):
        return capture_exported(fn.run_decompositions())
    return capture_torch(fn, *args, **(kwargs or {}))


def load_exported(path: str) -> TorchProgram:
    """The captured program of an ExportedProgram saved by torch.export.save (a .pt2 file)."""
    import torch

    return capture(torch.export.load(path), ())


class TorchFunction:
    """An optimized wire program as a function of the captured model's torch inputs: the weights
    are bound (as JAX arrays, so weight-only work runs once), values cross by DLPack."""

    def __init__(self, program: Program, captured: TorchProgram):
        self.program, self.in_spec, self.out_spec = program, captured.in_spec, captured.out_spec
        self.fixed_leaves, self.call, self.mutated = captured.fixed_leaves, captured.call, captured.mutated
        self._specs = captured.program["inputs"][len(captured.weights):]  # the user's tensors, as captured
        # decided once: walking the program for its dtypes on every call cost more than the call's XLA run
        self._x64 = declares_64_bit(program)
        with x64_when(self._x64):
            self._weights = [jax.numpy.asarray(w) for w in captured.weights]
        self._run = PrecomputedProgram.of(program) or jitted_program(program)
        self._guard = captured.guard and (captured.guard.checks, jitted_program(captured.guard.program))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch
        from torch.utils import _pytree

        tensors = self.tensors(args, kwargs)
        for k, (spec, tensor) in enumerate(zip(self._specs, tensors)):
            if list(tensor.shape) != spec["shape"]:
                raise TypeError(f"{self._name(args, kwargs, k)} has shape {list(tensor.shape)}; the program was "
                                f"optimized for {spec['shape']}: optimize it again for this shape (torch.compile "
                                f"does so for each new shape)")
        with x64_when(self._x64):  # torch's int64/float64 inputs cross as they are
            inputs = [*self._weights, *map(_to_jax, tensors)]
            self._check_indices(inputs)
            outs = [torch.from_dlpack(o) for o in self._run(*inputs)]
        # every output is computed before an input the program read is written over
        for position, value in zip(self.mutated, outs):
            tensors[position].copy_(value)
        return _pytree.tree_unflatten(outs[len(self.mutated):], self.out_spec)

    def _check_indices(self, inputs: list[Any]) -> None:
        """Raise IndexError as eager PyTorch would where an index the call supplies is out of
        range, before anything runs or any input is written in place."""
        if self._guard:
            checks, flags = self._guard
            for what, out_of_range in zip(checks, flags(*inputs)):
                if bool(out_of_range):
                    raise IndexError(f"index out of range: {what} (eager PyTorch raises here as well)")

    def _name(self, args: tuple, kwargs: dict[str, Any], k: int) -> str:
        """The call's `k`-th tensor named by where it sits in the arguments: `past_key_values[0]`,
        `argument 1`."""
        from torch.utils import _pytree

        paths = [path for path, _ in _pytree.tree_flatten_with_path(self._bound(args, kwargs))[0]]
        (within, head, *rest) = [path for position, path in enumerate(paths) if position not in self.fixed_leaves][k]
        name = f"argument {head.idx}" if within.idx == 0 else str(head.key)
        for key in rest:
            name += f".{key.name}" if isinstance(key, _pytree.GetAttrKey) else \
                f"[{key.idx}]" if isinstance(key, _pytree.SequenceKey) else f"[{key.key!r}]"
        return name

    def tensors(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        """The program's inputs in a call: its tensors, in the exported order (keyword arguments in
        any order, a transformers model's positional ones bound by name); the values export fixed
        (flags, sizes) checked equal to the example's."""
        from torch.utils import _pytree

        leaves, spec = _pytree.tree_flatten(self._bound(args, kwargs))
        if spec != self.in_spec:
            raise TypeError(f"{_structure_difference(spec, self.in_spec)}; expected inputs structured as the "
                            f"example inputs ({self.in_spec}), got {spec}")
        for position, value in self.fixed_leaves.items():
            if leaves[position] != value:
                raise TypeError(f"the model was optimized with {value!r} as its input {position} (export fixes "
                                f"values that are not tensors); this call passes {leaves[position]!r}")
        return [x for k, x in enumerate(leaves) if k not in self.fixed_leaves]

    def _bound(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """A call's arguments as the example's were exported: a transformers model's bound by name,
        keyword arguments in the exported order, the ones left out at their defaults."""
        if self.call is not None:
            args, kwargs = (), self.call.bind(args, kwargs)
        named = self.in_spec.child(1).context if self.in_spec.num_children == 2 else None
        if named is not None and set(kwargs) <= set(named):  # a dict's pytree spec holds its keys in order
            kwargs = {k: kwargs[k] if k in kwargs else self.call.default(k) if self.call else None for k in named}
        return args, kwargs


def _structure_difference(got: Any, expected: Any) -> str:
    """The first argument whose structure differs from the example's, by name or position and
    leaf count (a cache of another layer count), else the call's arguments as a whole."""
    if not got.num_children == expected.num_children == 2:
        return "the arguments differ from the example's"
    (got_args, got_kwargs), (expected_args, expected_kwargs) = got.children_specs, expected.children_specs
    named = [(f"argument {k}", g, e) for k, (g, e) in enumerate(zip(got_args.children_specs,
                                                                    expected_args.children_specs))]
    if got_kwargs.context == expected_kwargs.context:
        named += list(zip(got_kwargs.context, got_kwargs.children_specs, expected_kwargs.children_specs))
    for name, g, e in named:
        if g != e:
            return (f"{name} holds {g.num_leaves} tensors or values where the example held {e.num_leaves}"
                    if g.num_leaves != e.num_leaves else f"{name} is structured otherwise than the example")
    return "the arguments differ from the example's in number or names"


def _to_jax(tensor: Any) -> Any:
    """A torch tensor as a JAX array (zero-copy through DLPack where the layout allows)."""
    t = tensor.detach()
    if t.is_contiguous() and not t.is_conj() and not t.is_neg():
        try:
            return jax.dlpack.from_dlpack(t)
        except (TypeError, RuntimeError, ValueError):  # dtypes DLPack cannot carry (e.g. some fp8)
            pass
    return jax.numpy.asarray(np.require(to_numpy(t), requirements="C"))  # a 0-d tensor stays 0-d


def validate_against_torch(captured: TorchProgram, optimized: Program, seed: int = 0) -> Verdict:
    """The verdict on `optimized` with PyTorch itself as the reference: the exported graph run by
    PyTorch in float64 against the optimized program in float64, on the draws and under the verdict
    rules of translation validation (`validation.judge.judge`). Two frameworks' float64 kernels round
    differently (a convolution sums in another order) and capture rounds constants to the model's
    dtype (gelu's 1/sqrt(2) in float32): per draw, what separates the captured program from PyTorch
    is measured and allowed, on top of the rounding the captured program's own sensitivity
    explains (from the nudged inputs), and no more: a wrong program still fails."""
    dtypes = [dtype for _, dtype in output_avals(captured.program)]
    verdict = Tally("torch float64", dtypes)
    try:
        candidate, original = Widened(optimized), Widened(captured.program)
    except (TypeError, ValueError) as err:
        return verdict.result("inconclusive", f"the programs cannot be evaluated in float64: {err}")

    def evaluate(args: list[np.ndarray], draw: Draw, relative: float):
        wide = widen(args)
        directions = nudges(captured.program, draw.seed)
        return Runs(captured.reference(*wide), candidate(wide), original(nudged(wide, directions, relative)),
                    original(wide))

    return judge(captured.program, dtypes, evaluate, verdict, TRIALS, seed, None)
