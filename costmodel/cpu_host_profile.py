"""The `cpu-host` profile `optu calibrate` writes from its measurements: every number with its
provenance, and nothing written from a machine too loaded to measure."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodel.calibrate import (
    BUFFERS,
    CHAINS,
    CONV_FEATURES,
    CONV_SIZES,
    CONV_TINY,
    DRAM_ELEMENTS,
    GEMM_CHAIN,
    GEMM_GRID,
    GEMM_ROWS,
    GEMM_WIDTH,
    KERNEL_CHAIN,
    L2_ELEMENTS,
    LLC_ELEMENTS,
    LOOP_TRIPS,
    TILE,
    VECTOR_ELEMENTS,
)
from costmodel.profile import PROFILES_DIR, _load_named, load_profile
from costmodel.provenance import render_profile_fields

MIN_SPEEDUP = 1.05  # see the line it writes into the profile

# The least share of the timing's wall time the measuring process must have run for: below it,
# other processes held the cores, this machine is too loaded to measure, and the profile would be
# written from their noise, so the previous one is kept. (The probes' spread over passes cannot tell:
# on a quiet VM it reaches what a loaded one shows.)
MIN_CPU_SHARE = 0.8


class MachineTooLoaded(RuntimeError):
    """Other processes held the cores while the probes were timed: no profile is written from that."""


def write_cpu_host_profile(measured: dict[str, Any], path: str | Path = PROFILES_DIR / "cpu-host.toml",
                           min_cpu_share: float | None = MIN_CPU_SHARE) -> Path:
    """Write a `cpu-host` profile from `calibrate()`'s result, every number with its provenance
    (the measurement that gave it, the mapping that defines it, or the assumption kept), and check
    that it loads; raises MachineTooLoaded, writing nothing, when the measuring process ran for
    less than `min_cpu_share` of the timing's wall time (None: write whatever it is)."""
    if min_cpu_share is not None and measured["cpu_share"] < min_cpu_share:
        raise MachineTooLoaded(f"this machine is too loaded to measure: the measuring process ran for "
                               f"{measured['cpu_share']:.0%} of the timing's wall time (at least "
                               f"{min_cpu_share:.0%} is measurable; other processes held the cores); "
                               f"{path} is kept as it was")
    m, v, mem, conv = measured["matmul"], measured["vector"], measured["memory"], measured["conv"]
    date, llc, (lo, hi) = measured["date"], measured["llc_bytes"], GEMM_ROWS
    by = f"measured by optu calibrate on {date}"
    kept = f"not measurable from user space; kept by optu calibrate on {date}"
    mapping = "by definition of the CPU mapping in this file's header"
    cache = (f"{by}: largest data cache of cpu0 in /sys/devices/system/cpu/cpu0/cache" if llc else None,
             None if llc else "an 8 MB last-level cache (sysfs did not report one)")
    fields: dict[str, dict[str, tuple[Any, str | None, str | None]]] = {  # section -> key -> (value, source, assumed)
        "": {
            "min_speedup": (
                MIN_SPEEDUP,
                None,
                "judgement: kernel estimates stray from measured kernel times "
                "by more than 5% (bench/calibration.py, p10-p90), so a smaller estimated gain may "
                "be a loss",
            )
        },
        "gemm": {
            "rows": (TILE, None, "16-wide register/cache block of N (see the mapping above)"),
            "cols": (TILE, None, "16-deep block of K (see the mapping above)"),
            "cores": (1, f"{mapping}: GEMMs run on one thread (XLA_FLAGS above)", None),
            "clock_hz": (
                m["clock_hz"],
                f"{by}: {(GEMM_WIDTH // TILE) ** 2} tiles / slope of t vs rows of fp32 GEMMs "
                f"of {lo} and {hi} rows by a {GEMM_WIDTH}x{GEMM_WIDTH} operand ({m['flops_per_s']:.4g} "
                "flop/s)",
                None,
            ),
            "weight_load_s": (
                m["tile_load_s"],
                f"{by}: what a {lo}-row GEMM by a {GEMM_WIDTH}x{GEMM_WIDTH} operand "
                "costs beyond streaming its rows, per tile, less one one-tile GEMM of the chain "
                "below: packing each 16x16 tile of the stationary operand",
                None,
            ),
            "weight_load_overlap": (0.0, f"{mapping}: one thread packs a tile, then streams the rows through it", None),
            "dac_bits": (32, f"{mapping}: fp32 operand width (no converters on a CPU)", None),
            "adc_bits": (32, f"{mapping}: fp32 accumulator width (no converters on a CPU)", None),
            "dac_energy_j": (5.0e-12, None, f"{kept}: an L1 operand load on a server core"),
            "adc_energy_j": (5.0e-12, None, f"{kept}: one accumulate + store, same scale as a load"),
            "weight_cell_energy_j": (
                0.0,
                f"{mapping}: packing a tile is a copy within the cache, priced as its operand loads (dac_energy_j)",
                None,
            ),
            "laser_power_w": (15.0, None, f"{kept}: ~15 W of busy core power stands in for the laser term"),
            "call_overhead_s": (
                m["call_overhead_s"],
                f"{by}: slope of t vs chain length of dependent {lo}x16 @ "
                f"16x16 GEMMs in one call ({GEMM_CHAIN[0]} and {GEMM_CHAIN[1]}), less one tile's packing "
                "and pass and its kernels' launches",
                None,
            ),
            "shape_times_s": (
                m["shape_times_s"],
                f"{by}: fp32 (m x k) @ (k x n) products, m in "
                f"{'/'.join(map(str, GEMM_GRID[0]))}, k in {'/'.join(map(str, GEMM_GRID[1]))}, n in "
                f"{'/'.join(map(str, GEMM_GRID[2]))}, each less the per-call overhead",
                None,
            ),
            "conv_overhead_s": (
                conv["overhead_s"],
                f"{by}: a 3x3 convolution of one {CONV_TINY}x{CONV_TINY} "
                "single-feature image, less the per-call overhead",
                None,
            ),
            "conv_positions_per_s": (
                conv["positions_per_s"],
                f"{by}: slope of t vs output positions of 3x3 NHWC "
                f"convolutions of 2 images {CONV_SIZES[0]} and {CONV_SIZES[1]} square, median "
                f"over {'/'.join(map(str, CONV_FEATURES))} features in and out",
                None,
            ),
        },
        "vector": {
            "flops_per_s": (
                v["flops_per_s"],
                f"{by}: slope of t vs length of a multiply-add chain ({CHAINS[0]} and "
                f"{CHAINS[1]} steps) over {VECTOR_ELEMENTS} cached fp32 elements, 2 flops a step",
                None,
            ),
            "energy_per_flop_j": (1.0e-11, None, f"{kept}: ~10 pJ per scalar-equivalent flop"),
        },
        "memory": {
            "sram_bytes": (llc or 8_000_000, *cache),
            "sram_bw_bytes_per_s": (
                v["sram_bw_bytes_per_s"],
                f"{by}: slope of t vs bytes of fp32 adds of "
                f"{L2_ELEMENTS[0]} and {L2_ELEMENTS[1]} elements (12 bytes each), L2-resident",
                None,
            ),
            "sram_energy_per_byte_j": (2.0e-12, None, f"{kept}: Horowitz 45 nm ~1.25 pJ/byte plus cache wiring"),
            "hbm_bw_bytes_per_s": (
                mem["hbm_bw_bytes_per_s"],
                f"{by}: fp32 add of two {DRAM_ELEMENTS}-element (32 MiB) "
                "arrays, 12 bytes per element, less the per-call overhead; DRAM plays HBM",
                None,
            ),
            "hbm_energy_per_byte_j": (1.5e-10, None, f"{kept}: ~20 pJ/bit for DDR including I/O"),
            "cache_bytes": (llc or 8_000_000, *cache),
            "cache_bw_bytes_per_s": (
                mem["cache_bw_bytes_per_s"],
                f"{by}: slope of t vs bytes of fp32 adds of "
                f"{LLC_ELEMENTS[0]} and {LLC_ELEMENTS[1]} elements, past L2 and inside the "
                "last-level cache",
                None,
            ),
        },
        "kernel": {
            "launch_overhead_s": (
                measured["overhead"]["launch_overhead_s"],
                f"{by}: slope of t vs the kernels "
                f"XLA:CPU compiled (its optimized HLO) of chains of {KERNEL_CHAIN[0]} and "
                f"{KERNEL_CHAIN[1]} dependent 16-element row sums in one call",
                None,
            ),
            "dispatch_overhead_s": (
                measured["overhead"]["dispatch_overhead_s"],
                f"{by}: jitted call of a scalar "
                "add (dispatch + block_until_ready), one kernel, less that kernel's launch",
                None,
            ),
            "input_overhead_s": (
                measured["overhead"]["inputs_s"],
                f"{by}: slope of t vs inputs ({BUFFERS[0]} and {BUFFERS[1]}) of a jitted sum of 16-element arrays",
                None,
            ),
            "output_overhead_s": (
                measured["overhead"]["outputs_s"],
                f"{by}: slope of t vs outputs ({BUFFERS[0]} and "
                f"{BUFFERS[1]}) of a jitted call returning 16-element arrays",
                None,
            ),
            "precompute_weights": (
                False,
                f"{mapping}: a plain jax.jit recomputes weight-only work on every call",
                None,
            ),
            "max_gemms": (1, f"{mapping}: a kernel is one library GEMM plus epilogues, as XLA:CPU runs it", None),
            "pallas_compiled": (
                False,
                f"{mapping}: on a CPU a Pallas kernel runs in interpret mode only, not as one compiled kernel",
                None,
            ),
            "fusion": (
                "xla",
                f"{mapping}: jax.jit compiles the returned program with XLA:CPU, which groups it "
                "into kernels its own way",
                None,
            ),
            "gemm_epilogue": (
                False,
                f"{mapping}: XLA:CPU runs each GEMM as a fusion of its own, no elementwise "
                "op in it (its optimized HLO)",
                None,
            ),
            "loop_iteration_s": (
                measured["loop"]["iteration_s"],
                f"{by}: slope of t vs length of a scan "
                f"({LOOP_TRIPS[0]} and {LOOP_TRIPS[1]}) with a 4x32 multiply-add body, less the "
                "body's flops",
                None,
            ),
        },
        "vector.op_weights": {
            **{
                op: (1, f"{mapping}: the unit, one op of the measured multiply-add chain", None)
                for op in ("add", "sub", "mul", "max", "min", "neg", "select", "compare")
            },
            **{
                op: (
                    w,
                    f"{by}: "
                    + (
                        "a 64-wide row sum against a scale of the same array, extra time x flops_per_s per element"
                        if op == "reduce"
                        else f"slope of t vs chain length of {op}, x flops_per_s per element"
                    )
                    + " (at least 1)",
                    None,
                )
                for op, w in v["op_weights"].items()
            },
            "default": (1, None, "unlisted ops cost like one op of the multiply-add chain"),
        },
    }
    lines = [
        f"# cpu-host: this machine's CPU ({measured['cpus']} CPUs, jax {measured['jax']}) in the OPTU schema,",
        "# written by `optu calibrate`. Measured with synchronous dispatch and XLA_FLAGS",
        f"# {measured['xla_flags']} (one thread per GEMM), the settings the calibration benchmark uses.",
        "# Mapping: the CPU is ONE gemm \"core\" with a 16 x 16 stationary tile, packed once per GEMM",
        "# (the weight load), and a clock at which rows stream through a packed tile; so a GEMM of many",
        "# rows costs flops / rate, one of few rows mostly its tiles' packing, and one smaller than a",
        "# tile a whole tile. A matmul is timed from gemm.shape_times_s, products of a grid of shapes",
        "# measured here (the tiles still say how it is tiled); a convolution by the tiles. Converter and",
        "# laser fields have no CPU meaning: bits are operand widths, the laser term is core power.",
        "# Rates are slopes between two sizes of one probe, so the per-call cost cancels out.",
        "# Op weights are flops per element in units of one multiply-add-chain op (add/mul are 1).",
        'name = "cpu-host"',
        (f'description = "This host measured by optu calibrate on {date}: '
         f'{m["flops_per_s"] / 1e9:.1f} GFLOP/s matmul, {mem["hbm_bw_bytes_per_s"] / 1e9:.1f} GB/s DRAM"'),
        *render_profile_fields(fields),
    ]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    load_profile(str(path))  # raises ProfileError rather than leave behind a profile that does not load
    _load_named.cache_clear()  # the shipped file may just have changed under the name cache
    return path
