"""Deterministic single-point mutants of a wire program, to measure whether validation can tell a
wrong program (`mutation_score`): an elementwise op swapped for another of its kind, the operands
of sub/div/dot_general swapped where the shapes allow, a slice shifted by one, a step dropped (an
elementwise op bypassed, as a step of an unrolled loop left out), a square weight transposed, an
operand read from another value of its type.
Only equations the outputs depend on are mutated (loop and branch bodies too), and every mutant
type-checks."""
from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from lowering.kernels import avals_of
from validation.compare import output_error
from validation.inputs import random_inputs
from validation.validate import validate
from validation.widen import CannotWiden, Widened, widen
from wire.execute import typecheck
from wire.format import WireError
from wire.json_types import Program

SWAPS = {"add": "sub", "sub": "add", "mul": "add", "div": "mul", "max": "min", "min": "max",
         "tanh": "logistic", "logistic": "tanh", "exp": "expm1", "expm1": "exp", "log": "log1p", "log1p": "log",
         "sin": "cos", "cos": "sin", "sqrt": "rsqrt", "rsqrt": "sqrt", "erf": "tanh", "neg": "abs", "abs": "neg",
         "square": "abs", "integer_pow": "abs"}
SWAPPABLE = ("sub", "div", "dot_general")
ELEMENTWISE = frozenset(SWAPS) | {"sub", "div", "pow", "integer_pow", "square", "convert_element_type"}


def _live(program: Program) -> list[int]:
    """Indices of the equations some output depends on."""
    need = {o for o in program["outputs"] if isinstance(o, str)}
    live = []
    for i in reversed(range(len(program["eqns"]))):
        e = program["eqns"][i]
        if any(o["name"] in need for o in e["out"]):
            live.append(i)
            need |= {a for a in e["in"] if isinstance(a, str)}
    return sorted(live)


def _swap_op(program: Program, i: int) -> Program | None:
    e = program["eqns"][i]
    target = SWAPS.get(e["op"])
    if target is None:
        return None
    known = [x["params"] for x in program["eqns"] if x["op"] == target][:1]
    for params in [*known, {}, {"accuracy": None}, {"out_dtype": None}]:  # what the target op takes
        mutant = copy.deepcopy(program)
        mutant["eqns"][i].update(op=target, params=params)
        if _typechecks(mutant, i):
            return mutant
    return None


def _swap_operands(program: Program, i: int) -> Program | None:
    e = program["eqns"][i]
    if e["op"] not in SWAPPABLE or len(e["in"]) != 2 or e["in"][0] == e["in"][1]:
        return None
    mutant = copy.deepcopy(program)
    mutant["eqns"][i]["in"] = list(reversed(e["in"]))
    return mutant


def _shift_slice(program: Program, i: int) -> Program | None:
    e = program["eqns"][i]
    if e["op"] != "slice" or not isinstance(e["in"][0], str):
        return None
    full = avals_of(program)[e["in"][0]][0]
    start, limit = list(e["params"]["start_indices"]), list(e["params"]["limit_indices"])
    for d in range(len(full)):
        step = 1 if limit[d] < full[d] else -1 if start[d] > 0 else 0
        if step:
            mutant = copy.deepcopy(program)
            start[d] += step
            limit[d] += step
            mutant["eqns"][i]["params"] = {**e["params"], "start_indices": start, "limit_indices": limit}
            return mutant
    return None


def _drop_step(program: Program, i: int) -> Program | None:
    """The equation left out: its readers read the operand of the same type instead."""
    e = program["eqns"][i]
    avals = avals_of(program)
    if e["op"] not in ELEMENTWISE or len(e["out"]) != 1:
        return None
    out = e["out"][0]
    same = [a for a in e["in"] if isinstance(a, str) and avals[a] == (tuple(out["shape"]), out["dtype"])]
    if not same:
        return None
    mutant = copy.deepcopy(program)
    del mutant["eqns"][i]
    rename = lambda a: same[0] if a == out["name"] else a
    for eqn in mutant["eqns"][i:]:
        eqn["in"] = [rename(a) if isinstance(a, str) else a for a in eqn["in"]]
    mutant["outputs"] = [rename(o) if isinstance(o, str) else o for o in mutant["outputs"]]
    return mutant


def _transpose_weight(program: Program, i: int) -> Program | None:
    e = program["eqns"][i]
    inputs = {s["name"]: s for s in program["inputs"]}
    if e["op"] != "dot_general":
        return None
    for k, a in enumerate(e["in"]):
        spec = inputs.get(a) if isinstance(a, str) else None
        if spec and len(spec["shape"]) == 2 and spec["shape"][0] == spec["shape"][1]:
            mutant = copy.deepcopy(program)
            name = f"{a}_mutant_t"
            mutant["eqns"].insert(i, {"op": "transpose", "in": [a], "params": {"permutation": [1, 0]},
                                      "out": [{"name": name, "shape": spec["shape"], "dtype": spec["dtype"]}]})
            mutant["eqns"][i + 1]["in"][k] = name
            return mutant
    return None


def _rewire(program: Program, i: int) -> Program | None:
    """An operand read from the wrong value: the nearest earlier one of the same type."""
    e = program["eqns"][i]
    avals = avals_of(program)
    earlier = [s["name"] for s in program["inputs"]] + [o["name"] for x in program["eqns"][:i] for o in x["out"]]
    for k, a in enumerate(e["in"]):
        if isinstance(a, str):
            other = next((n for n in reversed(earlier) if n != a and n not in e["in"] and avals[n] == avals[a]), None)
            if other is not None:
                mutant = copy.deepcopy(program)
                mutant["eqns"][i]["in"][k] = other
                return mutant
    return None


KINDS: tuple[Callable[[Program, int], Program | None], ...] = (_swap_op, _swap_operands, _shift_slice, _drop_step,
                                                               _transpose_weight, _rewire)


def mutants(program: Program, count: int = 20, seed: int = 0) -> list[tuple[str, Program]]:
    """Up to `count` distinct single-point mutants, (description, program), the kinds taken in turn
    over live equations in a seeded order."""
    order = np.random.default_rng(seed).permutation(_live(program)).tolist()

    def of_kind(kind: Callable[[Program, int], Program | None]) -> Iterator[tuple[str, Program]]:
        for i in order:
            if (mutant := kind(program, i)) is not None and (kind is _swap_op or _typechecks(mutant, i)):
                yield f"{kind.__name__.lstrip('_')} at eqn {i} ({program['eqns'][i]['op']})", mutant

    def in_bodies() -> Iterator[tuple[str, Program]]:  # loop and branch bodies: their mutants, put back
        for i in order:
            for key, value in program["eqns"][i]["params"].items():
                if isinstance(value, dict) and isinstance(value.get("program"), dict):
                    for what, body in mutants(value["program"], count, seed):
                        mutant = copy.deepcopy(program)
                        mutant["eqns"][i]["params"][key] = {**value, "program": body}
                        yield f"{what} in the {program['eqns'][i]['op']} body at eqn {i}", mutant

    per_kind = [*(of_kind(kind) for kind in KINDS), in_bodies()]
    found: list[tuple[str, Program]] = []
    for candidate in itertools.chain.from_iterable(itertools.zip_longest(*per_kind)):
        if candidate is not None and len(found) < count:
            found.append(candidate)
    return found


def _typechecks(program: Program, i: int) -> bool:
    """Whether the equations a mutation at `i` touched type-check: the window around `i` as a
    program of its own, fed the types of what it reads (a whole large program type-checked once per
    candidate mutant took minutes)."""
    window = program["eqns"][max(i - 1, 0):i + 2]
    avals = avals_of(program)
    produced = {o["name"] for e in window for o in e["out"]}
    reads = list(dict.fromkeys(a for e in window for a in e["in"] if isinstance(a, str) and a not in produced))
    probe = {"format": program["format"], "consts": [], "eqns": window,
             "inputs": [{"name": n, "shape": list(avals[n][0]), "dtype": avals[n][1]} for n in reads],
             "outputs": [o["name"] for e in window for o in e["out"]]}
    try:
        typecheck(probe)
        return True
    except (WireError, KeyError):
        return False


def observably_equivalent(original: Program, mutant: Program, draws: int = 4) -> bool:
    """Whether the mutant computes the original's function as far as random testing shows: in
    float64, on `draws` seeded draws of each kind (standard normal, fan-in scaled), never seen by
    validation, every output within 1e-9. Such a mutant is no fault to catch (e.g. `x - max` made
    `x + max` before a softmax, which is shift-invariant; `max(-inf, x)` made `x`)."""
    try:
        run_original, run_mutant = Widened(original), Widened(mutant)
        for seed, scaled in itertools.product(range(1000, 1000 + draws), (False, True)):
            args = widen(random_inputs(original, seed, scaled))
            if any(output_error(a, b) > 1e-9 for a, b in zip(run_original(args), run_mutant(args))):
                return False
    except CannotWiden:
        return False
    return True


def mutation_score(original: Program, optimized: Program, count: int = 20,
                   verdict: Callable[[Program], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The verdict on each mutant of `optimized` (by default validation's against `original`; or
    another reference's, such as PyTorch's run of the model). `caught`: failed; `score`: caught
    over the mutants that are not `observably_equivalent` (`raw_score`: over all)."""
    verdict = verdict or (lambda mutant: validate(original, mutant))
    verdicts = [(what, mutant, verdict(mutant)["status"]) for what, mutant in mutants(optimized, count)]
    caught = sum(status == "failed" for _, _, status in verdicts)
    equivalent = {
        what for what, mutant, status in verdicts if status != "failed" and observably_equivalent(original, mutant)
    }
    distinct = len(verdicts) - len(equivalent)
    return {"mutants": len(verdicts), "caught": caught, "equivalent": sorted(equivalent),
            "score": caught / distinct if distinct else None, "raw_score": caught / len(verdicts) if verdicts else None,
            "wrongly_passed": [what for what, _, status in verdicts if status in ("passed", "identical")
                               and what not in equivalent],
            "missed": [(what, status) for what, _, status in verdicts if status != "failed"]}
