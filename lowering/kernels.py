"""Wire program -> KernelProgram: kernels with their ops, buffers, GEMM tiling and estimates.

Kernel boundaries come from extraction (`groups`: the optimizer's own choice, one group per chosen
e-node) or from a greedy `FusionPolicy`: the fair baseline is the cheapest of the conventional
ones, what a good fusing compiler does on the same hardware (vertical and sibling fusion, GEMMs
back to back up to the profile's `kernel.max_gemms`); `NAIVE` is one kernel per equation.
Layout-only ops are views folded into the kernels that read them. Values that depend only on
weights and constants are precomputed once and reported apart from per-call cost.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from costmodel.formulas import Estimate, program_estimate, sum_estimates
from costmodel.kernel_cost import VIEW_OPS, fused_estimate, key_blocked
from costmodel.key_blocking import Step
from costmodel.op_cost import Aval, OpCost, nbytes, op_cost
from costmodel.profile import HardwareProfile
from lowering.kernel_json import BufferJSON, KernelJSON, KernelsJSON
from wire.json_types import Eqn, Program
from wire.primitives import GEMMS, names, nested_programs

REDUCTIONS = names(role="reduction")


@dataclass(frozen=True)
class FusionPolicy:
    """A greedy grouping of equations into kernels, in program order. `vertical`: an op joins the
    kernel that produced one of its operands (producer-consumer fusion); `siblings`: otherwise it
    joins the kernel opened last when that kernel reads one of its operands (the operand is read
    once) or when it reads no value computed per call (it can run anywhere); `gemm_chains`: a kernel
    may run GEMMs back to back, up to the profile's `kernel.max_gemms`, instead of one;
    `gemm_alone`: a GEMM is a library call, its kernel takes no op before it and ops after it only
    with `gemm_epilogue`; `one_loop_nest`: a kernel is one loop nest, as XLA emits it, so an op
    reading a reduction's result starts the next kernel (a row is reduced before anything uses it)
    and values inside a kernel stream through registers, never held whole (none spills)."""

    name: str
    vertical: bool = True
    siblings: bool = False
    gemm_chains: bool = False
    gemm_alone: bool = False
    gemm_epilogue: bool = True
    one_loop_nest: bool = False


NAIVE = FusionPolicy("naive", vertical=False)
VERTICAL = FusionPolicy("vertical")  # XLA's producer-consumer fusion, one GEMM per kernel
SIBLINGS = FusionPolicy("siblings", siblings=True)
CONVENTIONAL = FusionPolicy("conventional", siblings=True, gemm_chains=True)
POLICIES = (
    VERTICAL,
    SIBLINGS,
    CONVENTIONAL,
)  # the baseline's choices; extraction is seeded with each, on every candidate


@dataclass(eq=False)
class Kernel:
    id: int
    kind: str
    eqns: list[int]
    ops: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    tiling: dict[str, int] = field(default_factory=dict)
    buffers: list[BufferJSON] = field(default_factory=list)
    estimate: Estimate | None = None  # set once its group is complete

    @property
    def priced(self) -> Estimate:
        """Its estimate: every kernel of a KernelProgram has one."""
        assert self.estimate is not None, f"kernel {self.id} has not been priced"
        return self.estimate

    def to_dict(self) -> KernelJSON:
        return {
            "id": self.id,
            "kind": self.kind,
            "ops": self.ops,
            "eqns": sorted(set(self.eqns)),
            "inputs": self.inputs,
            "outputs": self.outputs,
            "tiling": self.tiling,
            "buffers": self.buffers,
            "estimate": self.priced.to_dict(),
        }


    @classmethod
    def from_dict(cls, data: KernelJSON) -> Kernel:
        """A kernel as a response reports it (estimates are not needed to run it)."""
        estimate = data.get("estimate")
        return cls(data["id"], data["kind"], list(data["eqns"]), list(data["ops"]), list(data["inputs"]),
                   list(data["outputs"]), dict(data["tiling"]), list(data.get("buffers", [])),
                   Estimate(estimate["time_s"], estimate["energy_j"], estimate["hbm_bytes"], estimate["flops"],
                            estimate["bound"]) if estimate else None)


@dataclass
class KernelProgram:
    kernels: list[Kernel]  # per-call work, in execution order
    precompute: list[Kernel]  # weight-only work, run once
    total: Estimate
    precompute_total: Estimate

    @classmethod
    def from_response(cls, response: KernelsJSON) -> KernelProgram:
        """The kernel program a response reports (`kernels`, `precompute_kernels` and their totals)."""
        kernels = [Kernel.from_dict(k) for k in response["kernels"]]
        precompute = [Kernel.from_dict(k) for k in response.get("precompute_kernels", [])]
        estimate = response["estimate"]  # the totals include what no kernel shows (the call's dispatch)
        ahead = estimate.get("precompute")
        return cls(kernels, precompute, Estimate(**estimate["optimized"]),
                   Estimate(**ahead) if ahead else sum_estimates([k.priced for k in precompute]))


def avals_of(program: Program) -> dict[str, Aval]:
    avals = {s["name"]: (tuple(s["shape"]), s["dtype"]) for s in [*program["inputs"], *program.get("consts", [])]}
    for eqn in program["eqns"]:
        avals.update({o["name"]: (tuple(o["shape"]), o["dtype"]) for o in eqn["out"]})
    return avals


def output_avals(program: Program) -> list[Aval]:
    """Each output's (shape, dtype); a literal output is a scalar of its dtype."""
    avals = avals_of(program)
    return [avals[o] if isinstance(o, str) else ((), o["dtype"]) for o in program["outputs"]]


def static_names(program: Program, weights: bool = True) -> set[str]:
    """Values computable from constants, and from weights too when `weights` (the profile
    precomputes weight-only work)."""
    static = {c["name"] for c in program.get("consts", [])}
    static |= {i["name"] for i in program["inputs"] if weights and i.get("role") == "weight"}
    for eqn in program["eqns"]:
        names = [a for a in eqn["in"] if isinstance(a, str)]
        if all(a in static for a in names):
            static |= {o["name"] for o in eqn["out"]}
    return static


def eqn_cost(profile: HardwareProfile, eqn: Eqn, avals: dict[str, Aval]) -> OpCost:
    ins = [avals[a] if isinstance(a, str) else ((), a["dtype"]) for a in eqn["in"]]
    out = (tuple(eqn["out"][0]["shape"]), eqn["out"][0]["dtype"]) if len(eqn["out"]) == 1 else \
        ((sum(math.prod(o["shape"]) for o in eqn["out"]),), eqn["out"][0]["dtype"])
    return op_cost(profile, eqn["op"], eqn.get("params") or {}, ins, out)


def build_kernel_program(program: Program, profile: HardwareProfile, policy: FusionPolicy = CONVENTIONAL,
                         groups: list[list[int]] | None = None, key_blocking: bool = False,
                         pinned: Sequence[Sequence[int]] = ()) -> KernelProgram:
    """Kernels of `program`: the given `groups` of equation indices, else those of `policy` around
    the `pinned` groups (each one kernel as given: a fused kernel the program carries).
    An attention kernel runs over blocks of query rows where that is cheaper (each block with every
    key: a conventional compiler's tiling of a fused kernel, exact); with `key_blocking` also over
    blocks of keys (costmodel/key_blocking.py; the online softmax reorders sums, so real mode only,
    and a conventional compiler does not)."""
    avals, static = avals_of(program), static_names(program, profile.kernel.precompute_weights)
    costs = [eqn_cost(profile, e, avals) for e in program["eqns"]]
    placer = _Placer(program, costs)
    if groups is None:
        _assign_greedy(placer, static, policy, profile.kernel.max_gemms if policy.gemm_chains else 1, pinned)
    else:
        _assign_groups(placer, static, groups)
    placer.materialize_returned_views()
    kernels, precompute, escaping = placer.kernels, placer.precompute, placer.escaping
    # literals broadcast to a shape: a key-blocked kernel reading one makes each block of it
    fills = {e["out"][0]["name"] for e in program["eqns"]
             if e["op"] == "broadcast_in_dim" and not isinstance(e["in"][0], str)}
    streamed = groups is None and policy.one_loop_nest
    for group in (kernels, precompute):
        for kernel in group:
            _finish(kernel, program, costs, avals, profile, escaping, key_blocking, fills, streamed)
    return KernelProgram(kernels, precompute, program_estimate(profile, [k.priced for k in kernels]),
                         sum_estimates([k.priced for k in precompute]))


class _Placer:
    """Kernels under construction: places equations, folds deferred views into their readers and
    records which values escape their kernel (an HBM write: the program returns it or another
    kernel reads it)."""

    def __init__(self, program: Program, costs: list[OpCost]):
        self.eqns, self.costs = program["eqns"], costs
        self.kernels: list[Kernel] = []
        self.precompute: list[Kernel] = []
        self.producer: dict[str, Kernel] = {}
        self.reads: dict[Kernel, set[str]] = {}  # per kernel: the values its equations read
        self.deferred: dict[str, int] = {}  # view output -> its equation, placed in each reader
        self.escaping = {o for o in program["outputs"] if isinstance(o, str)}
        self.pinned: set[Kernel] = set()  # kernels whose equations were given: no other op joins them

    def open(self, per_call: bool) -> Kernel:
        group = self.kernels if per_call else self.precompute
        group.append(Kernel(len(group), "vector", []))
        return group[-1]

    def place(self, index: int, kernel: Kernel) -> None:
        for a in self.eqns[index]["in"]:
            if not isinstance(a, str):
                continue
            if a in self.deferred:
                if self.deferred[a] not in kernel.eqns:
                    self.place(self.deferred[a], kernel)
            elif a in self.producer and self.producer[a] is not kernel:
                self.escaping.add(a)
        kernel.eqns.append(index)
        self.producer.update((o["name"], kernel) for o in self.eqns[index]["out"])
        self.reads.setdefault(kernel, set()).update(a for a in self.eqns[index]["in"] if isinstance(a, str))

    def reduced(self, kernel: Kernel) -> set[str]:
        """The values `kernel`'s reductions produce."""
        return {o["name"] for i in kernel.eqns if self.eqns[i]["op"] in REDUCTIONS for o in self.eqns[i]["out"]}

    def defer(self, index: int) -> None:
        self.deferred.update((o["name"], index) for o in self.eqns[index]["out"])

    def materialize_returned_views(self) -> None:
        """A returned view is written by the kernel that computes its source (a slice of a merged
        GEMM is one more output of that GEMM's kernel), or by a copy kernel when no kernel does."""
        for index in sorted({self.deferred[name] for name in self.escaping & self.deferred.keys()}):
            sources = [k for a in self.eqns[index]["in"] if isinstance(a, str)
                       and (k := self.producer.get(a)) in self.kernels and a not in self.deferred]
            self.place(index, sources[0] if sources else self.open(per_call=True))


def _is_static(eqn: Eqn, static: set[str]) -> bool:
    return all(o["name"] in static for o in eqn["out"])


def _assign_groups(placer: _Placer, static: set[str], groups: list[list[int]]) -> None:
    """Extraction's kernels: a lone view is folded into its readers; weight-only groups are
    precomputed; every other group is one per-call kernel."""
    for group in groups:
        if (
            len(group) == 1
            and placer.eqns[group[0]]["op"] in VIEW_OPS
            and not _is_static(placer.eqns[group[0]], static)
        ):
            placer.defer(group[0])
            continue
        target = placer.open(per_call=not all(_is_static(placer.eqns[i], static) for i in group))
        for index in group:
            placer.place(index, target)


def _assign_greedy(placer: _Placer, static: set[str], policy: FusionPolicy, max_gemms: int,
                   pinned: Sequence[Sequence[int]] = ()) -> None:
    """Greedy fusion in program order under `policy`. Views of kernel-external data (a bias
    broadcast) are folded into each reader. An op joins the latest kernel that produced one of its
    operands (its other operands come from earlier kernels, so kernel order stays a valid
    schedule), else, with siblings, the kernel opened last (which runs after all its producers);
    a kernel takes vector work freely and GEMMs up to `max_gemms`, and never joins a host op."""
    per_call = placer.kernels
    group_of = {i: n for n, group in enumerate(pinned) for i in group}
    opened: dict[int, Kernel] = {}
    for index, (eqn, cost) in enumerate(zip(placer.eqns, placer.costs)):
        if index in group_of:
            if group_of[index] not in opened:
                opened[group_of[index]] = placer.open(per_call=True)
                placer.pinned.add(opened[group_of[index]])
            placer.place(index, opened[group_of[index]])
            continue
        names = [a for a in eqn["in"] if isinstance(a, str)]
        producers = [k for a in names if (k := placer.producer.get(a)) in per_call]
        if _is_static(eqn, static):
            target = placer.open(per_call=False)
        elif policy.vertical and eqn["op"] in VIEW_OPS and not producers:  # a view of earlier data: folded into readers
            placer.defer(index)
            continue
        else:
            options = [max(producers, key=lambda k: k.id)] if producers and policy.vertical else []
            if policy.siblings and per_call and (not producers or placer.reads.get(per_call[-1], set()) & set(names)):
                options.append(per_call[-1])
            target = next((k for k in options if _fits(placer, k, index, policy, max_gemms)), None) \
                or placer.open(per_call=True)
        placer.place(index, target)


def _fits(placer: _Placer, kernel: Kernel, index: int, policy: FusionPolicy, max_gemms: int) -> bool:
    """Whether equation `index` may join `kernel` under `policy`."""
    cost, kinds = placer.costs[index], [placer.costs[i].kind for i in kernel.eqns]
    if "host" in kinds or kernel in placer.pinned:
        return False
    if policy.one_loop_nest and placer.reduced(kernel) & {a for a in placer.eqns[index]["in"] if isinstance(a, str)}:
        return False
    if policy.gemm_alone and ((cost.kind == "gemm" and any(k != "free" for k in kinds))
                              or ("gemm" in kinds and (not policy.gemm_epilogue
                                                       or placer.eqns[index]["op"] in REDUCTIONS))):
        return False
    return cost.kind in ("vector", "free") or (cost.kind == "gemm" and kinds.count("gemm") < max_gemms)


def kernel_kind(parts: list[OpCost], ops: list[str]) -> str:
    """host if it runs an op the model does not know; optical_gemm for a lone GEMM; vector for a
    lone vector op (or a copy); fused for several compute ops (views do not count)."""
    compute = [c for c, op in zip(parts, ops) if c.kind != "free" and op not in VIEW_OPS]
    if any(c.kind == "host" for c in compute):
        return "host"
    if len(compute) > 1:
        return "fused"
    return "optical_gemm" if compute and compute[0].kind == "gemm" else "vector"


def _finish(kernel: Kernel, program, costs: list[OpCost], avals, profile: HardwareProfile,
            escaping: set[str], key_blocking: bool, fills: set[str], streamed: bool = False) -> None:
    """Kind, ops, buffers (inputs and outputs in HBM; intermediates in SRAM, or spilled when they
    do not fit, unless `streamed` through one loop nest; an attention's scores in tiles when it
    runs key-blocked), tiling of its GEMM (and its blocks) and the estimate."""
    eqns = [program["eqns"][i] for i in kernel.eqns]
    produced = [o["name"] for e in eqns for o in e["out"]]
    inside = set(produced)
    parts = [costs[i] for i in kernel.eqns]
    kernel.ops = [e["op"] for e in eqns]
    kernel.kind = kernel_kind(parts, kernel.ops)
    kernel.inputs = list(dict.fromkeys(a for e in eqns for a in e["in"] if isinstance(a, str) and a not in inside))
    kernel.outputs = [n for n in produced if n in escaping]
    views = {o["name"] for i in kernel.eqns if program["eqns"][i]["op"] in VIEW_OPS for o in program["eqns"][i]["out"]}
    intermediates = [n for n in produced if n not in kernel.outputs and n not in views]
    inside_bytes = sum(nbytes(avals[n]) for n in intermediates)
    read, write = sum(_read_bytes(n, eqns, avals) for n in kernel.inputs), sum(nbytes(avals[n]) for n in kernel.outputs)
    kernel.tiling = _tiling([c.tiling for c in parts if c.kind == "gemm"])
    blocked = key_blocked(profile, [Step.of(e) for e in eqns], parts, avals, read, write, inside_bytes, kernel.inputs,
                          len(kernel.outputs), set(intermediates), set(kernel.outputs),
                          [n for n in kernel.inputs if n in fills], online=key_blocking)
    if blocked:
        kernel.kind = "key_blocked" if key_blocking else "row_blocked"
        kernel.tiling = {**kernel.tiling, **blocked.tiling}
        parts, read, inside_bytes = blocked.parts, blocked.read_bytes, blocked.intermediate_bytes
    inside_bytes = 0 if streamed and not blocked else inside_bytes
    level = "sram" if inside_bytes <= profile.memory.sram_bytes else "spill"
    kernel.buffers = [_buffer(n, avals[n], role, lvl) for names, role, lvl in
                      ((kernel.inputs, "input", "hbm"), (kernel.outputs, "output", "hbm"),
                       (intermediates, "intermediate", level)) for n in names]
    kernel.estimate = fused_estimate(profile, parts, read, write, inside_bytes, len(kernel.inputs), len(kernel.outputs))


def _tiling(gemms: list[dict[str, int]]) -> dict[str, int]:
    """A kernel's GEMM tiling; for GEMMs run back to back, their tiles, loads and passes summed
    (k_splits: the most any of them needs)."""
    if len(gemms) <= 1:
        return gemms[0] if gemms else {}
    return {key: (max if key == "k_splits" else sum)(g[key] for g in gemms) for key in gemms[0]}


def _read_bytes(name: str, eqns: list[Eqn], avals: dict[str, Aval]) -> int:
    """Bytes a kernel reads of an input: the whole buffer, or the parts its slices read when it
    reads the input only through slices (a strided read, as extraction prices it)."""
    readers = [e for e in eqns if name in e["in"]]
    if readers and all(e["op"] == "slice" for e in readers):
        return min(nbytes(avals[name]), sum(nbytes(avals[e["out"][0]["name"]]) for e in readers))
    return nbytes(avals[name])


def _buffer(name: str, aval: Aval, role: str, level: str) -> BufferJSON:
    return {"name": name, "shape": list(aval[0]), "dtype": aval[1], "role": role, "level": level}


def gemm_flops(program: Program, profile: HardwareProfile) -> float:
    """Floating-point operations of the program's contractions (matmuls and convolutions), loop
    bodies included: a scan's times its length, a cond's dearest branch, a while's one trip (its
    trip count is data: a lower bound, as the cost model prices it)."""
    avals, total = avals_of(program), 0.0
    for eqn in program["eqns"]:
        op, params = eqn["op"], eqn.get("params") or {}
        bodies = [gemm_flops(body, profile) for body in nested_programs(eqn)]
        if op in GEMMS:
            total += eqn_cost(profile, eqn, avals).flops
        elif op == "scan":
            total += int(params["length"]) * sum(bodies)
        elif op == "cond":
            total += max(bodies)
        else:
            total += sum(bodies)
    return total
