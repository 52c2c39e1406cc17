"""The values an integer input may take, read from how the program uses it: an index into a table
of V rows (a gather, a scatter, a dynamic slice's start) accepts 0..V-1, so validation draws it
there, over the whole table, instead of reading only its first rows or past its end (where the
lookup clamps, or PyTorch's reference raises)."""
from __future__ import annotations

from typing import Any

from wire.json_types import Eqn, Program

# ops whose result holds its (first, or every data) operand's values: an index passes through them
# unchanged; select_n's operands after its predicate, concatenate's all, clamp's middle one
_VALUE_KEEPING = frozenset(["convert_element_type", "reshape", "broadcast_in_dim", "squeeze", "expand_dims",
                            "transpose", "slice", "copy", "rev"])


def index_bounds(program: Program) -> dict[str, int]:
    """For each input that reaches an index operand through value-keeping ops, the least exclusive
    bound its index uses accept (the smallest table it indexes); inputs used otherwise are absent."""
    shapes = {s["name"]: tuple(s["shape"]) for s in program["inputs"] + program.get("consts", [])}
    shapes.update((o["name"], tuple(o["shape"])) for e in program["eqns"] for o in e["out"])
    producer = {o["name"]: e for e in program["eqns"] for o in e["out"]}
    inputs = {s["name"] for s in program["inputs"]}
    bounds: dict[str, int] = {}
    for eqn in program["eqns"]:
        for operand, bound in _index_uses(eqn, shapes):
            for name in _sources(operand, producer, inputs):
                bounds[name] = min(bounds.get(name, bound), max(bound, 1))
    return bounds


def _index_uses(eqn: Eqn, shapes: dict[str, tuple]) -> list[tuple[Any, int]]:
    """(index operand, exclusive bound) pairs of one equation: where a start or an index lands in
    its operand's dims, each must leave room for the slice it starts."""
    op, ins, params = eqn["op"], eqn["in"], eqn["params"]
    if not ins or not isinstance(ins[0], str):
        return []
    shape = shapes[ins[0]]
    if op == "gather":
        fields = params["dimension_numbers"]["fields"]
        sizes = params["slice_sizes"]
        return [(ins[1], min(shape[d] - sizes[d] + 1 for d in fields["start_index_map"]))] \
            if fields["start_index_map"] else []
    if op.startswith("scatter"):
        dims = params["dimension_numbers"]["fields"]["scatter_dims_to_operand_dims"]
        return [(ins[1], min(shape[d] for d in dims))] if dims else []
    if op == "dynamic_slice":
        return [(start, shape[d] - params["slice_sizes"][d] + 1) for d, start in enumerate(ins[1:])]
    if op == "dynamic_update_slice" and isinstance(ins[1], str):
        update = shapes[ins[1]]
        return [(start, shape[d] - update[d] + 1) for d, start in enumerate(ins[2:])]
    return []


def _sources(operand: Any, producer: dict[str, dict], inputs: set[str]) -> set[str]:
    """The inputs whose values `operand` holds unchanged (through views, conversions, selects)."""
    found, stack, seen = set(), [operand], set()
    while stack:
        name = stack.pop()
        if not isinstance(name, str) or name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found.add(name)
            continue
        eqn = producer.get(name)
        if eqn is None:
            continue
        if eqn["op"] in _VALUE_KEEPING:
            stack.append(eqn["in"][0])
        elif eqn["op"] == "select_n":  # jnp's negative-index wrap picks the index itself for i >= 0
            stack.extend(eqn["in"][1:])
        elif eqn["op"] == "concatenate":
            stack.extend(eqn["in"])
        elif eqn["op"] == "clamp":
            stack.append(eqn["in"][1])
    return found
