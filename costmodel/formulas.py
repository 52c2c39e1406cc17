"""Closed-form cost formulas of the OPTU model: pure functions, no tracing.

Times are seconds, energies joules, sizes bytes. Every function takes a `HardwareProfile` and plain
numbers, so extraction, lowering and the lower-bound computation all price work identically.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TypedDict

from costmodel.measured_gemm import measured_gemm_s
from costmodel.profile import HardwareProfile
from wire.format import parse_dtype

BOUNDS = ("weight_load", "optical", "vector", "memory", "launch")


class Cost(TypedDict):
    """An `Estimate` as the wire reports it (a kernel's, a program's)."""

    time_s: float
    energy_j: float
    hbm_bytes: float
    flops: float
    bound: str


@dataclass(frozen=True)
class Estimate:
    """Cost of a kernel or a whole program, as reported on the wire."""

    time_s: float
    energy_j: float
    hbm_bytes: float
    flops: float
    bound: str

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {BOUNDS}, got {self.bound!r}")

    def to_dict(self) -> Cost:
        return Cost(**asdict(self))


@dataclass(frozen=True)
class GemmCost:
    """Cost of a weight-stationary GEMM on the optical cores, with its tiling for reports."""

    tiles: int  # weight tiles per batch element: k_splits * ceil(n / R)
    k_splits: int  # ceil(k / C): partial sums that each need their own ADC pass
    weight_loads: int  # tiles programmed in total: batch * tiles
    passes: int  # optical clock cycles summed over cores: weight_loads * rows streamed per load
    time_s: float
    energy_j: float
    flops: float
    bound: str  # "weight_load" or "optical"

    def tiling(self) -> dict[str, int]:
        return {
            "tiles": self.tiles,
            "k_splits": self.k_splits,
            "weight_loads": self.weight_loads,
            "passes": self.passes,
        }


def _check_dims(**dims: int) -> None:
    for name, value in dims.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def gemm_cost(p: HardwareProfile, m: int, k: int, n: int, batch: int = 1, rate: float = 1.0) -> GemmCost:
    """(m x k) @ (k x n), `batch` times, with the (k x n) operand held as the stationary weight;
    `rate`: the operands' throughput relative to the clock's (`GemmUnit.rate`). Timed from the
    profile's measured shapes where it has them (the tiling is still reported), else by its tiles."""
    tiled = tiled_gemm_cost(p, m, k, n, batch, rate)
    if not p.gemm.shape_times_s or not tiled.weight_loads:
        return tiled
    time_s = batch * measured_gemm_s(p.gemm.shape_times_s, m, k, n) / rate
    return replace(tiled, time_s=time_s, energy_j=tiled.energy_j + p.gemm.laser_power_w * (time_s - tiled.time_s),
                   bound="optical")


def tiled_gemm_cost(p: HardwareProfile, m: int, k: int, n: int, batch: int = 1, rate: float = 1.0) -> GemmCost:
    """`gemm_cost` by the weight-stationary tile model alone: tiles programmed, rows streamed."""
    _check_dims(m=m, k=k, n=n, batch=batch)
    g = p.gemm
    k_splits = math.ceil(k / g.cols)
    n_blocks = math.ceil(n / g.rows)
    tiles = k_splits * n_blocks
    if m == 0 or tiles == 0 or batch == 0:  # empty operand: nothing is loaded or streamed
        return GemmCost(tiles, k_splits, 0, 0, 0.0, 0.0, 0.0, "optical")
    weight_loads = batch * tiles
    load_part = g.weight_load_s * (1.0 - g.weight_load_overlap) / rate
    stream_part = max(m, 1) / (g.clock_hz * rate)  # a pass over the rows takes at least one clock
    time_s = weight_loads * (load_part + stream_part) / g.cores + g.call_overhead_s
    energy_j = (
        weight_loads * g.rows * g.cols * g.weight_cell_energy_j
        + batch * m * k * n_blocks * g.dac_energy_j  # each input row is encoded once per N block
        + batch * m * n * k_splits * g.adc_energy_j  # each K split reads out its own partial sum
        + g.laser_power_w * time_s
    )
    return GemmCost(
        tiles=tiles,
        k_splits=k_splits,
        weight_loads=weight_loads,
        passes=weight_loads * max(m, 1),
        time_s=time_s,
        energy_j=energy_j,
        flops=2.0 * m * k * n * batch,
        bound="weight_load" if load_part > stream_part else "optical",
    )


def conv_cost(p: HardwareProfile, m: int, k: int, n: int, groups: int = 1, rate: float = 1.0) -> GemmCost:
    """A convolution as an implicit GEMM: m output positions, k = window x in-features and n
    out-features per group. Either operand may be the stationary one. Where the profile has a
    gather rate, gathering the m positions' patches (im2col) bounds the time, which is what limits
    a convolution with few features; a fixed conv setup replaces the GEMM call cost. Always by the
    tile model: measured shapes are of matmuls, which a convolution is not."""
    g = min(tiled_gemm_cost(p, m, k, n, groups, rate), tiled_gemm_cost(p, n, k, m, groups, rate),
            key=lambda c: c.time_s)
    if not g.weight_loads:
        return g
    gather_rate = p.gemm.conv_positions_per_s
    gather_s = m / gather_rate if gather_rate else 0.0
    time_s = max(g.time_s - p.gemm.call_overhead_s, gather_s) + p.gemm.conv_overhead_s
    return replace(g, time_s=time_s, energy_j=g.energy_j + p.gemm.laser_power_w * (time_s - g.time_s))


def loop_cost(p: HardwareProfile, body_time_s: float, trips: int) -> float:
    """Seconds of a loop whose body takes `body_time_s`, run `trips` times (scan, while)."""
    if trips < 0 or body_time_s < 0:
        raise ValueError(f"trips and body time must be >= 0, got {trips}, {body_time_s}")
    return trips * (body_time_s + p.kernel.loop_iteration_s)


def memory_time(p: HardwareProfile, nbytes: float) -> float:
    """Seconds to move `nbytes` across a kernel boundary: the part that fits in the profile's
    cache (if it has one) at cache bandwidth, the rest at HBM bandwidth."""
    mem = p.memory
    cached = min(nbytes, mem.cache_bytes) if mem.cache_bw_bytes_per_s else 0.0
    time_s = (nbytes - cached) / mem.hbm_bw_bytes_per_s
    return time_s + cached / mem.cache_bw_bytes_per_s if cached else time_s


def vector_cost(
    p: HardwareProfile, op_counts: dict[str, float], sram_bytes: float
) -> tuple[float, float, float]:
    """(time_s, energy_j, flops) of elementwise/reduction work: `op_counts` maps op -> elements."""
    if sram_bytes < 0:
        raise ValueError(f"sram_bytes must be >= 0, got {sram_bytes}")
    v, mem = p.vector, p.memory
    flops = 0.0
    for op, count in op_counts.items():
        if count < 0:
            raise ValueError(f"element count for {op!r} must be >= 0, got {count}")
        flops += count * v.weight(op)
    time_s = max(flops / v.flops_per_s, sram_bytes / mem.sram_bw_bytes_per_s)
    energy_j = flops * v.energy_per_flop_j + sram_bytes * mem.sram_energy_per_byte_j
    return time_s, energy_j, flops


def kernel_estimate(
    p: HardwareProfile,
    compute_time_s: float,
    compute_energy_j: float,
    flops: float,
    hbm_bytes: float,
    compute_bound: str,
    inputs: int = 1,
    outputs: int = 1,
) -> Estimate:
    """One kernel: compute overlaps its HBM traffic; the launch overhead is paid on top, and so is
    the set-up of each input and output buffer beyond the first of each (the launch covers those)."""
    if compute_bound not in BOUNDS:
        raise ValueError(f"compute_bound must be one of {BOUNDS}, got {compute_bound!r}")
    if min(compute_time_s, compute_energy_j, flops, hbm_bytes) < 0:
        raise ValueError("kernel times, energies, flops and bytes must be >= 0")
    hbm_time_s = memory_time(p, hbm_bytes)
    launch_s = launch_time(p, inputs, outputs)
    if launch_s > compute_time_s and launch_s > hbm_time_s:
        bound = "launch"
    elif hbm_time_s > compute_time_s:
        bound = "memory"
    else:
        bound = compute_bound
    return Estimate(
        time_s=max(compute_time_s, hbm_time_s) + launch_s,
        energy_j=compute_energy_j + hbm_bytes * p.memory.hbm_energy_per_byte_j,
        hbm_bytes=hbm_bytes,
        flops=flops,
        bound=bound,
    )


def launch_time(p: HardwareProfile, inputs: int = 1, outputs: int = 1) -> float:
    """A kernel's launch, and the set-up of each input and output buffer beyond the first of each."""
    k = p.kernel
    return k.launch_overhead_s + max(0, inputs - 1) * k.input_overhead_s + max(0, outputs - 1) * k.output_overhead_s


def program_estimate(p: HardwareProfile, kernels: list[Estimate]) -> Estimate:
    """One call of a program of `kernels`: they run one after another, after the call's dispatch."""
    dispatch = p.kernel.dispatch_overhead_s or 0.0
    return sum_estimates([*kernels, *([Estimate(dispatch, 0.0, 0.0, 0.0, "launch")] if dispatch else [])])


def sum_estimates(parts: list[Estimate]) -> Estimate:
    """Kernels run one after another: totals add; the bound is that of the slowest part.

    An empty program costs nothing and is reported as launch-bound (there is nothing else to be).
    """
    if not parts:
        return Estimate(0.0, 0.0, 0.0, 0.0, "launch")
    return Estimate(
        time_s=sum(e.time_s for e in parts),
        energy_j=sum(e.energy_j for e in parts),
        hbm_bytes=sum(e.hbm_bytes for e in parts),
        flops=sum(e.flops for e in parts),
        bound=max(parts, key=lambda e: e.time_s).bound,
    )


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a wire dtype string, as the wire format's dtype table has it (sub-byte
    types such as int4 are held one per byte: traffic is overestimated at most 2x, 4x for int2, 8x
    for int1); unknown dtypes are an error, never a guess."""
    return parse_dtype(dtype).itemsize
