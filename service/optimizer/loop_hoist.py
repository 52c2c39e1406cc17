"""Loop-invariant GEMMs hoisted out of `scan`: a step's `x_t @ W`, with `x_t` the step's slice of a
scanned input and `W` a loop constant, becomes one `xs @ W` over every step before the loop, read
per step as a new scanned input (cuDNN's LSTM does this with its input projections).

On the weight-stationary OPTU this loads W once instead of once per step; on a CPU one large GEMM
beats T small ones. The sums per output element are the same but XLA may block them differently,
so it is a `real`-mode rewrite, kept only where the kernel estimate says it pays (service/optimizer/pipeline.py
validates the result against the original like any other).
"""
from __future__ import annotations

import copy
from itertools import count

from costmodel.kernel_cost import VIEW_OPS
from costmodel.profile import HardwareProfile
from lowering.kernels import avals_of, build_kernel_program
from rewrites.chain_order import PLAIN_MATMUL
from wire.json_types import Eqn, Program
from wire.primitives import GEMMS


def hoist_scan_projections(program: Program) -> tuple[Program, int]:
    """A copy of `program` with every hoistable GEMM of its top-level scans hoisted, and how many
    (`program` itself where it has no scan)."""
    if not any(eqn["op"] == "scan" for eqn in program["eqns"]):
        return program, 0
    result = copy.deepcopy(program)
    taken = avals_of(result).keys()
    fresh = (f"hoisted{k}" for k in count() if f"hoisted{k}" not in taken)
    eqns, hoisted = [], 0
    for eqn in result["eqns"]:
        if eqn["op"] == "scan":
            for before in _hoist(eqn, fresh):
                eqns.append(before)
                hoisted += 1
        eqns.append(eqn)
    result["eqns"] = eqns
    return result, hoisted


def hoist_if_cheaper(program: Program, profile: HardwareProfile) -> tuple[Program, int]:
    """`program` with its scans' GEMMs hoisted where the kernel estimate (greedy fusion, as the
    baseline prices it) says that is cheaper, and how many were."""
    hoisted, n = hoist_scan_projections(program)
    if n and build_kernel_program(hoisted, profile).total.time_s < build_kernel_program(program, profile).total.time_s:
        return hoisted, n
    return program, 0


def scan_projections(program: Program) -> int:
    """GEMMs of `program` whose values its scans read step by step (directly or through views, a
    slice of a merged GEMM among them): input projections that run over every step before the loop."""
    producer = {o["name"]: eqn for eqn in program["eqns"] for o in eqn["out"]}
    found = set()
    for eqn in program["eqns"]:
        if eqn["op"] != "scan":
            continue
        first = int(eqn["params"].get("num_consts", 0)) + int(eqn["params"].get("num_carry", 0))
        for operand in eqn["in"][first:]:
            source = producer.get(operand) if isinstance(operand, str) else None
            while source is not None and source["op"] in VIEW_OPS and isinstance(source["in"][0], str):
                source = producer.get(source["in"][0])
            if source is not None and source["op"] in GEMMS:
                found.add(id(source))
    return len(found)


def _hoist(scan: Eqn, fresh) -> list[Eqn]:
    """Rewrites `scan` in place; returns the GEMM equations that now run before it."""
    params = scan["params"]
    body = params["jaxpr"]["program"]
    n_consts, n_carry = int(params.get("num_consts", 0)), int(params.get("num_carry", 0))
    names = [s["name"] for s in body["inputs"]]
    specs = {s["name"]: s for s in body["inputs"]}
    outer = dict(zip(names, scan["in"]))  # body input -> the operand that feeds it
    constants, per_step = set(names[:n_consts]), set(names[n_consts + n_carry:])
    before = []
    for eqn in list(body["eqns"]):
        x, w = eqn["in"] if eqn["op"] == "dot_general" and len(eqn["in"]) == 2 else (None, None)
        if x not in per_step or w not in constants or not isinstance(outer[x], str) or not isinstance(outer[w], str) \
                or (eqn.get("params") or {}).get("dimension_numbers") != PLAIN_MATMUL \
                or len(specs[x]["shape"]) != 2:
            continue
        out = eqn["out"][0]
        steps = int(params["length"])
        whole, step = next(fresh), next(fresh)
        before.append({"op": "dot_general", "in": [outer[x], outer[w]],
                       "out": [{"name": whole, "shape": [steps, *out["shape"]], "dtype": out["dtype"]}],
                       "params": {**eqn["params"], "dimension_numbers": [[[2], [0]], [[], []]]}})
        scan["in"].append(whole)  # scanned inputs come last: the new one is one more of them
        body["inputs"].append({"name": step, "shape": list(out["shape"]), "dtype": out["dtype"]})
        body["eqns"].remove(eqn)
        _rename(body, out["name"], step)
    return before


def _rename(body: Program, old: str, new: str) -> None:
    for eqn in body["eqns"]:
        eqn["in"] = [new if a == old else a for a in eqn["in"]]
    body["outputs"] = [new if o == old else o for o in body["outputs"]]
