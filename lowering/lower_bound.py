"""The per-call floor of a program's estimate, whatever kernels it is grouped into.

A kernel costs max(compute, memory) + launch (costmodel/formulas.py), so kernels run one after
another cost at least max(sum of compute, sum of memory) + sum of launches, and each sum has a
floor no grouping goes under: compute is its live per-call ops' own (weight-only work runs once,
ahead of the calls; a `cond` at its cheapest branch); memory is reading what the program reads from
outside its per-call work and writing what it returns, each priced as the estimate prices a
kernel's traffic; launches are the fewest kernels those ops fit in. Taken per resource as the least
over several programs, the bound holds for each of them. The call's dispatch is paid on top by all.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from costmodel.formulas import Estimate, memory_time
from costmodel.kernel_cost import VIEW_OPS, ResourceTimes
from costmodel.key_blocking import Step, attention_groups
from costmodel.op_cost import Aval, OpCost, nbytes, program_cost
from costmodel.profile import HardwareProfile
from lowering.kernels import avals_of, eqn_cost, static_names
from wire.json_types import Eqn, Program
from wire.primitives import live_equations, nested_programs

# The estimates add the same terms in other orders; the bound sits this far below its own sum so
# that their rounding never puts it above an estimate of exactly the floor.
ROUNDING = 1e-9


@dataclass(frozen=True)
class Floors:
    """What one program needs per call of each resource the model charges."""

    compute_s: dict[str, float]  # seconds of op compute by what bounds it (weight_load, optical, vector, memory)
    memory_s: float  # its boundary traffic: reads from outside the per-call work, writes of its results
    launch_s: float  # its fewest kernels' launches
    hbm_bytes: float
    flops: float

    @property
    def compute_total_s(self) -> float:
        return sum(self.compute_s.values())


def lower_bound(programs: list[Program], profile: HardwareProfile,
                egraph: ResourceTimes | None = None, attention_kernels: bool = False) -> Estimate:
    """The floor of every program in `programs` (equivalent ones): per resource the least any of
    them needs, combined as a kernel combines them; with `egraph` (per resource the least any
    program of the search's e-graph needs) the lower of that and the e-graph's combined floor, so
    it holds for those programs too. `bound` names the resource that binds. `attention_kernels`:
    an attention's two products may share a kernel whatever the profile's `max_gemms`."""
    floors = [program_floors(p, profile, attention_kernels) for p in programs]
    compute = min(floors, key=lambda f: f.compute_total_s)
    memory = min(floors, key=lambda f: f.memory_s)
    compute_kind = max(compute.compute_s.items(), key=lambda item: item[1], default=("vector", 0.0))[0]
    least = ResourceTimes(compute.compute_total_s, memory.memory_s, min(f.launch_s for f in floors))
    time_s, binding = min(_combined(times, compute_kind) for times in [least, *([egraph] if egraph else [])])
    dispatch = profile.kernel.dispatch_overhead_s or 0.0  # every call pays it, whatever its kernels
    binding = "launch" if dispatch > time_s else binding
    return Estimate((time_s + dispatch) * (1 - ROUNDING), 0.0, memory.hbm_bytes, compute.flops, binding)


def _combined(times: ResourceTimes, compute_kind: str) -> tuple[float, str]:
    """(the time a kernel's resources take together, the one that binds: `compute_kind` for compute)."""
    slowest = max(times.compute_s, times.memory_s)
    if times.launch_s > slowest:
        return slowest + times.launch_s, "launch"
    return slowest + times.launch_s, "memory" if times.memory_s > times.compute_s else compute_kind


def program_floors(program: Program, profile: HardwareProfile, attention_kernels: bool = False) -> Floors:
    avals, static = avals_of(program), static_names(program, profile.kernel.precompute_weights)
    eqns = program["eqns"]
    pairs = len(attention_groups([Step.of(e) for e in eqns], avals)) if attention_kernels else 0
    producer = {o["name"]: i for i, e in enumerate(eqns) for o in e["out"]}
    per_call = [i for i in live_equations(eqns, program["outputs"])
                if not all(o["name"] in static for o in eqns[i]["out"])]
    views = {i for i in per_call if eqns[i]["op"] in VIEW_OPS}
    compute: dict[str, float] = defaultdict(float)
    kinds: dict[str, int] = defaultdict(int)
    flops = 0.0
    for i in per_call:
        if i in views:
            continue
        cost = _op_floor(profile, eqns[i], avals)
        compute[cost.bound] += cost.time_s
        kinds[cost.kind] += 1
        flops += cost.flops
    reads = _Reads(eqns, producer, views, static, avals)
    for i in per_call:
        if i not in views:
            reads.operands(eqns[i]["in"])
    returned = {o for o in program["outputs"] if isinstance(o, str) and o in producer and o not in static}
    reads.operands(o for o in returned if producer[o] in views)  # a returned view is copied out of its source
    writes = [nbytes(avals[o]) for o in returned]
    whole = list(reads.whole.values()) + writes
    partial = reads.partial_bytes()
    fastest = max(profile.memory.hbm_bw_bytes_per_s, profile.memory.cache_bw_bytes_per_s or 0.0)
    # memory_time is convex where a cache is faster than HBM (a sum over kernels is at least the
    # sum over buffers) and concave otherwise (at least the time of all bytes at once): either holds.
    memory_s = min(sum(memory_time(profile, b) for b in whole) + partial / fastest,
                   memory_time(profile, sum(whole) + partial))
    return Floors(dict(compute), memory_s, _launches(profile, kinds, bool(returned), pairs), sum(whole) + partial,
                  flops)


def _op_floor(profile: HardwareProfile, eqn: Eqn, avals: dict[str, Aval]) -> OpCost:
    """An op's compute as the estimate prices it, except a `cond`: its cheapest branch (which one
    runs is data)."""
    if eqn["op"] == "cond":
        return min((program_cost(profile, branch) for branch in nested_programs(eqn)), key=lambda c: c.time_s)
    return eqn_cost(profile, eqn, avals)


def _launches(profile: HardwareProfile, kinds: dict[str, int], writes: bool, pairs: int = 0) -> float:
    """The fewest kernels: an op the model runs on the host (a loop, an unknown op) is a kernel of
    its own, a kernel runs at most `max_gemms` GEMMs (or an attention's two: `pairs` of them), and
    vector work or a copy needs one at least."""
    gemms = kinds["gemm"]
    if profile.kernel.max_gemms < 2:
        gemms -= min(pairs, gemms // 2)
    kernels = kinds["host"] + math.ceil(gemms / profile.kernel.max_gemms)
    if not kernels and (writes or kinds["vector"]):
        kernels = 1
    return kernels * profile.kernel.launch_overhead_s


class _Reads:
    """Values from outside the per-call work (inputs, constants, precomputed weight work) that its
    kernels read: `whole` when some op reads all of it (through views that keep every element),
    `partial` (bytes per slice) when ops read it only through slices, which kernels may split."""

    def __init__(self, eqns: list[Eqn], producer: dict[str, int], views: set[int],
                 static: set[str], avals: dict[str, Aval]):
        self.eqns, self.producer, self.views, self.static, self.avals = eqns, producer, views, static, avals
        self.whole: dict[str, int] = {}
        self.slices: dict[str, dict[int, int]] = defaultdict(dict)

    def operands(self, names) -> None:
        for name in names:
            if isinstance(name, str):
                self._read(name, None)

    def partial_bytes(self) -> int:
        """What the reads through slices alone move at least: a value's slices, at most all of it."""
        return sum(min(nbytes(self.avals[name]), sum(parts.values()))
                   for name, parts in self.slices.items() if name not in self.whole)

    def _read(self, name: str, through_slice: int | None) -> None:
        index = self.producer.get(name)
        if name in self.static or index is None:
            if through_slice is None:
                self.whole[name] = nbytes(self.avals[name])
            else:
                self.slices[name][through_slice] = nbytes(self.avals[self.eqns[through_slice]["out"][0]["name"]])
        elif index in self.views:  # a view is folded into its reader, which reads the view's source
            eqn = self.eqns[index]
            through = index if eqn["op"] == "slice" and through_slice is None else through_slice
            for source in (a for a in eqn["in"] if isinstance(a, str)):
                self._read(source, through)
