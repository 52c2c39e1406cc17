"""Slices that select one operand's part of a concatenation: directly, or through an op that carries
the concatenated dimension to its output unmixed (a GEMM's free dimension, a convolution's output
features or batch). Value numbering (lowering/regions.py) numbers such a slice as the part it
selects, so a merged GEMM's slices are the GEMMs they replace and need no numeric check.

A slice of a concatenation is its operand in any arithmetic; a slice of a GEMM over one is the GEMM
over the part only in real arithmetic (a library GEMM may block, and so round, by its whole shape).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

Eqn = dict[str, Any]
Shape = Callable[[Any], tuple[int, ...]]  # an operand's shape (a literal's: ())


def carried_dims(eqn: Eqn, shape: Shape) -> Mapping[int, Mapping[int, int]]:
    """Per operand position: operand dimension -> the output dimension it is carried to, where each
    output index along it depends on that operand's index alone (none for ops not listed)."""
    params = eqn.get("params") or {}
    if eqn["op"] == "dot_general":
        (contract_l, contract_r), (batch_l, batch_r) = params["dimension_numbers"]
        ranks = [len(shape(eqn["in"][0])), len(shape(eqn["in"][1]))]
        free = [[d for d in range(ranks[0]) if d not in (*contract_l, *batch_l)],
                [d for d in range(ranks[1]) if d not in (*contract_r, *batch_r)]]
        first = [len(batch_l), len(batch_l) + len(free[0])]  # output: batch, lhs free, rhs free
        return {side: {d: first[side] + k for k, d in enumerate(free[side])} for side in (0, 1)}
    if eqn["op"] == "conv_general_dilated":
        if params.get("feature_group_count", 1) != 1 or params.get("batch_group_count", 1) != 1:
            return {}  # grouped: an output feature reads one group of the input features
        specs = params["dimension_numbers"]["fields"]
        return {0: {specs["lhs_spec"][0]: specs["out_spec"][0]}, 1: {specs["rhs_spec"][0]: specs["out_spec"][1]}}
    return {}


def _part(slice_eqn: Eqn, concat: Eqn, out_dim: int, shape: Shape) -> str | None:
    """The concatenation's operand that `slice_eqn` selects along `out_dim` (whole along every
    other dimension, unit strides), if it selects exactly one operand's part."""
    params = slice_eqn["params"]
    start, limit, whole = params["start_indices"], params["limit_indices"], shape(slice_eqn["in"][0])
    if any(s != 1 for s in params.get("strides") or []):
        return None
    if any((start[d], limit[d]) != (0, whole[d]) for d in range(len(whole)) if d != out_dim):
        return None
    axis, offset = concat["params"]["dimension"], 0
    for operand in concat["in"]:
        size = shape(operand)[axis]
        if (start[out_dim], limit[out_dim]) == (offset, offset + size):
            return operand if isinstance(operand, str) else None
        offset += size
    return None


def selected_part(slice_eqn: Eqn, producer: Callable[[str], Eqn | None], shape: Shape,
                  real: bool) -> str | Eqn | None:
    """What a slice equals when it selects one operand's part of a concatenation: that operand's
    name, or (`real` arithmetic) an equation computing the slice from it (the op over the
    concatenation, over the part instead, with the slice's output). `producer` gives a value's
    equation (None for an input), `shape` an operand's shape."""
    source = slice_eqn["in"][0]
    made = producer(source) if isinstance(source, str) else None
    if made is None:
        return None
    if made["op"] == "concatenate":
        return _part(slice_eqn, made, made["params"]["dimension"], shape)
    if not real:
        return None
    for position, dims in carried_dims(made, shape).items():
        operand = made["in"][position]
        concat = producer(operand) if isinstance(operand, str) else None
        if concat is None or concat["op"] != "concatenate" or concat["params"]["dimension"] not in dims:
            continue
        part = _part(slice_eqn, concat, dims[concat["params"]["dimension"]], shape)
        if part is not None:
            operands = list(made["in"])
            operands[position] = part
            return {**made, "in": operands, "out": slice_eqn["out"]}
    return None
