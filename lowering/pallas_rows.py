"""A fused kernel of a returned program as one `row_blocked` equation (wire/row_blocked.py, a
Pallas kernel over blocks of rows), where every value it computes is made one row at a time along
some axis: a GEMM's rows with its epilogue, elementwise work, a row's reduction, views that keep
the rows apart. "Rows" are the slices along the first axis of the kernel's results for which that
holds (a kernel that sums over its rows is blocked along its columns).

Rows are found from the kernel's results back, through each equation's dimension map; an operand
that no row of a result depends on (a weight, a bias) is read whole. The block holds as many rows
as fit the profile's on-chip block memory (`memory.block_bytes`, else `sram_bytes`) beside what is
read whole, a power of two. A kernel that mixes along every axis (a sum over everything, positions
from an iota along each, a slice), or whose whole operands leave no room for a block, stays JAX
ops, and a note says why.
"""
from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np

from costmodel.formulas import Estimate, launch_time, memory_time
from costmodel.profile import HardwareProfile
from lowering.kernels import Kernel, avals_of
from wire.format import parse_dtype
from wire.json_types import Eqn, Program, Tensor
from wire.primitives import PRIMITIVES, deterministic

Axis = int | None  # the axis holding a value's rows; None: the same for every row (read whole)


class CannotBlockRows(Exception):
    """Why a kernel's values are not made row by row."""


def _dot_operand_axes(eqn: Eqn, axis: int, ranks: tuple[int, int]) -> list[Axis]:
    """The output's batch dims come first, then the lhs's free dims, then the rhs's."""
    (lc, rc), (lb, rb) = eqn["params"]["dimension_numbers"]
    lhs_free = [d for d in range(ranks[0]) if d not in (*lc, *lb)]
    rhs_free = [d for d in range(ranks[1]) if d not in (*rc, *rb)]
    if axis < len(lb):
        return [lb[axis], rb[axis]]
    if axis < len(lb) + len(lhs_free):
        return [lhs_free[axis - len(lb)], None]
    return [None, rhs_free[axis - len(lb) - len(lhs_free)]]


def operand_axes(eqn: Eqn, axis: Axis, shape_of) -> list[Axis]:
    """The row axis of each operand of `eqn` (None for a literal or one read whole) given its
    result's; raises CannotBlockRows where a result's row reads more than its operands' row."""
    op, ins, params = eqn["op"], eqn["in"], eqn.get("params") or {}
    shapes = [shape_of(a) for a in ins]
    if axis is None:  # the same for every row: computed whole in each block, as it is
        if not deterministic(eqn):
            raise CannotBlockRows(f"{op} may differ each time it runs")
        return [None] * len(ins)
    out_shape = tuple(eqn["out"][0]["shape"])
    role = PRIMITIVES[op].role if op in PRIMITIVES else None
    if op == "iota" and params["dimension"] == axis:
        raise CannotBlockRows("an iota numbers its rows (a block would number its own)")
    if role == "elementwise" or op == "concatenate" and params["dimension"] != axis:
        if any(len(s) not in (0, len(out_shape)) for s in shapes):
            return _refuse(op)
        # a scalar, or an operand of one row broadcast over them all (a bias), is read whole
        return [axis if s and (s[axis] == out_shape[axis] or out_shape[axis] == 1) else None for s in shapes]
    if role == "reduction" and "axes" in params:
        kept = [d for d in range(len(shapes[0])) if d not in params["axes"]]
        return [kept[axis]] + [None] * (len(ins) - 1)
    if op == "broadcast_in_dim":
        dims = list(params["broadcast_dimensions"])
        if axis not in dims or shapes[0][dims.index(axis)] == 1:
            return [None]
        return [dims.index(axis)]
    if op == "transpose":
        return [params["permutation"][axis]]
    if op == "squeeze":
        kept = [d for d in range(len(shapes[0])) if d not in params["dimensions"]]
        return [kept[axis]]
    if op == "reshape":  # an axis kept whole, with as many elements before it: its rows map one to one
        before = math.prod(out_shape[:axis])
        kept = [d for d, size in enumerate(shapes[0])
                if size == out_shape[axis] and math.prod(shapes[0][:d]) == before]
        return kept[:1] if kept else _refuse(op)
    if op == "dot_general":
        return _dot_operand_axes(eqn, axis, (len(shapes[0]), len(shapes[1])))
    return _refuse(op)


def _refuse(op: str) -> list[Axis]:
    raise CannotBlockRows(f"{op} mixes rows")


def row_axes(eqns: list[Eqn], outputs: dict[str, int], avals) -> dict[str, Axis]:
    """Each value the kernel reads or makes, with its row axis, from the results' (`outputs`)."""
    axes: dict[str, Axis] = dict(outputs)
    shape_of = lambda a: avals[a][0] if isinstance(a, str) else ()  # noqa: E731
    for eqn in reversed(eqns):
        outs = [o["name"] for o in eqn["out"]]
        said = {axes[o] for o in outs if o in axes}
        if len(said) > 1 or not said and len(outs) > 1:
            raise CannotBlockRows(f"{eqn['op']}'s results hold their rows apart")
        for operand, axis in zip(eqn["in"], operand_axes(eqn, said.pop() if said else None, shape_of)):
            if isinstance(operand, str) and axes.setdefault(operand, axis) != axis:
                raise CannotBlockRows(f"{operand} is read both row by row and whole")
    return axes


MIN_BLOCK_ROWS = 16  # a GPU's matrix units take blocks of 16 rows and more


def block_rows(rows: int, axes: dict[str, Axis], reads: list[str], outputs: list[str], avals,
               profile: HardwareProfile) -> int:
    """The most rows, a power of two (at least `MIN_BLOCK_ROWS`, or all of them), whose blocks of
    what the kernel reads and writes and of its largest value fit the profile's block memory beside
    what it reads whole; raises CannotBlockRows where no such block fits."""
    capacity = profile.memory.block_bytes or profile.memory.sram_bytes
    size = lambda name: math.prod(avals[name][0]) * parse_dtype(avals[name][1]).itemsize  # noqa: E731
    split = [n for n, a in axes.items() if a is not None]
    whole = sum(size(n) for n in reads if axes[n] is None)
    per_row = (sum(size(n) for n in {*reads, *outputs} if axes[n] is not None) + max(map(size, split))) / rows
    fit = int((capacity - whole) // per_row) if capacity > whole else 0
    if fit >= rows:
        return rows
    if fit < MIN_BLOCK_ROWS:
        raise CannotBlockRows(f"a block of {MIN_BLOCK_ROWS} rows beside what it reads whole ({whole:.3g} B) "
                              f"does not fit {capacity:.3g} B")
    return 2 ** int(math.log2(fit))


def _with_rows(spec: Tensor, axis: Axis, rows: int) -> Tensor:
    shape = list(spec["shape"])
    if axis is not None:
        shape[axis] = rows
    return {**spec, "shape": shape}


def _block_eqn(eqn: Eqn, axes: dict[str, Axis], rows: int) -> Eqn:
    """`eqn` on one block of `rows` rows: its results' types and its shape params say so."""
    block = copy.deepcopy(eqn)
    axis = axes[eqn["out"][0]["name"]]
    block["out"] = [_with_rows(o, axes[o["name"]], rows) for o in eqn["out"]]
    params = block.get("params") or {}
    if axis is not None and eqn["op"] in ("broadcast_in_dim", "iota"):
        params["shape"] = block["out"][0]["shape"]
    if axis is not None and eqn["op"] == "reshape":
        params["new_sizes"] = block["out"][0]["shape"]
    return block


def blocked_equation(eqns: list[Eqn], outputs: list[Tensor], avals, profile: HardwareProfile) -> Eqn:
    """One `row_blocked` equation computing `outputs` from what `eqns` read, its rows the first
    axis of the results (alike in all of them, over one row) whose rows are made one by one;
    raises CannotBlockRows."""
    ranks = {len(o["shape"]) for o in outputs}
    candidates = [d for d in range(min(ranks)) if len({o["shape"][d] for o in outputs}) == 1
                  and outputs[0]["shape"][d] > 1] if len(ranks) == 1 else []
    if not candidates:
        raise CannotBlockRows("its results share no axis of more than one row")
    made = {o["name"] for e in eqns for o in e["out"]}
    reads = list(dict.fromkeys(a for e in eqns for a in e["in"] if isinstance(a, str) and a not in made))
    for tried, axis in enumerate(candidates):
        try:
            axes = row_axes(eqns, {o["name"]: axis for o in outputs}, avals)
            bm = block_rows(outputs[0]["shape"][axis], axes, reads, [o["name"] for o in outputs], avals, profile)
            break
        except CannotBlockRows:
            if tried == len(candidates) - 1:
                raise
    body = {"format": "optu.jaxpr/v1", "consts": [],
            "inputs": [_with_rows({"name": n, "shape": list(avals[n][0]), "dtype": avals[n][1]}, axes[n], bm)
                       for n in reads],
            "eqns": [_block_eqn(e, axes, bm) for e in eqns], "outputs": [o["name"] for o in outputs]}
    return {"op": "row_blocked", "in": reads, "out": [dict(o) for o in outputs],
            "params": {"body": {"program": body}, "block_rows": bm, "in_axes": [axes[n] for n in reads],
                       "out_axes": [axis] * len(outputs)}}


def realize_rows(program: Program, kernels: list[Kernel], profile: HardwareProfile
                 ) -> tuple[Program, list[Kernel], list[str]]:
    """`program` with each fused kernel (two equations or more, attention's aside) computed by one
    `row_blocked` equation where its values are made row by row, its kernels (copies) renumbered,
    and a note per kernel left as ops and why."""
    eqns, avals = program["eqns"], avals_of(program)
    read_after = _readers(program)
    replaced: dict[int, Eqn] = {}  # at the kernel's last equation
    owned: dict[int, list[int]] = {}  # kernel id -> the equations its row_blocked equation replaces
    notes = []
    for kernel in kernels:
        indices = sorted(set(kernel.eqns))
        if len(indices) < 2 or kernel.kind in ("key_blocked", "host") or any(
                eqns[i]["op"] in ("row_blocked", "flash_attention") for i in indices):
            continue
        inside = set(indices)
        outputs = [o for i in indices for o in eqns[i]["out"] if read_after[o["name"]] - inside]
        try:
            if any(r < indices[-1] for o in outputs for r in read_after[o["name"]] - inside):
                raise CannotBlockRows("its results are read between its equations")
            replaced[indices[-1]] = blocked_equation([eqns[i] for i in indices], outputs, avals, profile)
            owned[kernel.id] = indices
        except CannotBlockRows as reason:
            notes.append(f"kernel {kernel.id} ({kernel.kind}) runs as JAX ops, not one Pallas kernel: {reason}")
    if not replaced:
        return program, kernels, notes
    notes.insert(0, f"{len(replaced)} fused kernel(s) returned as one Pallas kernel over blocks of rows each "
                    "(row_blocked)")
    dropped = {i for indices in owned.values() for i in indices} - set(replaced)
    kept = [i for i in range(len(eqns)) if i not in dropped]
    position = {old: new for new, old in enumerate(kept)}
    spliced = [replaced.get(i, eqns[i]) for i in kept]
    renumbered = []
    for kernel in kernels:
        if kernel.id in owned:
            row_eqn = replaced[owned[kernel.id][-1]]
            params = row_eqn["params"]
            rows, bm = row_eqn["out"][0]["shape"][params["out_axes"][0]], params["block_rows"]
            blocks = -(-rows // bm)
            whole = sum(math.prod(avals[n][0]) * parse_dtype(avals[n][1]).itemsize
                        for n, a in zip(row_eqn["in"], row_eqn["params"]["in_axes"]) if a is None)
            renumbered.append(replace(kernel, eqns=[position[owned[kernel.id][-1]]], ops=["row_blocked"],
                                      tiling=kernel.tiling | {"block_rows": bm, "row_blocks": blocks},
                                      estimate=_reading_more(kernel.estimate, (blocks - 1) * whole, profile)))
        else:
            new_eqns = sorted(position[i] for i in set(kernel.eqns) if i in position and i not in replaced)
            renumbered.append(replace(kernel, eqns=new_eqns, ops=[spliced[n]["op"] for n in new_eqns]))
    return {**program, "eqns": spliced}, renumbered, notes


def _reading_more(estimate: Estimate, extra_bytes: float, profile: HardwareProfile) -> Estimate:
    """A kernel's estimate with `extra_bytes` more HBM traffic: each block after the first reads
    again what the kernel reads whole (a cache may serve it; the estimate does not count on one)."""
    if not extra_bytes:
        return estimate
    launch = launch_time(profile)
    hbm = estimate.hbm_bytes + extra_bytes
    memory_s = memory_time(profile, hbm)
    return replace(estimate, time_s=max(estimate.time_s - launch, memory_s) + launch, hbm_bytes=hbm,
                   energy_j=estimate.energy_j + extra_bytes * profile.memory.hbm_energy_per_byte_j,
                   bound="memory" if memory_s + launch > estimate.time_s else estimate.bound)


def _readers(program: Program) -> dict[str, set[float]]:
    """Each value's readers: equation indices, and infinity for a program output."""
    readers: dict[str, set[float]] = {}
    for index, eqn in enumerate(program["eqns"]):
        for o in eqn["out"]:
            readers.setdefault(o["name"], set())
        for a in eqn["in"]:
            if isinstance(a, str):
                readers.setdefault(a, set()).add(index)
    for o in program["outputs"]:
        if isinstance(o, str):
            readers.setdefault(o, set()).add(np.inf)
    return readers
