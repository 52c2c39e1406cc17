"""Recursive optimization of control-flow bodies: every nested program in an equation's params
(scan, while, cond, ...) goes through the full pipeline and is swapped in only if it validated
and kept its interface."""
from __future__ import annotations

import copy
from typing import Callable

from lowering.kernels import avals_of, output_avals
from validation.response_json import NestedReportJSON, ResponseJSON
from wire.execute import typecheck
from wire.format import WireError, nested_program_slots
from wire.json_types import Program
from wire.primitives import const_operands

# A body's optimized program replaces the original only when its own validation says so.
# "skipped": the request turned validation off, for its loop bodies as for the whole program.
ACCEPTED_STATUSES = frozenset(["passed", "identical", "skipped"])


def optimize_nested(program: Program, optimize_body: Callable[[Program], ResponseJSON]
                    ) -> tuple[Program, list[NestedReportJSON]]:
    """A copy of `program` whose nested programs are replaced by `optimize_body(body)["program"]`
    where that validated and kept the body's interface, plus one report per nested program;
    `program` itself where it holds none."""
    if not nested_program_count(program):
        return program, []
    result = copy.deepcopy(program)
    reports: list[NestedReportJSON] = []
    static = _static_names(result)
    avals = avals_of(result)
    for i, eqn in enumerate(result.get("eqns", [])):
        params = eqn.get("params") or {}
        weights = _weight_inputs(eqn, static)
        for path, holder, key, nested in nested_program_slots(params):
            original = nested["program"]
            body = copy.deepcopy(original)
            for j in weights.get(path, ()):
                if j < len(body.get("inputs", [])):
                    body["inputs"][j]["role"] = "weight"
            report = {"eqn": i, "op": eqn.get("op"), "param": path}
            try:
                response = optimize_body(body)
            except Exception as err:  # a body the pipeline cannot handle stays as it was
                reports.append(report | {"validation": None, "rewrites": {}, "accepted": False,
                                         "reason": f"{type(err).__name__}: {err}"[:300],
                                         "equations": _counts(original, original), "control_flow": []})
                continue
            candidate = response.get("program") or original
            reason = _rejection(original, candidate, response, bool(nested.get("open")))
            if reason is None:
                # The body's own input specs (roles included) are part of the interface.
                candidate = copy.deepcopy(candidate) | {"inputs": copy.deepcopy(original["inputs"])}
                reason = "unchanged" if candidate == original else None
            if reason is None:
                holder[key] = nested | {"program": candidate}
                reason = _eqn_rejection(eqn, avals, i)
                if reason is not None:
                    holder[key] = nested
            accepted = reason is None
            reports.append(report | {
                "validation": response.get("validation"),
                "rewrites": response.get("report", {}).get("rewrites", {}),
                "accepted": accepted, "reason": reason,
                "equations": _counts(original, candidate if accepted else original),
                "control_flow": response.get("report", {}).get("control_flow", []),
            })
    return result, reports


def nested_program_count(program: Program) -> int:
    """How many nested programs (loop bodies, branches) `program`'s equations hold at the top level."""
    return sum(1 for eqn in program.get("eqns", []) for _ in nested_program_slots(eqn.get("params") or {}))


def _counts(original: Program, used: Program) -> dict[str, int]:
    return {"original": len(original.get("eqns", [])), "optimized": len(used.get("eqns", []))}


def _rejection(original: Program, candidate: Program, response: ResponseJSON, open_: bool) -> str | None:
    """Why `candidate` may not replace `original`, or None if it may."""
    status = (response.get("validation") or {}).get("status")
    if status not in ACCEPTED_STATUSES:
        return f"validation {status}"
    if open_ and candidate.get("consts"):
        return "an open body cannot hold consts"
    spec = lambda s: (s.get("name"), list(s.get("shape", [])), s.get("dtype"))
    if [spec(s) for s in candidate.get("inputs", [])] != [spec(s) for s in original.get("inputs", [])]:
        return "inputs changed"
    try:
        before, after = output_avals(original), output_avals(candidate)
    except (KeyError, TypeError):
        return "outputs not defined"
    if before != after:
        return "outputs changed"
    return None


def _eqn_rejection(eqn: dict, avals: dict[str, tuple], index: int) -> str | None:
    """Type-check the equation alone with its new body (the primitive's own checks included)."""
    names = list(dict.fromkeys(x for x in eqn["in"] if isinstance(x, str)))
    if any(n not in avals for n in names):
        return None  # the outer typecheck already vouched for the names; nothing to check here
    probe = {"format": "optu.jaxpr/v1", "consts": [], "eqns": [eqn],
             "inputs": [{"name": n, "shape": list(avals[n][0]), "dtype": avals[n][1]} for n in names],
             "outputs": [o["name"] for o in eqn["out"]]}
    try:
        typecheck(probe)
    except WireError as err:
        return f"equation {index} does not type-check with the new body: {err}"[:300]
    return None




def _static_names(program: dict) -> set[str]:
    """Names computed from weights, consts and literals alone (the same on every call)."""
    static = {s["name"] for s in program.get("inputs", []) if s.get("role") == "weight"}
    static |= {c["name"] for c in program.get("consts", [])}
    for eqn in program.get("eqns", []):
        if all(not isinstance(x, str) or x in static for x in eqn.get("in", [])):
            static |= {o["name"] for o in eqn.get("out", [])}
    return static


def _weight_inputs(eqn: dict, static: set[str]) -> dict[str, list[int]]:
    """Param path -> indices of body inputs fed by a per-call constant of the outer program:
    loop-invariant consts of scan / while, and any operand passed through to a cond branch."""
    ins, params = eqn.get("in", []), eqn.get("params") or {}
    is_static = lambda k: k < len(ins) and (not isinstance(ins[k], str) or ins[k] in static)
    op = eqn.get("op")
    if op == "cond":
        marks = [j for j in range(len(ins) - 1) if is_static(j + 1)]
        return {f"branches[{b}]": marks for b in range(len(params.get("branches", [])))}
    try:
        layout = const_operands(eqn)
    except (TypeError, ValueError):
        return {}
    return {param: [j for j in range(count) if is_static(start + j)] for param, (start, count) in layout.items()}
