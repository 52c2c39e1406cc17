"""What a conventional compiler simplifies before it fuses, as XLA does (its CSE, algebraic
simplifier, transpose folding and dead-code elimination), over a wire program: the baseline is
priced on the result, so no gain is reported that XLA's own compile of the program already has.

- an equation that computes what an earlier one computed (the same deterministic op on the same
  operands) reuses the earlier one's values;
- x*1, 1*x, x/1, x-0, neg(neg(x)) and a conversion to the type x has are x, and so are x+0 and
  0+x except in `exact` mode (they turn -0 into +0, which XLA disregards; an exact result may not);
- a transpose of a transpose is one transpose, none when the two cancel; a transpose read by a
  dot_general is folded into its dimension numbers where they can say it;
- equations whose values nothing reads are dropped.
Loop bodies and branches are simplified the same way. Constants fold already: the baseline runs
work on constants alone once, ahead of the calls (lowering/kernels.py).
"""
from __future__ import annotations

import copy
import json
from typing import Any

from wire.json_types import Eqn, Program
from wire.primitives import deterministic, live_equations, nested_programs

UNITS = {"mul": (1.0, (0, 1)), "div": (1.0, (1,)), "add": (0.0, (0, 1)), "sub": (0.0, (1,))}  # op: unit, its places
EXACT_UNITS = {op: unit for op, unit in UNITS.items() if op != "add"}  # x + 0 is -0 + 0 = +0 at x = -0


def simplify(program: Program, exact: bool = False) -> Program:
    """A simplified copy of `program` (its inputs and the number of its outputs unchanged); `exact`:
    only bit-exact simplifications."""
    result = copy.deepcopy(program)
    _simplify_in(result, EXACT_UNITS if exact else UNITS)
    return result


def _simplify_in(program: Program, units: dict[str, tuple[float, tuple[int, ...]]]) -> None:
    avals = {s["name"]: (s["shape"], s["dtype"]) for s in [*program["inputs"], *program.get("consts", [])]}
    alias: dict[str, str] = {}
    producer: dict[str, Eqn] = {}
    seen: dict[str, list[str]] = {}
    eqns = []
    for eqn in program["eqns"]:
        for body in nested_programs(eqn):
            _simplify_in(body, units)
        eqn["in"] = [alias.get(a, a) if isinstance(a, str) else a for a in eqn["in"]]
        avals.update((o["name"], (o["shape"], o["dtype"])) for o in eqn["out"])
        _fold_transposes(eqn, producer)
        same = _identity(eqn, avals, producer, units)
        if same is not None:
            alias[eqn["out"][0]["name"]] = same
            continue
        key = json.dumps([eqn["op"], eqn["in"], eqn.get("params"), [(o["shape"], o["dtype"]) for o in eqn["out"]]],
                         sort_keys=True) if deterministic(eqn) else None
        if key in seen:
            alias.update(zip((o["name"] for o in eqn["out"]), seen[key]))
            continue
        if key is not None:
            seen[key] = [o["name"] for o in eqn["out"]]
        producer.update((o["name"], eqn) for o in eqn["out"])
        eqns.append(eqn)
    program["outputs"] = [alias.get(o, o) if isinstance(o, str) else o for o in program["outputs"]]
    program["eqns"] = [eqns[i] for i in live_equations(eqns, program["outputs"])]


def _identity(eqn: Eqn, avals: dict, producer: dict[str, Eqn],
              units: dict[str, tuple[float, tuple[int, ...]]]) -> str | None:
    """The operand `eqn` computes unchanged (same shape and type), if it does."""
    op, ins, out = eqn["op"], eqn["in"], eqn["out"][0]
    keeps = lambda a: isinstance(a, str) and tuple(avals[a][0]) == tuple(out["shape"]) and avals[a][1] == out["dtype"]
    if op in units and len(ins) == 2:
        unit, places = units[op]
        for place in places:
            other = ins[1 - place]
            if _literal(ins[place]) == unit and keeps(other):
                return other
    if op == "neg" and isinstance(ins[0], str) and producer.get(ins[0], {}).get("op") == "neg":
        inner = producer[ins[0]]["in"][0]
        return inner if keeps(inner) else None
    if op == "convert_element_type" and keeps(ins[0]):
        return ins[0]
    if op == "transpose" and list(eqn["params"]["permutation"]) == list(range(len(out["shape"]))) and keeps(ins[0]):
        return ins[0]
    return None


def _literal(operand: Any) -> float | None:
    return float(operand["lit"]) if isinstance(operand, dict) and isinstance(operand.get("lit"), (int, float)) else None


def _fold_transposes(eqn: Eqn, producer: dict[str, Eqn]) -> None:
    """In place: a transpose of a transpose reads the first one's operand through both permutations;
    a dot_general reads a transposed operand directly where its dimension numbers can say so."""
    if eqn["op"] == "transpose":
        inner = producer.get(eqn["in"][0]) if isinstance(eqn["in"][0], str) else None
        if inner is not None and inner["op"] == "transpose":
            first = inner["params"]["permutation"]
            eqn["in"] = [inner["in"][0]]
            eqn["params"] = {**eqn["params"], "permutation": [first[p] for p in eqn["params"]["permutation"]]}
    elif eqn["op"] == "dot_general":
        (contract, batch) = eqn["params"]["dimension_numbers"]
        for side in (0, 1):
            inner = producer.get(eqn["in"][side]) if isinstance(eqn["in"][side], str) else None
            if inner is None or inner["op"] != "transpose":
                continue
            perm = inner["params"]["permutation"]
            free = [d for d in range(len(perm)) if d not in contract[side] and d not in batch[side]]
            if [perm[d] for d in free] != sorted(perm[d] for d in free):
                continue  # the free dimensions would come out in another order
            contract = _with(contract, side, [perm[d] for d in contract[side]])
            batch = _with(batch, side, [perm[d] for d in batch[side]])
            eqn["in"] = _with(eqn["in"], side, inner["in"][0])
        eqn["params"] = {**eqn["params"], "dimension_numbers": [contract, batch]}


def _with(pair: list, side: int, value: Any) -> list:
    return [value, pair[1]] if side == 0 else [pair[0], value]
