"""Compute cost of one wire-level equation on a HardwareProfile: which unit runs it and for how long.

Extraction prices e-nodes by turning them into equations first (costmodel/kernel_cost.py), so the
e-graph search and the kernel estimates use the same numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from costmodel.formulas import conv_cost, dtype_bytes, gemm_cost, loop_cost, memory_time, vector_cost
from costmodel.profile import HardwareProfile
from wire.json_types import Program
from wire.primitives import names, nested_programs

Aval = tuple[tuple[int, ...], str]  # (shape, dtype)

# The primitive table's cost classes: index maps (free), data movement priced by the bytes it
# touches on the vector unit's SRAM port, per-element vector work (reductions count input
# elements), optical GEMMs, and control flow priced from its bodies.
FREE_OPS, MOVE_OPS, VECTOR_OPS = names(cost="free"), names(cost="move"), names(cost="vector")
GEMM_OPS, LOOP_OPS = names(cost="gemm"), names(cost="loop")
# Idioms run as one fused vector kernel: per element, the ops of their decomposition, but one pass
# over SRAM (attention adds its two batched GEMMs).
IDIOMS: dict[str, dict[str, float]] = {
    "softmax": {"reduce_max": 1, "sub": 1, "exp": 1, "reduce_sum": 1, "div": 1},
    "gelu": {"mul": 4, "add": 2, "tanh": 1},
    "layer_norm": {"reduce_sum": 2, "sub": 1, "mul": 2, "div": 2, "add": 1, "rsqrt": 1},
    "attention": {},
}


@dataclass(frozen=True)
class OpCost:
    """kind: gemm | vector | free | host. `tiling` is set for GEMMs."""

    kind: str
    time_s: float
    energy_j: float
    flops: float
    bound: str
    tiling: dict[str, int] = field(default_factory=dict)


def nbytes(aval: Aval) -> int:
    shape, dtype = aval
    return math.prod(shape) * dtype_bytes(dtype)


def _prod(shape, dims) -> int:
    return math.prod(shape[d] for d in dims)


def gemm_dims(op: str, params: dict[str, Any], ins: list[Aval], out: Aval) -> tuple[int, int, int, int]:
    """(m, k, n, batch) of a dot_general, or of a convolution seen as an implicit GEMM."""
    if op == "dot_general":
        (lc, rc), (lb, rb) = params["dimension_numbers"]
        (ls, _), (rs, _) = ins[0], ins[1]
        k, batch = _prod(ls, lc), _prod(ls, lb)
        m = math.prod(ls) // max(1, k * batch)
        n = math.prod(rs) // max(1, _prod(rs, rc) * _prod(rs, rb))
        return m, k, n, batch
    rhs_shape, out_shape = ins[1][0], out[0]
    rhs_spec = params["dimension_numbers"]["fields"]["rhs_spec"]
    groups = int(params.get("feature_group_count") or 1)
    out_features = rhs_shape[rhs_spec[0]]
    k = math.prod(rhs_shape) // max(1, out_features)  # in-features per group x window
    m = math.prod(out_shape) // max(1, out_features)
    return m, k, out_features // groups, groups


def gemm_operand_class(dtype: str, precision: Any) -> str:
    """The key `GemmUnit.rate` prices a GEMM's operand by: its dtype, or "float32_highest" for
    float32 at HIGHEST precision (one of the pair suffices: XLA runs the product at the higher)."""
    return f"{dtype}_highest" if dtype == "float32" and "HIGHEST" in _precision_names(precision) else dtype


def _precision_names(precision: Any) -> list[str]:
    """A dot's `precision` param as names, in any of its forms: None, a Precision, a wire enum
    ({"enum": "Precision", "value": "HIGHEST"}) or a pair of them."""
    if precision is None:
        return []
    if isinstance(precision, (list, tuple)):
        return [name for part in precision for name in _precision_names(part)]
    if isinstance(precision, dict):
        return [str(precision.get("value"))]
    return [getattr(precision, "name", str(precision))]


def op_cost(p: HardwareProfile, op: str, params: dict[str, Any], ins: list[Aval], out: Aval) -> OpCost:
    if op in GEMM_OPS:
        try:
            m, k, n, batch = gemm_dims(op, params, ins, out)
        except (KeyError, TypeError, IndexError, ValueError):
            return _host(p, ins, out)  # unusual params: price it like an opaque op
        rate = min(p.gemm.rate(gemm_operand_class(dtype, params.get("precision"))) for _, dtype in ins[:2])
        if op == "conv_general_dilated":
            g = conv_cost(p, m, k, n, batch, rate)
        else:  # weight-stationary either way round: the compiler programs whichever operand pays less
            g = min((gemm_cost(p, m, k, n, batch, rate), gemm_cost(p, n, k, m, batch, rate)),
                    key=lambda c: c.time_s)
        return OpCost("gemm", g.time_s, g.energy_j, g.flops, g.bound, g.tiling())
    if op in LOOP_OPS:
        try:
            return _loop_cost(p, op, params)
        except (KeyError, TypeError, IndexError, ValueError):
            return _host(p, ins, out)  # a body we cannot read: price the traffic alone
    if op in IDIOMS:
        return _idiom_cost(p, op, ins, out)
    if op in FREE_OPS:
        return OpCost("free", 0.0, 0.0, 0.0, "vector")
    touched = sum(nbytes(a) for a in ins) + nbytes(out)
    if op in MOVE_OPS:
        t, e, _ = vector_cost(p, {}, touched)
        return OpCost("vector", t, e, 0.0, "vector")
    if op in VECTOR_OPS:
        elements = max([math.prod(out[0])] + [math.prod(s) for s, _ in ins])
        t, e, flops = vector_cost(p, {op: elements}, touched)
        return OpCost("vector", t, e, flops, "vector")
    return _host(p, ins, out)


def _idiom_cost(p: HardwareProfile, op: str, ins: list[Aval], out: Aval) -> OpCost:
    touched = sum(nbytes(a) for a in ins) + nbytes(out)
    if op != "attention":
        elements = math.prod(ins[0][0])
        t, e, flops = vector_cost(p, {k: n * elements for k, n in IDIOMS[op].items()}, touched)
        return OpCost("vector", t, e, flops, "vector")
    (b, h, s, dim), keys = ins[0][0], ins[1][0][-1]
    rate = p.gemm.rate(gemm_operand_class(ins[0][1], None))
    scores, mix = gemm_cost(p, s, dim, keys, b * h, rate), gemm_cost(p, s, keys, dim, b * h, rate)
    t, e, flops = vector_cost(p, {k: n * b * h * s * keys for k, n in IDIOMS["softmax"].items()}, touched)
    return OpCost("gemm", scores.time_s + mix.time_s + t, scores.energy_j + mix.energy_j + e,
                  scores.flops + mix.flops + flops, scores.bound, scores.tiling())


def _host(p: HardwareProfile, ins: list[Aval], out: Aval) -> OpCost:
    """An op the model does not know runs on the host: priced by its HBM traffic alone."""
    moved = sum(nbytes(a) for a in ins) + nbytes(out)
    return OpCost("host", memory_time(p, moved), moved * p.memory.hbm_energy_per_byte_j, 0.0, "memory")


def program_cost(p: HardwareProfile, program: Program) -> OpCost:
    """A nested wire program's equations run back to back, compute only: a loop body's values stay
    on chip between its ops (the loop's kernel pays its own boundary traffic once)."""
    avals = {s["name"]: (tuple(s["shape"]), s["dtype"]) for s in [*program["inputs"], *program.get("consts", [])]}
    parts = []
    for eqn in program["eqns"]:
        avals.update((o["name"], (tuple(o["shape"]), o["dtype"])) for o in eqn["out"])
        ins = [avals[a] if isinstance(a, str) else ((), a["dtype"]) for a in eqn["in"]]
        outs = eqn["out"]  # several outputs are priced as one array of their total size
        out = (tuple(outs[0]["shape"]), outs[0]["dtype"]) if len(outs) == 1 else \
            ((sum(math.prod(o["shape"]) for o in outs),), outs[0]["dtype"])
        parts.append(op_cost(p, eqn["op"], eqn.get("params") or {}, ins, out))
    bound = max(parts, key=lambda c: c.time_s).bound if parts else "vector"
    return OpCost("host", sum(c.time_s for c in parts), sum(c.energy_j for c in parts),
                  sum(c.flops for c in parts), bound)


def _loop_cost(p: HardwareProfile, op: str, params: dict[str, Any]) -> OpCost:
    """scan: its body times its length. cond: the dearest branch (the predicate is data). while: the
    trip count is data, so one trip of condition and body is priced, a lower bound."""
    parts = [program_cost(p, body) for body in nested_programs({"op": op, "params": params})]
    if op == "cond":
        body, trips = max(parts, key=lambda c: c.time_s), 1
        time_s = body.time_s
    else:
        body = OpCost("host", sum(c.time_s for c in parts), sum(c.energy_j for c in parts),
                      sum(c.flops for c in parts), max(parts, key=lambda c: c.time_s).bound)
        trips = int(params["length"]) if op == "scan" else 1
        time_s = loop_cost(p, body.time_s, trips)
    # The operands and results cross HBM once; the kernel holding the loop prices that traffic.
    return OpCost("host", time_s, body.energy_j * trips, body.flops * trips, body.bound)
