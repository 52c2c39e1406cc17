"""`optu calibrate`: measure this machine with JAX on the CPU (costmodel/cpu_host_profile.py
writes the `cpu-host` profile from what it measures).

Measurements run in a fresh process under fixed JAX settings (see `apply_measurement_settings`).
Each rate is a slope between two sizes of the same probe, so per-call costs cancel out; each time
is the least, over interleaved passes, of the median of a few consecutive calls.
"""
from __future__ import annotations

import datetime
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


# Single-threaded Eigen: on a small shared host, a GEMM split across XLA's thread pool waits for a
# core that another process may hold (10-40 us of noise per call); one thread is reproducible.
MEASUREMENT_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"
# The CPU is modelled as one "core" whose stationary tile is TILE x TILE: a matmul smaller than a
# tile costs a whole tile, like a cache-blocked CPU GEMM whose micro-kernel pads small operands.
TILE = 16
# fp32 GEMMs of GEMM_ROWS rows by a GEMM_WIDTH-square stationary operand ((GEMM_WIDTH / TILE)^2
# tiles): the slope of time against rows is the rate rows stream through a tile (the clock); what
# the few-row one costs beyond its rows is the packing of each tile, which small GEMMs pay in full.
GEMM_ROWS = (8, 512)
GEMM_WIDTH = 256
# fp32 (m x k) @ (k x n) products over this grid of m, k and n, each timed less a call: what the
# profile prices GEMMs by (costmodel/measured_gemm.py), from one-row products to 4 GFLOP.
GEMM_GRID = ((1, 8, 64, 512, 2048), (16, 64, 256, 1024), (16, 64, 256, 1024))
L2_ELEMENTS = (1 << 14, 1 << 16)  # two fp32 adds whose three arrays stay in a 1 MiB L2
LLC_ELEMENTS = (1 << 18, 1 << 20)  # 3-12 MiB: past L2, inside any server last-level cache
DRAM_ELEMENTS = 1 << 23  # 32 MiB of fp32 per array, 96 MiB per add: past any last-level cache
VECTOR_ELEMENTS = 1 << 15  # 128 KiB of fp32: the chains below run from L1/L2
REDUCE_ELEMENTS = 1 << 17  # 512 KiB of fp32 in 64-wide rows: L2-resident, long enough to resolve
CHAINS = (2, 18)  # chain lengths: the slope between them is the per-op cost, free of load/store
GEMM_CHAIN = (1, 17)  # dependent one-tile GEMMs of GEMM_ROWS[0] rows in one call: the slope is one GEMM's cost
# Dependent row sums of 16 elements in one call, each step a kernel XLA cannot fuse into the next
# (a reduction's result is read by the step after it): the slope of time against the kernels XLA
# compiled (counted in its optimized HLO) is one more kernel's cost inside a call; the rest of a
# one-kernel call is the call's own dispatch.
KERNEL_CHAIN = (1, 65)
LOOP_TRIPS = (8, 520)  # scan lengths with a tiny body: the slope is the cost of one iteration
BUFFERS = (1, 9)  # inputs (or outputs) of a call on 16-element arrays: the slope is one buffer's cost
# Ops whose per-element cost is measured, each as a bounded chain (values stay finite and in the
# normal range, where timings are representative); `extra` counts the helper ops in each step.
TRANSCENDENTALS: dict[str, tuple[Callable[[Any], Any], int]] = {
    "div": (lambda x: 1.5 / (x + 1.0), 1),  # not 1.5 / x: XLA folds 1.5 / (1.5 / x) back to x
    "sqrt": (lambda x: jnp.sqrt(x), 0),
    "rsqrt": (lambda x: lax.rsqrt(x), 0),
    "exp": (lambda x: jnp.exp(-x), 1),
    "log": (lambda x: jnp.log(x + 2.0), 1),
    "tanh": (lambda x: jnp.tanh(x), 0),
    "logistic": (lambda x: jax.nn.sigmoid(x), 0),
    "erf": (lambda x: lax.erf(x), 0),
    "pow": (lambda x: lax.pow(x, jnp.float32(1.3)), 0),
}
FMA_STEP = (lambda x: x * 0.999 + 0.001, 2)  # the unit chain: a multiply and an add per step
# XLA:CPU's small convolutions cost per output position (gathering its patch), nearly whatever their
# features: the slope between two image sizes, median over a few feature counts, is that rate.
CONV_SIZES = (16, 32)  # height = width of a batch of 2 NHWC images, 3x3 window, SAME padding
CONV_FEATURES = (4, 8, 16)  # in = out features
CONV_TINY = 4  # a 4x4 image with one feature: almost pure setup
def apply_measurement_settings() -> None:
    """Synchronous dispatch (a call returns when its kernel is done, no hand-off to a worker
    thread) and single-threaded Eigen. Effective only before JAX creates its CPU client."""
    flags = os.environ.get("XLA_FLAGS", "")
    if MEASUREMENT_XLA_FLAGS not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {MEASUREMENT_XLA_FLAGS}".strip()
    jax.config.update("jax_cpu_enable_async_dispatch", False)


class Probe:
    """One jitted call on fixed arguments, timed as the least median of `group` consecutive calls."""

    def __init__(self, fn: Callable, args: tuple, group: int = 5):
        self.call = jax.jit(fn)
        self.args = tuple(jax.device_put(a) for a in args)
        self.group = group
        self.best = float("inf")
        self.runs: list[float] = []  # best group median of each `run`, to show the spread
        for _ in range(2):  # compile and warm the caches
            jax.block_until_ready(self.call(*self.args))

    def run(self, budget_s: float) -> float:
        """Spend about `budget_s` (at least one group); returns and keeps the best group median."""
        deadline, best = time.perf_counter() + budget_s, float("inf")
        while True:
            samples = []
            for _ in range(self.group):
                start = time.perf_counter()
                jax.block_until_ready(self.call(*self.args))
                samples.append(time.perf_counter() - start)
            best = min(best, statistics.median(samples))
            if time.perf_counter() >= deadline:
                self.runs.append(best)
                self.best = min(self.best, best)
                return self.best


def time_probes(probes: dict[str, Probe], budget_s: float, passes: int = 4, seed: int = 0) -> dict[str, float]:
    """Best time of each probe over `passes` interleaved passes in shuffled order: a slow spell of
    the machine (another process on the core) then hits one pass of every probe, not all of one."""
    order = list(probes)
    rng = random.Random(seed)
    for _ in range(passes):
        rng.shuffle(order)
        for name in order:
            probes[name].run(budget_s / (passes * len(probes)))
    return {name: probe.best for name, probe in probes.items()}


def _uniform(*shape: int, low: float = 0.5, high: float = 1.5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def _chain(step: Callable[[Any], Any], length: int) -> Callable[[Any], Any]:
    def run(x):
        for _ in range(length):
            x = step(x)
        return x
    return run


def _gemm_chain(length: int) -> Callable[[Any, Any], Any]:
    def run(x, w):
        for _ in range(length):
            x = x @ w
        return x
    return run


def _scan(trips: int) -> Callable[[Any], Any]:
    def run(x):
        return lax.scan(lambda c, _: (c * 0.999 + 0.001, None), x, None, length=trips)[0]
    return run


def _conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def build_probes() -> dict[str, Probe]:
    p = {"call": Probe(lambda v: v + 1.0, (np.float32(1.0),))}
    for rows in GEMM_ROWS:
        p[f"gemm_rows{rows}"] = Probe(jnp.matmul, (_uniform(rows, GEMM_WIDTH),
                                                   _uniform(GEMM_WIDTH, GEMM_WIDTH, seed=1)))
    for m, k, n in itertools.product(*GEMM_GRID):
        p[f"gemm{m}x{k}x{n}"] = Probe(jnp.matmul, (_uniform(m, k), _uniform(k, n, seed=1) / k))
    for length in GEMM_CHAIN:  # scaled to stay finite: one tile
        p[f"gemm_chain{length}"] = Probe(_gemm_chain(length),
                                         (_uniform(GEMM_ROWS[0], TILE), _uniform(TILE, TILE) / TILE))
    x = _uniform(VECTOR_ELEMENTS)
    for op, (step, _) in {"fma": FMA_STEP, **TRANSCENDENTALS}.items():
        for length in CHAINS:
            p[f"{op}{length}"] = Probe(_chain(step, length), (x,))
    rows = _uniform(REDUCE_ELEMENTS // 64, 64)
    p["row_sum"], p["row_scale"] = Probe(lambda v: v.sum(-1), (rows,)), Probe(lambda v: v * 1.5, (rows,))
    for n in (*L2_ELEMENTS, *LLC_ELEMENTS, DRAM_ELEMENTS):
        p[f"add{n}"] = Probe(jnp.add, (_uniform(n), _uniform(n, seed=1)), group=3 if n >= DRAM_ELEMENTS else 5)
    for size in CONV_SIZES:
        for f in CONV_FEATURES:
            p[f"conv{size}x{f}"] = Probe(_conv, (_uniform(2, size, size, f), _uniform(3, 3, f, f) / (9 * f)))
    p["conv_tiny"] = Probe(_conv, (_uniform(1, CONV_TINY, CONV_TINY, 1), _uniform(3, 3, 1, 1)))
    for length in KERNEL_CHAIN:
        p[f"kernels{length}"] = Probe(_chain(lambda v: v - v.sum() * 0.01, length), (_uniform(16),))
    for trips in LOOP_TRIPS:
        p[f"scan{trips}"] = Probe(_scan(trips), (_uniform(4, 32),))
    for n in BUFFERS:
        p[f"inputs{n}"] = Probe(lambda *xs: sum(xs), tuple(_uniform(16, seed=i) for i in range(n)))
        p[f"outputs{n}"] = Probe(lambda x, n=n: [x + float(i) for i in range(n)], (_uniform(16),))
    return p


# Instructions of an optimized HLO entry computation that run no kernel of their own.
_NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})


def compiled_kernels(probe: Probe) -> int:
    """Kernels XLA compiled the probe's call into: its optimized HLO's top-level instructions that
    compute (fusions, library calls, lone ops)."""
    text = probe.call.lower(*probe.args).compile().as_text()
    entry = text[text.index("\nENTRY"):].split("\n}", 1)[0]
    ops = re.findall(r"^\s*(?:ROOT )?\S+ = \S+ ([\w-]+)\(", entry, re.M)
    return sum(op not in _NOT_KERNELS for op in ops)


def derive(t: dict[str, float], kernels: dict[str, int]) -> dict[str, Any]:
    """Rates and overheads from probe times (seconds) and the kernels XLA compiled some probes into;
    each is a slope or a difference of two."""
    def slope(a: str, b: str, work_a: float, work_b: float) -> float:  # seconds per unit of work
        return max(t[b] - t[a], 1e-12) / (work_b - work_a)  # a noisy non-positive slope stays finite

    def bandwidth(sizes: tuple[int, int]) -> float:  # an fp32 add moves 12 bytes per element
        return 12.0 / slope(*(f"add{n}" for n in sizes), *sizes)

    call = t["call"]
    per_kernel = slope(*(f"kernels{n}" for n in KERNEL_CHAIN), *(kernels[f"kernels{n}"] for n in KERNEL_CHAIN))
    tiles, (lo, hi) = (GEMM_WIDTH // TILE) ** 2, GEMM_ROWS
    clock = tiles / slope(f"gemm_rows{lo}", f"gemm_rows{hi}", lo, hi)
    # A GEMM of `lo` rows costs tiles * (packing + lo / clock) plus a per-GEMM cost; a one-tile GEMM
    # of the chain (its kernels' launches priced as kernels) costs one of each: their difference is
    # (tiles - 1) tiles' packing and streaming.
    kernels_per_gemm = (kernels[f"gemm_chain{GEMM_CHAIN[1]}"] - kernels[f"gemm_chain{GEMM_CHAIN[0]}"]) \
        / (GEMM_CHAIN[1] - GEMM_CHAIN[0])
    one_tile = slope(*(f"gemm_chain{n}" for n in GEMM_CHAIN), *GEMM_CHAIN) - kernels_per_gemm * per_kernel
    packing = max(0.0, (t[f"gemm_rows{lo}"] - call - one_tile) / (tiles - 1) - lo / clock)
    gemm_call = max(0.0, one_tile - packing - lo / clock)
    a, b = CHAINS
    per_step = {op: slope(f"{op}{a}", f"{op}{b}", a * VECTOR_ELEMENTS, b * VECTOR_ELEMENTS)
                for op in ("fma", *TRANSCENDENTALS)}
    flops_per_s = FMA_STEP[1] / per_step["fma"]
    weights = {op: max(1.0, per_step[op] * flops_per_s - extra) for op, (_, extra) in TRANSCENDENTALS.items()}
    # A row sum reads what a scale reads and writes 1/64 of it: any extra time is the reduction's.
    weights["reduce"] = max(1.0, 1.0 + (t["row_sum"] - t["row_scale"]) * flops_per_s / REDUCE_ELEMENTS)
    a, b = CONV_SIZES
    per_position = statistics.median(slope(f"conv{a}x{f}", f"conv{b}x{f}", 2 * a * a, 2 * b * b)
                                     for f in CONV_FEATURES)
    return {
        "matmul": {
            "flops_per_s": 2 * TILE * TILE * clock,
            "clock_hz": clock,
            "tile_load_s": packing,
            "call_overhead_s": gemm_call,
            "rows": list(GEMM_ROWS),
            "times_s": [t[f"gemm_rows{n}"] for n in GEMM_ROWS],
            "shape_times_s": [
                [m, k, n, max(t[f"gemm{m}x{k}x{n}"] - call, 1e-9)] for m, k, n in itertools.product(*GEMM_GRID)
            ],
        },
        "conv": {"positions_per_s": 1.0 / per_position, "overhead_s": max(0.0, t["conv_tiny"] - call)},
        "vector": {"flops_per_s": flops_per_s, "sram_bw_bytes_per_s": bandwidth(L2_ELEMENTS), "op_weights": weights},
        "memory": {
            "cache_bw_bytes_per_s": bandwidth(LLC_ELEMENTS),
            "hbm_bw_bytes_per_s": 12.0 * DRAM_ELEMENTS / max(t[f"add{DRAM_ELEMENTS}"] - call, 1e-9),
        },
        "loop": {
            "iteration_s": max(
                0.0, slope(*(f"scan{n}" for n in LOOP_TRIPS), *LOOP_TRIPS) - 4 * 32 * FMA_STEP[1] / flops_per_s
            )
        },
        "overhead": {
            "launch_overhead_s": per_kernel,
            "dispatch_overhead_s": max(0.0, call - per_kernel),
            **{f"{kind}_s": slope(*(f"{kind}{n}" for n in BUFFERS), *BUFFERS) for kind in ("inputs", "outputs")},
        },
    }


def measure(seconds_budget: float) -> dict[str, Any]:
    """All measurements in this process (which must have applied the measurement settings)."""
    probes = build_probes()
    kernels = {name: compiled_kernels(probes[name]) for name in
               (*(f"kernels{n}" for n in KERNEL_CHAIN), *(f"gemm_chain{n}" for n in GEMM_CHAIN))}
    wall, cpu = time.perf_counter(), time.process_time()
    times = time_probes(probes, seconds_budget)
    share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    return {"date": datetime.date.today().isoformat(), "jax": jax.__version__, "cpus": os.cpu_count(),
            "xla_flags": MEASUREMENT_XLA_FLAGS, "llc_bytes": last_level_cache_bytes(),
            "probe_times_s": times, "probe_kernels": kernels,
            "cpu_share": share, "spread": statistics.median(max(p.runs) / min(p.runs) for p in probes.values()),
            **derive(times, kernels)}


def calibrate(seconds_budget: float = 20) -> dict[str, Any]:
    """Measure this machine in a fresh Python process, so the measurement settings hold whatever
    this process has done with JAX; the budget is for timing (compilation comes on top)."""
    done = subprocess.run([sys.executable, "-m", "costmodel.calibrate", str(seconds_budget)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"calibration process failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


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


if __name__ == "__main__":  # the measuring process started by `calibrate`
    apply_measurement_settings()
    print(json.dumps(measure(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0)))
