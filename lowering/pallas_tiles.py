"""A fused kernel of a returned program as one `tiled` equation (wire/tiled.py, a Pallas kernel
over tiles of its results), where every value it computes is made a slice at a time along one or
two axes of its results: a GEMM's rows (and, with an elementwise epilogue, its columns),
elementwise work, a row's reduction, views that keep the slices apart.

For each axis of the results, each value's axis is found from the results back, through each
equation's dimension map (`row_axes`); an operand no slice of a result depends on (a weight's rows,
a bias) is read whole along it. The first two axes that work are the grid's (a kernel that sums
over its rows is tiled along its columns). The tile is the largest, powers of two and at least 16
per axis (or the whole axis), whose blocks of what the kernel reads and writes and of its largest
value fit the profile's on-chip block memory (`memory.block_bytes`, else `sram_bytes`). A kernel
that mixes along every axis (a sum over everything, positions from an iota along each, a slice),
or whose operands leave no room for a tile, stays JAX ops, and a note says why.
"""
from __future__ import annotations

import copy
import math
from dataclasses import replace

from costmodel.formulas import Estimate, kernel_estimate, launch_time
from costmodel.op_cost import nbytes
from costmodel.profile import HardwareProfile
from lowering.as_run import compiled_by_xla, kernels_as_run
from lowering.kernels import Kernel, avals_of
from lowering.runnable import kernel_subprogram
from lowering.splice import splice
from wire.json_types import Eqn, Program, Tensor
from wire.primitives import PRIMITIVES, deterministic

Axis = int | None  # the axis holding a value's slices ("rows") along one grid axis; None: read whole


class CannotTile(Exception):
    """Why a kernel's values are not made apart along an axis, or do not fit a tile."""


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
    result's; raises CannotTile where a result's row reads more than its operands' row."""
    op, ins, params = eqn["op"], eqn["in"], eqn.get("params") or {}
    shapes = [shape_of(a) for a in ins]
    if axis is None:  # the same for every row: computed whole in each block, as it is
        if not deterministic(eqn):
            raise CannotTile(f"{op} may differ each time it runs")
        return [None] * len(ins)
    out_shape = tuple(eqn["out"][0]["shape"])
    role = PRIMITIVES[op].role if op in PRIMITIVES else None
    if op == "iota" and params["dimension"] == axis:
        raise CannotTile("an iota numbers its rows (a block would number its own)")
    if role == "elementwise" or op == "concatenate" and params["dimension"] != axis:
        if any(len(s) not in (0, len(out_shape)) for s in shapes):
            return _refuse(op)
        # a scalar, or an operand of one row broadcast over them all (a bias), is read whole
        return [axis if s and s[axis] == out_shape[axis] else None for s in shapes]
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
    raise CannotTile(f"{op} mixes rows")


def row_axes(eqns: list[Eqn], outputs: dict[str, int], avals) -> dict[str, Axis]:
    """Each value the kernel reads or makes, with its row axis, from the results' (`outputs`)."""
    axes: dict[str, Axis] = dict(outputs)
    shape_of = lambda a: avals[a][0] if isinstance(a, str) else ()  # noqa: E731
    for eqn in reversed(eqns):
        outs = [o["name"] for o in eqn["out"]]
        said = {axes[o] for o in outs if o in axes}
        if len(said) > 1 or not said and len(outs) > 1:
            raise CannotTile(f"{eqn['op']}'s results hold their rows apart")
        for operand, axis in zip(eqn["in"], operand_axes(eqn, said.pop() if said else None, shape_of)):
            if isinstance(operand, str) and axes.setdefault(operand, axis) != axis:
                raise CannotTile(f"{operand} is read both row by row and whole")
    return axes


MIN_TILE = 16  # a GPU's matrix units take blocks of 16 rows and columns and more


def _choices(size: int) -> list[int]:
    """Tile sizes along an axis of `size`: powers of two (a GPU kernel's blocks are), from
    `MIN_TILE` (or the first that holds the axis) to the first that holds the axis."""
    top = 1 << (size - 1).bit_length()
    return [1 << k for k in range(min(MIN_TILE, top).bit_length() - 1, top.bit_length())]


def choose_tile(sizes: list[int], axes: dict[str, tuple[Axis, ...]], reads: list[str], outputs: list[str],
                avals, profile: HardwareProfile) -> list[int]:
    """The tile, of those whose blocks of what the kernel reads and writes and of its largest value
    fit the profile's block memory, with the fewest tiles, then the least padding; raises CannotTile."""
    capacity = profile.memory.block_bytes or profile.memory.sram_bytes

    def block(name: str, tile: tuple[int, ...]) -> float:
        share = math.prod(t / s for t, s, a in zip(tile, sizes, axes[name]) if a is not None)
        return nbytes(avals[name]) * share

    best = None
    for tile in _grid(sizes):
        held = sum(block(n, tile) for n in {*reads, *outputs}) + max(block(n, tile) for n in axes)
        if held <= capacity and (best is None or _fewer(tile, best, sizes)):
            best = tile
    if best is None:
        smallest = [min(_choices(s)) for s in sizes]
        raise CannotTile(f"a tile of {smallest} beside what it reads whole does not fit {capacity:.3g} B")
    return list(best)


def _fewer(tile: tuple[int, ...], best: tuple[int, ...], sizes: list[int]) -> bool:
    """Fewer tiles (each re-reads what is read whole), then less padding, then more rows."""
    def key(t: tuple[int, ...]) -> tuple:
        counts = [-(-s // c) for s, c in zip(sizes, t)]
        return math.prod(counts), math.prod(c * n for c, n in zip(counts, t)), [-c for c in t]
    return key(tile) < key(best)


def _grid(sizes: list[int]) -> list[tuple[int, ...]]:
    tiles: list[tuple[int, ...]] = [()]
    for size in sizes:
        tiles = [(*t, c) for t in tiles for c in _choices(size)]
    return tiles


def _with_tile(spec: Tensor, axes: tuple[Axis, ...], tile: list[int]) -> Tensor:
    shape = list(spec["shape"])
    for a, t in zip(axes, tile):
        if a is not None:
            shape[a] = t
    return {**spec, "shape": shape}


def _tile_eqn(eqn: Eqn, axes: dict[str, tuple[Axis, ...]], tile: list[int]) -> Eqn:
    """`eqn` on one tile: its results' types and its shape params say so."""
    block = copy.deepcopy(eqn)
    block["out"] = [_with_tile(o, axes[o["name"]], tile) for o in eqn["out"]]
    params = block.get("params") or {}
    if any(a is not None for a in axes[eqn["out"][0]["name"]]):
        if eqn["op"] in ("broadcast_in_dim", "iota"):
            params["shape"] = block["out"][0]["shape"]
        if eqn["op"] == "reshape":
            params["new_sizes"] = block["out"][0]["shape"]
    return block


def tiled_equation(eqns: list[Eqn], outputs: list[Tensor], avals, profile: HardwareProfile) -> Eqn:
    """One `tiled` equation computing `outputs` from what `eqns` read, over the first one or two
    axes of the results (alike in all of them, over one element) whose slices are made apart;
    raises CannotTile."""
    ranks = {len(o["shape"]) for o in outputs}
    candidates = [d for d in range(min(ranks)) if len({o["shape"][d] for o in outputs}) == 1
                  and outputs[0]["shape"][d] > 1] if len(ranks) == 1 else []
    if not candidates:
        raise CannotTile("its results share no axis of more than one element")
    grid: list[int] = []
    maps: list[dict[str, Axis]] = []
    reason = None
    for axis in candidates:
        try:
            found = row_axes(eqns, {o["name"]: axis for o in outputs}, avals)
        except CannotTile as why:
            reason = reason or why
            continue
        if all(found[n] is None or all(m[n] != found[n] for m in maps) for n in found):  # no axis split twice
            grid.append(axis)
            maps.append(found)
        if len(grid) == 2:
            break
    if not grid:
        raise reason
    axes = {n: tuple(m[n] for m in maps) for n in maps[0]}
    made = {o["name"] for e in eqns for o in e["out"]}
    reads = list(dict.fromkeys(a for e in eqns for a in e["in"] if isinstance(a, str) and a not in made))
    sizes = [outputs[0]["shape"][a] for a in grid]
    tile = choose_tile(sizes, axes, reads, [o["name"] for o in outputs], avals, profile)
    body = {"format": "optu.jaxpr/v1", "consts": [],
            "inputs": [_with_tile({"name": n, "shape": list(avals[n][0]), "dtype": avals[n][1]}, axes[n], tile)
                       for n in reads],
            "eqns": [_tile_eqn(e, axes, tile) for e in eqns], "outputs": [o["name"] for o in outputs]}
    return {"op": "tiled", "in": reads, "out": [dict(o) for o in outputs],
            "params": {"body": {"program": body}, "tile": tile, "in_axes": [list(axes[n]) for n in reads],
                       "out_axes": [list(grid)] * len(outputs)}}


def realize_tiles(program: Program, kernels: list[Kernel], profile: HardwareProfile
                  ) -> tuple[Program, list[Kernel], list[str]]:
    """`program` with each fused kernel (two equations or more, attention's aside) computed by one
    `tiled` equation where its values are made apart along an axis, its kernels (copies)
    renumbered, and a note per kernel left as ops and why."""
    eqns, avals = program["eqns"], avals_of(program)
    read_after = _readers(program)
    replaced: dict[int, list[Eqn]] = {}  # at the kernel's last equation, its tiled equation
    owner: dict[int, Kernel] = {}
    dropped: set[int] = set()  # the kernel's other equations
    pricing: dict[int, dict] = {}  # kernel id -> its tiling and estimate as its tiles run
    notes = []
    for kernel in kernels:
        indices = sorted(set(kernel.eqns))
        if len(indices) < 2 or kernel.kind in ("key_blocked", "host") or any(
                eqns[i]["op"] in ("tiled", "flash_attention") for i in indices):
            continue
        inside = set(indices)
        outputs = [o for i in indices for o in eqns[i]["out"] if read_after[o["name"]] - inside]
        try:
            if any(r < indices[-1] for o in outputs for r in read_after[o["name"]] - inside):
                raise CannotTile("its results are read between its equations")
            eqn = tiled_equation([eqns[i] for i in indices], outputs, avals, profile)
            priced = _priced_tiles(kernel, eqn, avals, profile)
            as_ops = _as_ops_s(program, kernel, eqn["in"], outputs, profile) if compiled_by_xla(profile) \
                else kernel.estimate.time_s
            if priced["estimate"].time_s > as_ops:
                raise CannotTile(f"its tiles re-read what they read whole: {priced['estimate'].time_s * 1e6:.3g} us "
                                 f"against {as_ops * 1e6:.3g} us as JAX ops")
            replaced[indices[-1]], owner[indices[-1]], pricing[kernel.id] = [eqn], kernel, priced
            dropped.update(indices[:-1])
        except CannotTile as reason:
            notes.append(f"kernel {kernel.id} ({kernel.kind}) runs as JAX ops, not one Pallas kernel: {reason}")
    if not replaced:
        return program, kernels, notes
    notes.insert(0, f"{len(replaced)} fused kernel(s) returned as one Pallas kernel over tiles each (tiled)")
    spliced, renumbered = splice(program, kernels, replaced, owner, dropped)
    return spliced, [replace(k, **pricing[k.id]) if k.id in pricing else k for k in renumbered], notes


def _as_ops_s(program: Program, kernel: Kernel, reads: list[str], outputs: list[Tensor],
              profile: HardwareProfile) -> float:
    """The time of the kernel's equations left as JAX ops, as XLA groups them (no call's dispatch)."""
    alone = kernel_subprogram(program, replace(kernel, inputs=reads, outputs=[o["name"] for o in outputs]))
    return sum(k.estimate.time_s for k in kernels_as_run(alone, profile).kernels)


def _priced_tiles(kernel: Kernel, eqn: Eqn, avals, profile: HardwareProfile) -> dict:
    """The kernel's tiling and estimate as the tiles run: each operand is read once per tile of the
    grid axes it is not split along (a cache may serve the repeats; the estimate does not count on one)."""
    params = eqn["params"]
    sizes = [eqn["out"][0]["shape"][a] for a in params["out_axes"][0]]
    counts = [-(-s // t) for s, t in zip(sizes, params["tile"])]
    again = sum(nbytes(avals[n]) * (math.prod(c for c, a in zip(counts, axes) if a is None) - 1)
                for n, axes in zip(eqn["in"], params["in_axes"]))
    tiling = {"tile_rows": params["tile"][0], "tiles": math.prod(counts)}
    if len(counts) > 1:
        tiling["tile_cols"] = params["tile"][1]
    return {"tiling": kernel.tiling | tiling, "estimate": _reading_more(kernel, again, profile)}


def _reading_more(kernel: Kernel, extra_bytes: float, profile: HardwareProfile) -> Estimate:
    """The kernel's estimate with `extra_bytes` more HBM traffic: each block after the first reads
    again what the kernel reads whole (a cache may serve it; the estimate does not count on one).
    Priced as any kernel is: what kept it busy before its launch (its compute, or its traffic if
    longer) overlapping the larger traffic."""
    estimate, inputs, outputs = kernel.estimate, len(kernel.inputs), len(kernel.outputs)
    if not extra_bytes:
        return estimate
    busy = max(0.0, estimate.time_s - launch_time(profile, inputs, outputs))
    compute_energy = max(0.0, estimate.energy_j - estimate.hbm_bytes * profile.memory.hbm_energy_per_byte_j)
    return kernel_estimate(profile, busy, compute_energy, estimate.flops, estimate.hbm_bytes + extra_bytes,
                           estimate.bound, inputs, outputs)


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
            readers.setdefault(o, set()).add(math.inf)
    return readers
