"""The layout side of a fused attention kernel: every axis of the attention's values named
([batch..., queries, keys] from the probabilities the mix reads, contracted and output-width axes
from the products), and values made canonical by standard ops: transposed to the named order,
broadcast where a name is missing, reshaped to one axis per group of names."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from costmodel.key_blocking import KernelSteps, Step
from wire.json_types import Eqn, Tensor

Labels = list[str | None]  # per axis: b<i> (batch), q, k, c<i> (contracted), w<i> (output width); None: a unit axis


class CannotRealize(Exception):
    """The attention's shape is one the canonical kernel does not name."""


def spec(name: str, shape: list[int], dtype: str) -> Tensor:
    return {"name": name, "shape": list(shape), "dtype": dtype}


@dataclass
class Emitter:
    """Equations built around the fused kernel, with fresh names."""

    prefix: str
    avals: dict[str, tuple[tuple[int, ...], str]]
    eqns: list[Eqn] = field(default_factory=list)
    reshaped: dict[str, str] = field(default_factory=dict)  # a reshape's result -> its operand

    def emit(self, op: str, ins: list[Any], shape: list[int], dtype: str, params: dict[str, Any],
             name: str | None = None) -> str:
        name = name or f"{self.prefix}_{len(self.eqns)}"
        self.eqns.append({"op": op, "in": ins, "out": [spec(name, shape, dtype)], "params": params})
        self.avals[name] = (tuple(shape), dtype)
        return name

    def canonical(self, name: str, labels: Labels, groups: list[list[str]], sizes: dict[str, int],
                  broadcast: bool) -> str:
        """`name` (its axes named by `labels`) as one axis per group of names, in order; a name it
        lacks is broadcast to its size where `broadcast` (else where the group has another)."""
        shape, dtype = self.avals[name]
        if any(label is None and size != 1 for label, size in zip(labels, shape)):
            raise CannotRealize(f"{name}: an axis of size > 1 the attention does not name")
        order = [label for group in groups for label in group]
        if any(label is not None and label not in order for label in labels) or \
                len({label for label in labels if label}) != sum(label is not None for label in labels):
            raise CannotRealize(f"{name}: axes {labels} are not the attention's")
        present = [label for label in labels if label is not None]
        if len(present) != len(labels):
            shape = tuple(s for label, s in zip(labels, shape) if label is not None)
            name = self.reshape(name, list(shape))
        sorted_present = sorted(present, key=order.index)
        if sorted_present != present:
            permutation = [present.index(label) for label in sorted_present]
            shape = tuple(shape[p] for p in permutation)
            name = self.emit("transpose", [name], list(shape), dtype, {"permutation": permutation})
        kept = [label for group in groups for label in group
                if label in present or broadcast or any(other in present for other in group)]
        if any(sizes[label] != 1 for label in kept if label not in present):  # unit axes: the reshape adds them
            shape = tuple(sizes[label] for label in kept)
            dims = [kept.index(label) for label in sorted_present]
            name = self.emit("broadcast_in_dim", [name], list(shape), dtype,
                             {"shape": list(shape), "broadcast_dimensions": dims, "sharding": None})
        merged = [math.prod(sizes[label] for label in group if label in kept) for group in groups]
        return self.reshape(name, merged) if list(shape) != merged else name

    def reshape(self, name: str, shape: list[int], out: str | None = None) -> str:
        name = self.reshaped.get(name, name)  # a reshape of a reshape: one (the first is left dead)
        result = self.emit("reshape", [name], shape, self.avals[name][1],
                           {"new_sizes": shape, "dimensions": None, "sharding": None}, out)
        self.reshaped[result] = name
        return result


def view_input_labels(view: KernelSteps, step: Step, labels: Labels) -> Labels:
    """The names of a row-keeping view's operand's axes, from its result's."""
    if step.op == "transpose":
        named: Labels = [None] * len(labels)
        for out_axis, in_axis in enumerate(step.params["permutation"]):
            named[in_axis] = labels[out_axis]
        return named
    # a view adding or dropping unit axes: the others map in order
    outer = iter(label for label, size in zip(labels, view.shape(step.out)) if size != 1)
    return [next(outer) if size != 1 else None for size in view.shape(step.ins[0])]


def dot_labels(step: Step, ranks: tuple[int, int], side: int, out_labels: Labels) -> Labels:
    """The names of one operand's axes of a dot_general whose result's axes are `out_labels`:
    batch and free axes from the result, the contracted ones c<i> by their pair's index."""
    (lc, rc), (lb, rb) = step.params["dimension_numbers"]
    contracting, batch = [list(lc), list(rc)], [list(lb), list(rb)]
    free_count = [ranks[s] - len(contracting[s]) - len(batch[s]) for s in (0, 1)]
    named: Labels = [None] * ranks[side]
    for j, axis in enumerate(batch[side]):
        named[axis] = out_labels[j]
    for i, axis in enumerate(contracting[side]):
        named[axis] = f"c{i}"
    free = [axis for axis in range(ranks[side]) if axis not in contracting[side] + batch[side]]
    offset = len(batch[side]) + (free_count[0] if side == 1 else 0)
    for i, axis in enumerate(free):
        named[axis] = out_labels[offset + i]
    return named


def dot_out_labels(step: Step, ranks: tuple[int, int], operand_labels: tuple[Labels, Labels]) -> Labels:
    """The names of a dot_general's result axes from its operands' (batch, lhs free, rhs free)."""
    (lc, rc), (lb, rb) = step.params["dimension_numbers"]
    contracting, batch = [list(lc), list(rc)], [list(lb), list(rb)]
    named = [operand_labels[0][axis] for axis in batch[0]]
    for side in (0, 1):
        named += [operand_labels[side][axis] for axis in range(ranks[side])
                  if axis not in contracting[side] + batch[side]]
    return named
