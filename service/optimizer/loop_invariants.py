"""Loop-invariant code motion for `scan` and `while`: a body equation that reads only loop constants,
literals and other invariant values runs once before the loop, its result passed in as a new loop
constant. The same primitives on the same values, so it holds in `exact` fp mode too."""
from __future__ import annotations

import copy
import math
from itertools import count
from typing import Any, Iterator

from costmodel.op_cost import FREE_OPS
from wire.format import parse_dtype
from wire.json_types import Eqn, Program
from wire.primitives import PRIMITIVES, PURE, const_operands, holds_programs, nested_programs


def tidy_loops(program: Program) -> tuple[Program, int]:
    """What a conventional compiler does to loops: invariant equations moved out, then the loop
    inputs no body reads dropped; how many equations moved."""
    hoisted, moved = hoist_loop_invariants(program)
    return drop_unused_loop_inputs(hoisted)[0], moved


def hoist_loop_invariants(program: Program) -> tuple[Program, int]:
    """A copy of `program` with the invariant equations of every `scan` and `while` body (nested
    loops included, innermost first) moved before their loop, and how many equations moved;
    `program` itself where none moved."""
    if not holds_programs(program):  # no loop: nothing to copy
        return program, 0
    result = copy.deepcopy(program)
    moved = _hoist_in(result, counted=set())
    return (result, moved) if moved else (program, 0)


def _hoist_in(program: Program, counted: set[int]) -> int:
    """Hoists in place out of the loops of `program` (and of their bodies); returns how many
    equations left a loop for the first time (one lifted through two loops counts once)."""
    taken = _names(program)
    fresh = (f"licm{k}" for k in count() if f"licm{k}" not in taken)
    eqns, moved = [], 0
    for eqn in program["eqns"]:
        for body in nested_programs(eqn):
            moved += _hoist_in(body, counted)
        for key in const_operands(eqn):  # a loop's bodies (scan, while), its consts ahead of the rest
            for before in _hoist_body(eqn, key, program, fresh, taken):
                eqns.append(before)
                moved += id(before) not in counted
                counted.add(id(before))
        eqns.append(eqn)
    program["eqns"] = eqns
    return moved


def _hoist_body(loop: Eqn, key: str, outer: Program, fresh: Iterator[str],
                taken: set[str]) -> list[Eqn]:
    """Rewrites `loop` and its body `key` in place; returns the equations that now run before it,
    written in `outer`'s names (body-embedded consts they read are copied into `outer`)."""
    params = loop["params"]
    body = params[key]["program"]
    start, n_consts = const_operands(loop)[key]
    embedded = {c["name"]: c for c in body.get("consts", [])}
    loop_consts = {s["name"] for s in body["inputs"][:n_consts]} | set(embedded)
    hoisted = _hoistable(body, loop_consts)
    if not hoisted:
        return []
    defined = {o["name"]: dict(o) for e in hoisted for o in e["out"]}
    staying = [e for e in body["eqns"] if id(e) not in {id(h) for h in hoisted}]
    reads = [a for e in staying for a in e["in"] if isinstance(a, str)] + \
        [o for o in body["outputs"] if isinstance(o, str)]
    crossing = list(dict.fromkeys(a for a in reads if a in defined))

    # Body names -> the operands the moved equations read outside.
    outside: dict[str, Any] = {s["name"]: copy.deepcopy(a)
                               for s, a in zip(body["inputs"][:n_consts], loop["in"][start:start + n_consts])}
    for e in hoisted:
        for a in e["in"]:
            if isinstance(a, str) and a in embedded and a not in outside:
                outside[a] = _take(fresh, taken)
                outer.setdefault("consts", []).append(embedded[a] | {"name": outside[a]})
        e["in"] = [copy.deepcopy(outside[a]) if isinstance(a, str) else a for a in e["in"]]
        for o in e["out"]:
            name = _take(fresh, taken)
            outside[o["name"]] = name
            o["name"] = name

    # The crossing values become consts at the end of the const block, under their body names.
    end = start + n_consts  # among the loop's operands
    body["eqns"] = staying
    body["inputs"][n_consts:n_consts] = [
        {"name": n, "shape": list(defined[n]["shape"]), "dtype": defined[n]["dtype"]} for n in crossing]
    loop["in"][end:end] = [outside[n] for n in crossing]
    # JAX 0.10's scan and while have no per-operand params (scan's `linear` is gone), so the counts
    # are all that follow the operands.
    params[dict(PRIMITIVES[loop["op"]].bodies)[key]] = n_consts + len(crossing)
    return hoisted


def _take(fresh: Iterator[str], taken: set[str]) -> str:
    name = next(fresh)
    taken.add(name)
    return name


def _hoistable(body: Program, loop_consts: set[str]) -> list[Eqn]:
    """The body equations to move out, in body order: pure, reading only loop constants, literals
    and other moved results, and none whose result would enter the loop bigger than what it was
    computed from (a broadcast fused into its consumer costs nothing per step; hoisted, it is a
    full-size buffer read on every step, which is why XLA's loop-invariant motion leaves it too)
    or would enter it as a view of a loop constant (a reshape is free where it is read; hoisted, it
    gains nothing and is one more buffer the loop carries in: XLA leaves reshapes too)."""
    avals = {s["name"]: s for s in [*body["inputs"], *body.get("consts", [])]}
    avals |= {o["name"]: o for e in body["eqns"] for o in e["out"]}
    kept_in: set[int] = set()  # views and inflating equations left in the body
    while True:
        invariant, hoisted = set(loop_consts), []
        for e in body["eqns"]:
            names = [a for a in e["in"] if isinstance(a, str)]
            # only pure primitives move: effects, randomness, callbacks, control flow and opaque ops stay
            if e["op"] in PURE and id(e) not in kept_in and all(a in invariant for a in names):
                hoisted.append(e)
                invariant |= {o["name"] for o in e["out"]}
        moved = {id(e) for e in hoisted}
        reads = {a for e in body["eqns"] if id(e) not in moved for a in e["in"] if isinstance(a, str)}
        reads |= {o for o in body["outputs"] if isinstance(o, str)}
        staying = [e for e in hoisted
                   if any(o["name"] in reads for o in e["out"]) and (e["op"] in FREE_OPS or _inflates(e, avals))]
        if not staying:
            return hoisted
        kept_in |= {id(e) for e in staying}


def _inflates(eqn: Eqn, avals: dict[str, dict]) -> bool:
    """More bytes out than in: broadcasts, iotas, pads, widening conversions, outer products."""
    nbytes = lambda s: math.prod(s["shape"]) * parse_dtype(s["dtype"]).itemsize
    read = sum(nbytes(avals[a]) if isinstance(a, str) else parse_dtype(a["dtype"]).itemsize
               for a in eqn["in"])
    return sum(nbytes(o) for o in eqn["out"]) > read


def _names(program: Program) -> set[str]:
    specs = [*program["inputs"], *program.get("consts", []), *(o for e in program["eqns"] for o in e["out"])]
    return {s["name"] for s in specs}


def drop_unused_loop_inputs(program: Program) -> tuple[Program, int]:
    """A copy of `program` without the loop constants (and scanned inputs) no body reads any more,
    and how many went: a hoisted projection leaves its weight and its per-step input unread, and
    every step would still carry them in (XLA's while-loop simplifier drops them too); `program`
    itself where none went."""
    if not holds_programs(program):
        return program, 0
    result = copy.deepcopy(program)
    dropped = _drop_in(result)
    return (result, dropped) if dropped else (program, 0)


def _drop_in(program: Program) -> int:
    dropped = 0
    for eqn in program["eqns"]:
        for body in nested_programs(eqn):
            dropped += _drop_in(body)
        params = eqn.get("params") or {}
        if eqn["op"] == "scan":
            body = params["jaxpr"]["program"]
            n_consts, n_carry = int(params.get("num_consts", 0)), int(params.get("num_carry", 0))
            unread = [k for k in range(len(body["inputs"])) if not n_consts <= k < n_consts + n_carry
                      and body["inputs"][k]["name"] not in _reads(body)]
            for k in reversed(unread):  # a scanned input may go too: the scan's `length` stays
                del body["inputs"][k], eqn["in"][k]
            params["num_consts"] = n_consts - sum(k < n_consts for k in unread)
            dropped += len(unread)
        elif eqn["op"] == "while":
            start = 0
            for key, n_key in PRIMITIVES["while"].bodies:
                body, n_consts = params[key]["program"], int(params.get(n_key, 0))
                unread = [k for k in range(n_consts) if body["inputs"][k]["name"] not in _reads(body)]
                for k in reversed(unread):
                    del body["inputs"][k], eqn["in"][start + k]
                params[n_key] = n_consts - len(unread)
                start += params[n_key]
                dropped += len(unread)
    return dropped


def _reads(body: Program) -> set[str]:
    return {a for e in body["eqns"] for a in e["in"] if isinstance(a, str)} | \
        {o for o in body["outputs"] if isinstance(o, str)}
