"""How well a hardware profile ranks and scales measured kernel times on programs of one's own.

Each program is optimized on the profile; every per-call kernel of the returned kernel program,
and of the fair baseline's (the program as written, in its kernels), becomes a sub-program (its
equations; inputs: the values it reads, fed with the values the program computes from `values`;
outputs: the values it writes), timed under jax.jit against the profile's estimate for it plus
the call's dispatch, which a kernel timed alone pays. Kernels are timed in interleaved passes
(`costmodel.calibrate.time_probes`), so a slow spell of a shared machine costs one pass, not one
kernel. The fit: Spearman rank correlation and the
median (p10, p90) of estimate / measured, per kind of program.
"""
from __future__ import annotations

from typing import Any, Sequence, TypedDict

import numpy as np
from scipy.stats import spearmanr

from costmodel.calibrate import Probe, time_probes
from costmodel.profile import load_profile
from lowering.baseline import baseline_kernels
from lowering.kernels import KernelProgram
from lowering.runnable import kernel_subprogram
from service.optimizer.options import OptimizeOptions
from service.optimizer.pipeline import baseline_program, optimize
from wire.execute import program_to_callable
from wire.json_types import Program

KINDS = ("baseline", "optimized")  # the program as written in the baseline's kernels; the returned one
PASSES = 8  # interleaved timing passes over all kernels
BUDGET_PER_KERNEL_S = 0.4  # timing time per kernel, over all passes (compilation excluded)
Checked = tuple[str, Program, Sequence[Any]]  # (name, wire program, a value per program input)


class KernelTiming(TypedDict, total=False):
    """One kernel's estimate and, once timed, its measured time (seconds; with the call's dispatch)."""

    model: str
    program: str  # one of KINDS
    kernel: int
    kind: str
    ops: list[str]
    inputs: int
    outputs: int
    bound: str
    estimate_s: float
    measured_s: float  # the best pass
    pass_median_s: float
    pass_spread: float  # slowest pass / fastest


class RankFit(TypedDict):
    """How well the estimates rank and scale the measured times of one kind of program's kernels."""

    kernels: int
    spearman: float
    p_value: float
    passes: int
    median_pass_spread: float
    median_ratio_estimate_over_measured: float
    ratio_p10: float
    ratio_p90: float


def program_kernels(name: str, program: Program, values: Sequence[Any],
                    profile_name: str) -> list[tuple[KernelTiming, Probe]]:
    """(row, probe) for each per-call kernel of `program` as written (in the fair baseline's greedy
    groups) and as optimized on `profile_name`; the probe times the kernel on the values the
    program computes from `values`."""
    profile = load_profile(profile_name)
    written = baseline_program(program, OptimizeOptions())
    response = optimize(program, profile, {"validate": False})
    dispatch = profile.kernel.dispatch_overhead_s or 0.0  # each kernel is timed as a call of its own
    found = []
    for kind, source, kp in (("baseline", written, baseline_kernels(written, profile)),
                             ("optimized", response["program"], KernelProgram.from_response(response))):
        env = dict(zip((i["name"] for i in source["inputs"]), values))
        for phase, kernels in (("precompute", kp.precompute), ("per_call", kp.kernels)):
            for kernel in kernels:
                sub = kernel_subprogram(source, kernel)
                run = program_to_callable(sub)
                inputs = tuple(env[i["name"]] for i in sub["inputs"])
                env.update(zip(sub["outputs"], run(*inputs)))
                if phase == "per_call":
                    found.append(({"model": name, "program": kind, "kernel": kernel.id, "kind": kernel.kind,
                                   "ops": kernel.ops, "inputs": len(sub["inputs"]), "outputs": len(sub["outputs"]),
                                   "bound": kernel.estimate.bound, "estimate_s": kernel.estimate.time_s + dispatch},
                                  Probe(run, inputs)))
    return found


def measure(programs: Sequence[Checked], profile_name: str, passes: int = PASSES,
            budget_per_kernel_s: float = BUDGET_PER_KERNEL_S) -> list[KernelTiming]:
    """Every per-call kernel of both kinds of each program, timed in interleaved passes."""
    found = [item for name, program, values in programs for item in program_kernels(name, program, values,
                                                                                    profile_name)]
    probes = {str(i): probe for i, (_, probe) in enumerate(found)}
    best = time_probes(probes, budget_per_kernel_s * len(probes), passes=passes)
    rows = []
    for i, (row, probe) in enumerate(found):
        runs = probe.runs
        rows.append({**row, "measured_s": best[str(i)], "pass_median_s": float(np.median(runs)),
                     "pass_spread": max(runs) / min(runs)})
    return rows


def check_kernels(programs: Sequence[Checked], profile_name: str, passes: int = PASSES,
                  budget_per_kernel_s: float = BUDGET_PER_KERNEL_S) -> dict[str, RankFit]:
    """How well `profile_name` ranks and scales the measured kernels of each kind of program."""
    return by_kind(measure(programs, profile_name, passes, budget_per_kernel_s), passes)


def by_kind(kernels: list[KernelTiming], passes: int = PASSES) -> dict[str, RankFit]:
    """`summarize` for each kind of program's kernels."""
    return {kind: summarize([k for k in kernels if k["program"] == kind], passes) for kind in KINDS}


def summarize(kernels: list[KernelTiming], passes: int = PASSES) -> RankFit:
    """Spearman rank correlation of estimated and measured kernel times, and the fitted scale:
    the median (p10, p90) of estimate / measured."""
    est = np.array([k["estimate_s"] for k in kernels])
    meas = np.array([k["measured_s"] for k in kernels])
    rho, p_value = spearmanr(est, meas) if len(kernels) > 2 else (float("nan"), float("nan"))
    ratios = est / meas if len(kernels) else np.array([float("nan")])
    spread = [k["pass_spread"] for k in kernels]
    return {"kernels": len(kernels), "spearman": float(rho), "p_value": float(p_value),
            "passes": passes, "median_pass_spread": float(np.median(spread)) if spread else float("nan"),
            "median_ratio_estimate_over_measured": float(np.median(ratios)),
            "ratio_p10": float(np.percentile(ratios, 10)), "ratio_p90": float(np.percentile(ratios, 90))}
