"""`optu calibrate`: measure this machine with JAX on the CPU and write the `cpu-host` profile.

Every rate is the median of repeated `jax.jit` calls after a warm-up, so compilation and first-call
costs never count; the profile maps the CPU onto the OPTU schema as described in its comments.
"""
from __future__ import annotations

import datetime
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from costmodel.profile import PROFILES_DIR, _load_named, load_profile

# The CPU is modelled as one "core" whose stationary tile is TILE x TILE: a matmul smaller than a
# tile costs a whole tile, like a cache-blocked CPU GEMM whose micro-kernel pads small operands.
TILE = 16
MATMUL_SIZES = (64, 128, 256, 384, 512)  # square fp32; large enough that flops dominate the call
CACHE_ELEMENTS = 1 << 15  # 128 KiB of fp32 per array: resident in L2 on any x86 of the last decade
DRAM_ELEMENTS = 1 << 23  # 32 MiB of fp32 per array: larger than most last-level caches
CHAIN = 16  # fused ops per element, so arithmetic rather than load/store dominates
# Ops whose per-element cost is measured, each as a bounded chain (values stay finite and in the
# normal range, where timings are representative); `extra` counts the helper ops in each step.
TRANSCENDENTALS: dict[str, tuple[Callable[[Any], Any], int]] = {
    "div": (lambda x: 1.5 / x, 0),
    "sqrt": (lambda x: jnp.sqrt(x), 0),
    "rsqrt": (lambda x: lax.rsqrt(x), 0),
    "exp": (lambda x: jnp.exp(-x), 1),
    "log": (lambda x: jnp.log(x + 2.0), 1),
    "tanh": (lambda x: jnp.tanh(x), 0),
    "logistic": (lambda x: jax.nn.sigmoid(x), 0),
    "erf": (lambda x: lax.erf(x), 0),
    "pow": (lambda x: lax.pow(x, jnp.float32(1.3)), 0),
}


def median_call_time(fn: Callable, args: tuple, budget_s: float, max_repeats: int = 200) -> float:
    """Median seconds of one jitted call of `fn(*args)` after two warm-up calls."""
    jitted = jax.jit(fn)
    args = tuple(jax.device_put(a) for a in args)
    for _ in range(2):
        jax.block_until_ready(jitted(*args))
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < 3 or (len(samples) < max_repeats and time.perf_counter() < deadline):
        start = time.perf_counter()
        jax.block_until_ready(jitted(*args))
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _net(t: float, overhead_s: float) -> float:
    """Call time less the per-call overhead the kernel model charges separately; never below a
    tenth of the call, so timing noise cannot make a rate infinite."""
    return max(t - overhead_s, 0.1 * t)


def _uniform(n: int, low: float = 0.5, high: float = 1.5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, n).astype(np.float32)


def _chain(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def run(x):
        for _ in range(CHAIN):
            x = step(x)
        return x
    return run


def measure_matmul(budget_s: float) -> dict[str, Any]:
    """Fit t = t0 + flops / rate over square matmuls; the slope is the marginal rate."""
    rng = np.random.default_rng(0)
    times = []
    for n in MATMUL_SIZES:
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        times.append(median_call_time(jnp.matmul, (a, b), budget_s / len(MATMUL_SIZES)))
    flops = np.array([2.0 * n**3 for n in MATMUL_SIZES])
    slope, intercept = np.polyfit(flops, np.array(times), 1)
    largest = flops[-1] / times[-1]
    # A noisy fit (shared machine) can give a non-positive slope; the largest size is then the
    # best single estimate of the sustained rate.
    rate = 1.0 / slope if slope > 0 else largest
    return {"flops_per_s": float(rate), "intercept_s": float(intercept), "largest_flops_per_s": float(largest),
            "sizes": list(MATMUL_SIZES), "times_s": times}


def measure_vector(budget_s: float, overhead_s: float) -> dict[str, Any]:
    """Fused multiply-add chain (compute rate), cached add (SRAM bandwidth), per-op weights."""
    x, y = _uniform(CACHE_ELEMENTS), _uniform(CACHE_ELEMENTS, seed=1)
    share = budget_s / (2 + len(TRANSCENDENTALS))
    fma_s = _net(median_call_time(_chain(lambda v: v * 0.999 + 0.001), (x,), share), overhead_s)
    flops_per_s = 2.0 * CHAIN * CACHE_ELEMENTS / fma_s
    add_s = _net(median_call_time(jnp.add, (x, y), share), overhead_s)
    sram_bw = 3 * 4 * CACHE_ELEMENTS / add_s  # two fp32 reads and one write per element
    weights = {}
    for op, (step, extra) in TRANSCENDENTALS.items():
        t = _net(median_call_time(_chain(step), (x,), share), overhead_s)
        # flops per element in the profile's unit (one step of the FMA chain's add or multiply)
        weights[op] = max(1.0, t * flops_per_s / (CHAIN * CACHE_ELEMENTS) - extra)
    return {"flops_per_s": flops_per_s, "sram_bw_bytes_per_s": sram_bw, "op_weights": weights}


def measure_memory(budget_s: float, overhead_s: float) -> dict[str, Any]:
    x, y = _uniform(DRAM_ELEMENTS), _uniform(DRAM_ELEMENTS, seed=1)
    t = _net(median_call_time(jnp.add, (x, y), budget_s, max_repeats=50), overhead_s)
    return {"hbm_bw_bytes_per_s": 3 * 4 * DRAM_ELEMENTS / t}


def measure_overhead(budget_s: float) -> dict[str, Any]:
    return {"launch_overhead_s": median_call_time(lambda v: v + 1.0, (np.float32(1.0),), budget_s,
                                                  max_repeats=2000)}


def last_level_cache_bytes() -> int | None:
    """Largest data/unified cache of CPU 0 from Linux sysfs; None where sysfs does not say."""
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            best = max(best or 0, int(digits) * scale)
    return best


def calibrate(seconds_budget: float = 20) -> dict[str, Any]:
    """Measure this machine; the budget is shared by the measurements (compile time excluded)."""
    overhead = measure_overhead(0.1 * seconds_budget)
    return {
        "date": datetime.date.today().isoformat(),
        "jax": jax.__version__,
        "cpus": os.cpu_count(),
        "matmul": measure_matmul(0.4 * seconds_budget),
        "vector": measure_vector(0.35 * seconds_budget, overhead["launch_overhead_s"]),
        "memory": measure_memory(0.15 * seconds_budget, overhead["launch_overhead_s"]),
        "overhead": overhead,
        "llc_bytes": last_level_cache_bytes(),
    }


def _num(value: float) -> str:
    return f"{value:.4g}"  # TOML reads 1e+10 and 1024 alike; the schema accepts ints for floats


def write_cpu_host_profile(measured: dict[str, Any], path: str | Path = PROFILES_DIR / "cpu-host.toml") -> Path:
    """Write a `cpu-host` profile from `calibrate()`'s result and check that it loads."""
    m, v = measured["matmul"], measured["vector"]
    by = f"measured by optu calibrate on {measured['date']}"
    unmeasured = f"not measurable from user space; assumption kept by optu calibrate on {measured['date']}"
    clock = m["flops_per_s"] / (2 * TILE * TILE)
    llc = measured["llc_bytes"]
    sram_note = f"{by}: largest data cache of cpu0 in /sys/devices/system/cpu/cpu0/cache" if llc else \
        f"{unmeasured}: 8 MB last-level cache (sysfs did not report one)"
    sizes = "/".join(str(n) for n in m["sizes"])
    lines = [
        f"# cpu-host: this machine's CPU ({measured['cpus']} CPUs, jax {measured['jax']}) in the OPTU schema,",
        "# written by `optu calibrate`.",
        "# Mapping: the CPU is ONE gemm \"core\" with a 16 x 16 stationary tile, no weight-load time,",
        "# and a clock chosen so 2 * rows * cols * clock_hz equals the measured fp32 matmul rate; so a",
        "# large GEMM costs flops / rate and one smaller than a tile costs a whole tile. Converter and",
        "# laser fields have no CPU meaning: bits are operand widths, the laser term is core power.",
        f"# Not representable in this schema: the matmul fit's intercept ({m['intercept_s']:.3g} s per call,",
        f"# against {measured['overhead']['launch_overhead_s']:.3g} s for a scalar call) is a fixed per-GEMM cost",
        "# of XLA:CPU's matmul; it is left out, so small GEMM kernels are underestimated.",
        'name = "cpu-host"',
        (f'description = "This host measured by optu calibrate on {measured["date"]}: '
         f'{m["flops_per_s"] / 1e9:.1f} GFLOP/s matmul, {measured["memory"]["hbm_bw_bytes_per_s"] / 1e9:.1f} GB/s DRAM"'),
        "",
        "[gemm]",
        f"rows = {TILE}  # assumption: 16-wide register/cache block of N (see the mapping above)",
        f"cols = {TILE}  # assumption: 16-deep block of K (see the mapping above)",
        "cores = 1  # the whole CPU is one core: the measured rate already includes all threads XLA uses",
        (f"clock_hz = {_num(clock)}  # {by}: fitted matmul rate {m['flops_per_s']:.4g} flop/s "
         f"(sizes {sizes}, slope of t vs flops) / (2 * 16 * 16)"),
        "weight_load_s = 0.0  # a CPU streams both operands from cache; no separate weight programming",
        "weight_load_overlap = 0.0  # nothing to overlap when weight_load_s is 0",
        "dac_bits = 32  # fp32 operand width (no converters on a CPU)",
        "adc_bits = 32  # fp32 accumulator width (no converters on a CPU)",
        f"dac_energy_j = 5.0e-12  # {unmeasured}: an L1 operand load on a server core",
        f"adc_energy_j = 5.0e-12  # {unmeasured}: one accumulate + store, same scale as a load",
        "weight_cell_energy_j = 0.0  # no weight programming on a CPU (weight_load_s is 0)",
        f"laser_power_w = 15.0  # {unmeasured}: ~15 W of busy core power stands in for the laser term",
        "",
        "[vector]",
        (f"flops_per_s = {_num(v['flops_per_s'])}  # {by}: fused chain of {CHAIN} multiply-adds over "
         f"{CACHE_ELEMENTS} cached fp32 elements"),
        f"energy_per_flop_j = 1.0e-11  # {unmeasured}: ~10 pJ per scalar-equivalent flop",
        "",
        "[memory]",
        f"sram_bytes = {llc or 8_000_000}  # {sram_note}",
        (f"sram_bw_bytes_per_s = {_num(v['sram_bw_bytes_per_s'])}  # {by}: fp32 add of two cached "
         f"{CACHE_ELEMENTS}-element arrays, 12 bytes per element"),
        f"sram_energy_per_byte_j = 2.0e-12  # {unmeasured}: Horowitz 45 nm ~1.25 pJ/byte plus cache wiring",
        (f"hbm_bw_bytes_per_s = {_num(measured['memory']['hbm_bw_bytes_per_s'])}  # {by}: fp32 add of two "
         f"{DRAM_ELEMENTS}-element (32 MiB) arrays, 12 bytes per element; DRAM plays HBM"),
        f"hbm_energy_per_byte_j = 1.5e-10  # {unmeasured}: ~20 pJ/bit for DDR including I/O",
        "",
        "[kernel]",
        (f"launch_overhead_s = {_num(measured['overhead']['launch_overhead_s'])}  # {by}: median jitted "
         "call of a scalar add (dispatch + block_until_ready)"),
        "",
        "# Flops per element in units of one multiply-add-chain op (so add/mul are 1 by definition).",
        "[vector.op_weights]",
    ]
    ones = ("add", "sub", "mul", "max", "min", "neg", "select", "compare", "reduce")
    lines += [f"{op} = 1  # the unit: one op of the measured multiply-add chain" for op in ones]
    lines += [f"{op} = {_num(w)}  # {by}: chain of {CHAIN} {op} per element, time x flops_per_s per element"
              for op, w in v["op_weights"].items()]
    lines.append("default = 1  # unlisted ops cost like one op of the multiply-add chain (assumption)")
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    load_profile(str(path))  # raises ProfileError rather than leave behind a profile that does not load
    _load_named.cache_clear()  # the shipped file may just have changed under the name cache
    return path
