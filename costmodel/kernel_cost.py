"""Extraction's price of an e-node: every chosen node is one kernel, fused or not.

A plain op node is a kernel of one op: it reads its operands from HBM and writes its value. A
`kernel` node (rewrites/fusion.py) computes its whole body in one kernel: it reads the values its
body reads and writes its value; the body's other values stay in SRAM, or spill when they do not
fit. So a value materialized once pays its write once and a read per reader, and a value absorbed
by two kernels is computed in both. `fused_estimate` is the same formula the kernel program's
estimates use (lowering/kernels.py), so extraction and the reported estimates agree.

Layout-only ops are views: a kernel reads through them at the size of their source, and lowering
folds them into their readers.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from costmodel.formulas import Estimate, kernel_estimate, launch_time, memory_time
from costmodel.key_blocking import BlockedWork, Step, blocked_options, key_region
from costmodel.node_equation import LEAF_OPS, node_equation
from costmodel.op_cost import FREE_OPS, Aval, OpCost, nbytes, op_cost
from costmodel.profile import HardwareProfile
from rewrites.egraph_view import BodyNode, EClass, EGraphView, ENode, closed_bottom_up
from rewrites.params import ParamsTable
from wire.json_types import Program

NODE_EPSILON_S = 1e-10  # per e-node: among equal-cost programs, prefer the one with fewer ops (above the
# ILP's relative gap on launch-bound programs, where kernels cost ~1 us each)
# Views: no kernel of their own; a kernel reading one reads (part of) its source. Static slices
# are views too (a strided read of the sliced block), which is what lets a merged GEMM feed its
# consumers without a copy kernel per slice.
VIEW_OPS = FREE_OPS | {"slice"}
VIEW_TERMS = frozenset(["reshape", "broadcast", "squeeze", "expand_dims", "slice"])  # term ops lowered to VIEW_OPS


@dataclass(frozen=True)
class ResourceTimes:
    """A kernel's time by resource: its ops' compute, its HBM traffic, its launch. The kernel takes
    max(compute, memory) + launch, so a program of kernels takes at least max(sum of compute, sum
    of memory) + sum of launches."""

    compute_s: float
    memory_s: float
    launch_s: float


NO_TIME = ResourceTimes(0.0, 0.0, 0.0)


def _boundary_bytes(profile: HardwareProfile, read_bytes: int, write_bytes: int, intermediate_bytes: int) -> int:
    return read_bytes + write_bytes + 2 * max(0, intermediate_bytes - profile.memory.sram_bytes)


def fused_times(profile: HardwareProfile, parts: list[OpCost], read_bytes: int, write_bytes: int,
                intermediate_bytes: int, inputs: int = 1, outputs: int = 1) -> ResourceTimes:
    """`fused_estimate`'s kernel by resource."""
    hbm = _boundary_bytes(profile, read_bytes, write_bytes, intermediate_bytes)
    return ResourceTimes(sum(c.time_s for c in parts), memory_time(profile, hbm), launch_time(profile, inputs, outputs))


def fused_estimate(profile: HardwareProfile, parts: list[OpCost], read_bytes: int, write_bytes: int,
                   intermediate_bytes: int, inputs: int = 1, outputs: int = 1) -> Estimate:
    """One kernel: its ops' compute, the HBM bytes crossing its boundary (over `inputs` and
    `outputs` buffers), and intermediates that do not fit in SRAM going out and back."""
    hbm = _boundary_bytes(profile, read_bytes, write_bytes, intermediate_bytes)
    compute = sum(c.time_s for c in parts)
    bound = max(parts, key=lambda c: c.time_s).bound if compute > 0 else "vector"
    return kernel_estimate(profile, compute, sum(c.energy_j for c in parts), sum(c.flops for c in parts), hbm, bound,
                           inputs, outputs)


def key_blocked(
    profile: HardwareProfile,
    steps: list[Step],
    parts: list[OpCost],
    avals: dict[str, Aval],
    read_bytes: int,
    write_bytes: int,
    intermediate_bytes: int,
    inputs: list[str],
    outputs: int,
    counted: set[str],
    written: set[str],
    fills: Sequence[str] = (),
    online: bool = True,
) -> BlockedWork | None:
    """The cheapest blocked form of a kernel (costmodel/key_blocking.py) where it holds an
    attention and that form is cheaper than the kernel as it is: over blocks of query rows, each
    with every key, and with `online` (the online softmax) over blocks of keys too; `counted`: the values
    `intermediate_bytes` holds, `written`: those it writes to HBM, `fills`: inputs that are a
    literal broadcast (torch's zeros for a fully masked row), which a block makes as it goes."""
    if sum(s.op == "dot_general" for s in steps) < 2:
        return None
    steps = steps + [Step("broadcast_in_dim", {}, (None,), name) for name in fills]
    parts = parts + [OpCost("free", 0.0, 0.0, 0.0, "vector")] * len(fills)
    region = key_region(steps, avals, written)
    if region is None:
        return None

    def time_s(parts, read_bytes, intermediate_bytes) -> float:
        return fused_estimate(profile, parts, read_bytes, write_bytes, intermediate_bytes, len(inputs), outputs).time_s

    options = blocked_options(
        profile, region, steps, parts, avals, read_bytes, intermediate_bytes, set(inputs), counted, online
    )
    # on a tie (HBM traffic hidden under compute), the fewest blocks: less per-block overhead than the model counts
    best = min(options, key=lambda w: (time_s(w.parts, w.read_bytes, w.intermediate_bytes),
                                       w.tiling["query_blocks"] * w.tiling["key_blocks"]), default=None)
    plain = time_s(parts, read_bytes, intermediate_bytes)
    return best if best and time_s(best.parts, best.read_bytes, best.intermediate_bytes) < plain else None


def gemm_kernel_time(profile: HardwareProfile, params: dict, dtype: str, m: int, k: int, n: int) -> float:
    """One (m x k) @ (k x n) product as a kernel of its own, as extraction prices a plain dot node."""
    ins, out = [((m, k), dtype), ((k, n), dtype)], ((m, n), dtype)
    gemm = op_cost(profile, "dot_general", params, ins, out)
    return fused_estimate(profile, [gemm], sum(nbytes(a) for a in ins), nbytes(out), 0, len(ins)).time_s


def chained_time(profile: HardwareProfile, gemm: OpCost) -> float:
    """A GEMM run back to back with others in one kernel: its compute and a share of the launch."""
    return gemm.time_s + profile.kernel.launch_overhead_s / profile.kernel.max_gemms


def gemm_chained_time(profile: HardwareProfile, params: dict, dtype: str, m: int, k: int, n: int) -> float:
    """One (m x k) @ (k x n) product as one of a run of GEMMs in one kernel (the `chained` proxy)."""
    return chained_time(profile, op_cost(profile, "dot_general", params, [((m, k), dtype), ((k, n), dtype)],
                                         ((m, n), dtype)))


def class_bytes(cls: EClass) -> int:
    return nbytes((cls.shape, cls.dtype))


def read_bytes(view: EGraphView, sizes: dict[str, int]) -> dict[str, int]:
    """Bytes a kernel reads for each class (`sizes`: each class's own bytes): the smallest source
    reachable through view nodes (a broadcast bias is read at the bias's size)."""
    result = dict(sizes)
    changed = True
    while changed:  # views only shrink what is read; a fixpoint over view edges
        changed = False
        for cid, cls in view.classes.items():
            for node in cls.nodes:
                if node.op in VIEW_TERMS and node.children and result[node.children[0]] < result[cid]:
                    result[cid] = result[node.children[0]]
                    changed = True
    return result


def static_classes(view: EGraphView, program: Program, precompute_weights: bool = True) -> set[str]:
    """E-classes computable from constants, and from weights when the profile precomputes
    weight-only work (then free per call)."""
    n_inputs = len(program["inputs"])
    weights = {i for i, s in enumerate(program["inputs"]) if precompute_weights and s.get("role") == "weight"}
    nodes = [n for c in view.classes.values() for n in c.nodes]
    leaves = [n.eclass for n in nodes if n.op == "var" and (int(n.attrs[0]) >= n_inputs or int(n.attrs[0]) in weights)]
    return closed_bottom_up((n for n in nodes if n.op not in ("var", "opaque")), leaves)[0]


KERNEL_OPS = frozenset(["kernel", "kernel_tee"])  # nodes that compute a fused body


def inlined_gemms(node: ENode) -> list[str]:
    """Classes of the GEMMs a kernel node computes inside itself."""
    if node.op not in KERNEL_OPS:
        return []
    return [b.eclass for b in node.body_ops if b.op in ("dot", "conv")]


def gemm_exclusive_groups(view: EGraphView) -> list[tuple[frozenset[str], frozenset[str]]]:
    """A GEMM is computed at most once, whatever the profile: per GEMM class, (its own computing
    nodes, the kernel nodes inlining it), of which a chosen program uses at most one
    (costmodel/extract.py). A `tee_out` computes nothing: it reads what its kernel wrote."""
    groups: dict[str, set[str]] = {}
    for cls in view.classes.values():
        for node in cls.nodes:
            for gemm in inlined_gemms(node):
                if gemm != node.eclass:  # a kernel whose root is the GEMM (over views) is its own node
                    groups.setdefault(gemm, set()).add(node.id)
    return [(frozenset(n.id for n in view.classes[cid].nodes if n.op != "tee_out"), frozenset(ids))
            for cid, ids in sorted(groups.items())]


def tee_requirements(view: EGraphView) -> list[tuple[str, str]]:
    """(tee_out node, the kernel_tee node that writes its value): the first needs the second."""
    writers = {n.attrs: n.id for c in view.classes.values() for n in c.nodes if n.op == "kernel_tee"}
    return [(n.id, writers[n.attrs[:2]]) for c in view.classes.values() for n in c.nodes
            if n.op == "tee_out" and n.attrs[:2] in writers]


Proxy = Literal["epilogues", "chained"]  # how the algebra stage anticipates the kernels (NodeCoster)


def proxies(profile: HardwareProfile) -> dict[Proxy, Callable[..., float]]:
    """The algebra's proxies for a profile, each with its price of one matrix product (the
    matrix-chain order is seeded under each): `chained` only where GEMMs run back to back."""
    both: dict[Proxy, Callable[..., float]] = {"epilogues": gemm_kernel_time, "chained": gemm_chained_time}
    return both if profile.kernel.max_gemms > 1 else {"epilogues": gemm_kernel_time}


class NodeCoster:
    """Per-node kernel time for extraction; weight-only work is free per call (precomputed).

    The algebra stage has no kernel nodes yet; it prices with a `proxy` for the kernels the
    fusion stage can make. `epilogues`: a vector op is fused into its producer (its compute only),
    so the algebra is not biased against elementwise work, and a GEMM is a kernel of its own.
    `chained` (for profiles that run GEMMs back to back): a GEMM is one of a run in one kernel,
    its operands and result on chip: its compute and a share of the launch. (Reads of program
    inputs are left out: every order of the same products reads them, overlapped with compute.)"""

    def __init__(self, view: EGraphView, table: ParamsTable, profile: HardwareProfile, static: set[str],
                 proxy: Proxy | None = None, key_blocking: bool = False):
        self.view, self.table, self.profile, self.static = view, table, profile, static
        self.proxy = proxy
        self.key_blocking = key_blocking  # attention kernels may run key-blocked (real mode's online softmax)
        self.bytes = {cid: class_bytes(cls) for cid, cls in view.classes.items()}  # each class's value
        self.reads = read_bytes(view, self.bytes)
        self.body_costs: dict[BodyNode, OpCost] = {}  # body ops are shared by many kernel nodes
        # ...and a body op's price depends only on its op, attrs and shapes: GPT-2's kernel e-graph
        # holds 8.9k body ops of 87 kinds.
        self.op_costs: dict[tuple, OpCost] = {}
        # A plain node's estimate depends only on what `_plain_estimate` reads; an e-graph holds
        # many nodes alike (an 80-matmul chain's orders: 75k nodes, a few thousand distinct).
        self.plain_estimates: dict[tuple, Estimate] = {}
        self.plain_times: dict[tuple, ResourceTimes] = {}
        self.kernel_work: dict[str, tuple] = {}  # a kernel node's `_work`: extraction and the floor both price it

    def aval(self, cid: str) -> Aval:
        cls = self.view.classes[cid]
        return cls.shape, cls.dtype

    def op_cost(self, op_node: ENode | BodyNode, operands: Iterable[str]) -> tuple[str, OpCost]:
        op, params = node_equation(op_node, self.view.classes[op_node.eclass], self.table)
        return op, op_cost(self.profile, op, params, [self.aval(c) for c in operands], self.aval(op_node.eclass))

    def body_cost(self, body: BodyNode) -> OpCost:
        cost = self.body_costs.get(body)
        if cost is None:
            operands = [o.eclass for o in body.operands]
            key = body.op, body.attrs, self.aval(body.eclass), tuple(self.aval(c) for c in operands)
            cost = self.op_costs.get(key)
            if cost is None:
                cost = self.op_costs[key] = self.op_cost(body, operands)[1]
            self.body_costs[body] = cost
        return cost

    def __call__(self, node: ENode) -> float:
        if node.op in LEAF_OPS:
            return 0.0
        if self._free(node):
            return NODE_EPSILON_S  # a tee_out's kernel pays its write
        ops = len(node.body_ops) if node.op in KERNEL_OPS else 1
        return (
            self.estimate(node).time_s / self._shares(node) + NODE_EPSILON_S * ops
        )  # ties: fewer ops (hidden under HBM time)

    def times(self, node: ENode) -> ResourceTimes:
        """The node's per-call kernel time by resource, as the kernel stage prices it (no proxy)."""
        if node.op in LEAF_OPS or self._free(node):
            return NO_TIME
        if node.op in KERNEL_OPS:
            times = fused_times(self.profile, *self._work(node))
        else:
            key = self._plain_key(node)
            if key not in self.plain_times:
                op, cost = self.op_cost(node, node.children)
                self.plain_times[key] = (
                    NO_TIME if op in VIEW_OPS else fused_times(self.profile, *self._work(node, cost))
                )
            times = self.plain_times[key]
        shares = self._shares(node)
        return ResourceTimes(times.compute_s / shares, times.memory_s / shares, times.launch_s / shares)

    def _free(self, node: ENode) -> bool:
        """Nothing per call: a tee_out reads what its kernel wrote; weight-only work is precomputed."""
        return node.op == "tee_out" or (node.op != "opaque" and all(c in self.static for c in node.children))

    def _shares(self, node: ENode) -> int:
        """An opaque primitive runs once for all its outputs (one node each): each pays its share."""
        return len(self.table.get(node.attrs[1])["out"]) if node.op == "opaque" else 1

    def _work(self, node: ENode, cost: OpCost | None = None) -> tuple[list[OpCost], int, int, int, int, int]:
        """`fused_estimate`'s arguments for the kernel the node is (a plain node's op: `cost`)."""
        if node.op in KERNEL_OPS:
            if node.id not in self.kernel_work:
                self.kernel_work[node.id] = self._kernel_work(node)
            return self.kernel_work[node.id]
        if cost.kind == "host":  # a host op reads whole buffers: folding views in is a kernel's trick
            reads = sum(self.bytes[c] for c in node.children)
        else:
            reads = sum(self.reads[c] for c in node.children)
        return [cost], reads, self.bytes[node.eclass], 0, len(node.children), 1

    def _kernel_work(self, node: ENode) -> tuple[list[OpCost], int, int, int, int, int]:
        """`_work` of a kernel node: its body ops' costs, what it reads, writes and holds inside."""
        size = self.bytes
        ops = node.body_ops
        written = set(node.attrs[1]) if node.op == "kernel_tee" else set()
        parts = [self.body_cost(b) for b in ops]
        counted = [b.eclass for b in ops[:-1] if b.op not in VIEW_TERMS and b not in written]
        inside = sum(size[c] for c in counted)
        write = size[node.eclass] + sum(size[b.eclass] for b in written)
        reads = sum(self.reads[c] for c in node.children)
        outputs = 1 + len(written)
        blocked = self._blocked(node, parts, reads, write, inside, outputs, set(counted),
                                                      {node.eclass, *(b.eclass for b in written)})
        if blocked:
            return blocked.parts, blocked.read_bytes, write, blocked.intermediate_bytes, len(node.children), outputs
        return parts, reads, write, inside, len(node.children), outputs

    def _blocked(self, node: ENode, parts: list[OpCost], reads: int, write: int, inside: int, outputs: int,
                 counted: set[str], written: set[str]) -> BlockedWork | None:
        """The kernel node's key-blocked form where it is cheaper (`_work`'s arguments for it)."""
        if sum(b.op == "dot" for b in node.body_ops) < 2:
            return None
        literal = {c for c in {o.eclass for b in node.body_ops for o in b.operands} if self._literal(c)}
        steps = [Step(*node_equation(b, self.view.classes[b.eclass], self.table),
                      tuple(None if o.eclass in literal else o.eclass for o in b.operands), b.eclass)
                 for b in node.body_ops]  # literals as the wire program has them: no operand
        fills = [c for c in node.children
                 if any(n.op == "broadcast" and self._literal(n.children[0]) for n in self.view.classes[c].nodes)]
        avals = {c: self.aval(c) for s in steps for c in (s.out, *s.ins) if c is not None} | \
            {c: self.aval(c) for c in fills}
        return key_blocked(self.profile, steps, parts, avals, reads, write, inside, list(node.children), outputs,
                           counted, written, fills, online=self.key_blocking)

    def _literal(self, cid: str) -> bool:
        return any(n.op in ("lit", "flit") for n in self.view.classes[cid].nodes)

    def estimate(self, node: ENode) -> Estimate:
        if node.op in KERNEL_OPS:
            return fused_estimate(self.profile, *self._work(node))
        key = self._plain_key(node)
        if key not in self.plain_estimates:
            self.plain_estimates[key] = self._plain_estimate(node)
        return self.plain_estimates[key]

    def _plain_key(self, node: ENode) -> tuple:
        """What a plain node's price depends on."""
        return node.op, node.attrs, self.aval(node.eclass), tuple((self.aval(c), self.reads[c]) for c in node.children)

    def _plain_estimate(self, node: ENode) -> Estimate:
        op, cost = self.op_cost(node, node.children)
        if op in VIEW_OPS:
            return Estimate(0.0, 0.0, 0, 0.0, "vector")  # a view: its readers read its source
        if self.proxy and cost.kind == "vector":
            return Estimate(cost.time_s, cost.energy_j, 0, cost.flops, cost.bound)
        if self.proxy == "chained" and cost.kind == "gemm":
            return Estimate(chained_time(self.profile, cost), cost.energy_j, 0, cost.flops, cost.bound)
        return fused_estimate(self.profile, *self._work(node, cost))
