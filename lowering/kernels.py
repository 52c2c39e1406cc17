"""Wire program -> KernelProgram: kernels with their ops, buffers, GEMM tiling and estimates.

Fusion here is the conventional policy (XLA-style greedy producer-consumer: an elementwise or
layout op joins the kernel that produced one of its operands if that kernel is the last one
opened). With fusion off every equation is its own kernel (the `naive` baseline). Values that
depend only on weights and constants are precomputed once and reported apart from per-call cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from costmodel.formulas import Estimate, kernel_estimate, sum_estimates
from costmodel.op_cost import Aval, OpCost, nbytes, op_cost
from costmodel.profile import HardwareProfile

KIND_NAMES = {"gemm": "optical_gemm", "vector": "vector", "free": "vector", "host": "host"}


@dataclass(eq=False)
class Kernel:
    id: int
    kind: str
    eqns: list[int]
    ops: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    tiling: dict[str, int] = field(default_factory=dict)
    estimate: Estimate | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "ops": self.ops, "inputs": self.inputs,
                "outputs": self.outputs, "tiling": self.tiling, "estimate": self.estimate.to_dict()}


@dataclass
class KernelProgram:
    kernels: list[Kernel]  # per-call work, in execution order
    precompute: list[Kernel]  # weight-only work, run once
    total: Estimate
    precompute_total: Estimate


def avals_of(program: dict[str, Any]) -> dict[str, Aval]:
    avals = {s["name"]: (tuple(s["shape"]), s["dtype"]) for s in [*program["inputs"], *program.get("consts", [])]}
    for eqn in program["eqns"]:
        avals.update({o["name"]: (tuple(o["shape"]), o["dtype"]) for o in eqn["out"]})
    return avals


def static_names(program: dict[str, Any]) -> set[str]:
    """Values computable from weights and constants alone."""
    static = {c["name"] for c in program.get("consts", [])}
    static |= {i["name"] for i in program["inputs"] if i.get("role") == "weight"}
    for eqn in program["eqns"]:
        names = [a for a in eqn["in"] if isinstance(a, str)]
        if all(a in static for a in names):
            static |= {o["name"] for o in eqn["out"]}
    return static


def eqn_cost(profile: HardwareProfile, eqn: dict[str, Any], avals: dict[str, Aval]) -> OpCost:
    ins = [avals[a] if isinstance(a, str) else ((), a["dtype"]) for a in eqn["in"]]
    out = (tuple(eqn["out"][0]["shape"]), eqn["out"][0]["dtype"]) if len(eqn["out"]) == 1 else \
        ((sum(math.prod(o["shape"]) for o in eqn["out"]),), eqn["out"][0]["dtype"])
    return op_cost(profile, eqn["op"], eqn.get("params") or {}, ins, out)


def build_kernel_program(program: dict[str, Any], profile: HardwareProfile, fuse: bool = True) -> KernelProgram:
    avals, static = avals_of(program), static_names(program)
    costs = [eqn_cost(profile, e, avals) for e in program["eqns"]]
    kernels, precompute, escaping = _assign(program, costs, static, fuse)
    for group in (kernels, precompute):
        for kernel in group:
            _finish(kernel, program, costs, avals, profile, escaping)
    return KernelProgram(kernels, precompute, sum_estimates([k.estimate for k in kernels]),
                         sum_estimates([k.estimate for k in precompute]))


def _assign(program: dict[str, Any], costs: list[OpCost], static: set[str], fuse: bool):
    """Group equations into kernels; returns (per-call kernels, precompute kernels, escaping values).

    A value escapes its kernel (an HBM write) if the program returns it or another kernel reads it.
    With fusion, layout-only ops on kernel-external data (a bias broadcast) are folded into each
    consumer instead of becoming kernels, and an elementwise op joins the latest kernel that
    produced one of its operands: its other operands then come from earlier kernels, so kernel
    order stays a valid schedule.
    """
    eqns = program["eqns"]
    kernels: list[Kernel] = []
    precompute: list[Kernel] = []
    producer: dict[str, Kernel] = {}
    deferred: dict[str, int] = {}
    per_call: set[Kernel] = set()
    escaping = {o for o in program["outputs"] if isinstance(o, str)}

    def place(index: int, kernel: Kernel) -> None:
        for a in eqns[index]["in"]:
            if not isinstance(a, str):
                continue
            if a in deferred:
                if deferred[a] not in kernel.eqns:
                    place(deferred[a], kernel)
            elif a in producer and producer[a] is not kernel:
                escaping.add(a)
        kernel.eqns.append(index)
        if kernel.kind == "optical_gemm" and costs[index].kind != "gemm":
            kernel.kind = "fused"

    def open_kernel(group: list[Kernel], index: int) -> Kernel:
        group.append(Kernel(len(group), KIND_NAMES[costs[index].kind], []))
        if group is kernels:
            per_call.add(group[-1])
        return group[-1]

    for index, (eqn, cost) in enumerate(zip(eqns, costs)):
        outs = [o["name"] for o in eqn["out"]]
        operands = [a for a in eqn["in"] if isinstance(a, str)]
        producers = [k for a in operands if (k := producer.get(a)) in per_call]
        if all(o in static for o in outs):
            target = open_kernel(precompute, index)
        elif fuse and cost.kind == "free" and not producers:
            deferred.update((o, index) for o in outs)
            continue
        else:
            latest = max(producers, key=lambda k: k.id, default=None)
            joins = fuse and latest is not None and cost.kind in ("vector", "free") and latest.kind != "host"
            target = latest if joins else open_kernel(kernels, index)
        place(index, target)
        producer.update((o, target) for o in outs)
    for name in escaping & deferred.keys():  # a returned layout-only value is materialized
        place(deferred[name], open_kernel(kernels, deferred[name]))
    return kernels, precompute, escaping


def _finish(kernel: Kernel, program, costs: list[OpCost], avals, profile: HardwareProfile,
            escaping: set[str]) -> None:
    eqns = [program["eqns"][i] for i in kernel.eqns]
    produced = [o["name"] for e in eqns for o in e["out"]]
    inside = set(produced)
    kernel.ops = [e["op"] for e in eqns]
    kernel.inputs = list(dict.fromkeys(a for e in eqns for a in e["in"] if isinstance(a, str) and a not in inside))
    kernel.outputs = [n for n in produced if n in escaping]
    hbm = sum(nbytes(avals[n]) for n in kernel.inputs) + sum(nbytes(avals[n]) for n in kernel.outputs)
    intermediate = sum(nbytes(avals[n]) for n in produced if n not in kernel.outputs)
    hbm += 2 * max(0, intermediate - profile.memory.sram_bytes)  # spilled intermediates go out and back
    parts = [costs[i] for i in kernel.eqns]
    gemms = [c for c in parts if c.kind == "gemm"]
    compute = sum(c.time_s for c in parts)
    bound = max(parts, key=lambda c: c.time_s).bound if compute > 0 else "vector"
    kernel.tiling = gemms[0].tiling if gemms else {}
    kernel.estimate = kernel_estimate(profile, compute, sum(c.energy_j for c in parts),
                                      sum(c.flops for c in parts), hbm, bound)


def lower_bound(programs: list[dict[str, Any]], profile: HardwareProfile) -> Estimate:
    """Hardware floor: the least GEMM work among equivalent programs at the optical cores' peak
    rate, overlapped with reading each per-call input and writing each output once."""
    g = profile.gemm
    peak = 2.0 * g.rows * g.cols * g.clock_hz * g.cores
    flops = min(sum(eqn_cost(profile, e, avals_of(p)).flops for e in p["eqns"]
                    if e["op"] in ("dot_general", "conv_general_dilated")) for p in programs)
    program, avals = programs[0], avals_of(programs[0])
    static = static_names(program)
    moved = sum(nbytes(avals[i["name"]]) for i in program["inputs"] if i["name"] not in static)
    moved += sum(nbytes(avals[o]) for o in program["outputs"] if isinstance(o, str))
    hbm_s = moved / profile.memory.hbm_bw_bytes_per_s
    compute_s = flops / peak
    return Estimate(max(compute_s, hbm_s), 0.0, moved, flops, "memory" if hbm_s > compute_s else "optical")
