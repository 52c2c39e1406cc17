"""`python -m bench.calibration`: check `cpu-host` kernel estimates against measured kernel times,
and compare greedy-DAG with ILP extraction on the zoo.

Each zoo model is optimized on `cpu-host`; every per-call kernel of the optimized kernel program,
and of the fair baseline's (the program as written, in its greedy fusion groups), becomes a
sub-program (its equations; inputs: the values it reads, fed with the values the model really
computes; outputs: the values it writes), run under jax.jit on the CPU with the settings
`optu calibrate` measures under (synchronous dispatch, single-threaded Eigen). Kernels are timed in
interleaved passes, each kernel in each pass as the least median of 5 consecutive calls; a kernel's
time is its best pass, so a slow spell of this shared machine costs one pass, not one kernel.
Writes bench/results/calibration.json. Nothing here is asserted.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import jax
import numpy as np
from scipy.stats import spearmanr

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from bench.report import machine, publish
from costmodel.calibrate import Probe, apply_measurement_settings, time_probes
from costmodel.profile import load_profile
from lowering.kernels import CONVENTIONAL, build_kernel_program
from lowering.runnable import kernel_subprogram
from service.optimizer.pipeline import baseline_program, optimize
from wire.capture import capture
from wire.execute import program_to_callable

RESULTS = Path(__file__).resolve().parent / "results" / "calibration.json"
KINDS = ("baseline", "optimized")  # the program as written in greedy groups; the optimizer's program
PASSES = 8  # interleaved timing passes over all kernels
BUDGET_PER_KERNEL_S = 0.4  # timing time per kernel, over all passes (compilation excluded)


def model_kernels(name: str, profile_name: str) -> list[tuple[dict[str, Any], Probe]]:
    """(row, probe) for each per-call kernel of the model's two programs (`KINDS`): as written, in
    the fair baseline's greedy groups, and as optimized, in its kernels; the probe times the kernel."""
    fn, args = ZOO[name]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    profile = load_profile(profile_name)
    written = baseline_program(program)[0]
    optimized = optimize(program, profile, {"validate": False})["program"]
    found = []
    for kind, program, kp in (("baseline", written, build_kernel_program(written, profile, CONVENTIONAL)),
                              ("optimized", optimized, build_kernel_program(optimized, profile))):
        # The model's real values, so each kernel sees realistic data (no NaNs from log of noise).
        env = dict(zip((i["name"] for i in program["inputs"]), jax.tree_util.tree_leaves(args)))
        for phase, kernels in (("precompute", kp.precompute), ("per_call", kp.kernels)):
            for kernel in kernels:
                sub = kernel_subprogram(program, kernel)
                run = program_to_callable(sub)
                inputs = tuple(env[i["name"]] for i in sub["inputs"])
                env.update(zip(sub["outputs"], run(*inputs)))
                if phase == "per_call":
                    found.append(({"model": name, "program": kind, "kernel": kernel.id, "kind": kernel.kind,
                                   "ops": kernel.ops, "inputs": len(sub["inputs"]), "outputs": len(sub["outputs"]),
                                   "bound": kernel.estimate.bound, "estimate_s": kernel.estimate.time_s},
                                  Probe(run, inputs)))
    return found


def measure(models: list[str], profile_name: str, passes: int = PASSES,
            budget_per_kernel_s: float = BUDGET_PER_KERNEL_S) -> list[dict[str, Any]]:
    """Every per-call kernel of both kinds of program of `models`, timed in interleaved passes."""
    found = [item for name in models for item in model_kernels(name, profile_name)]
    probes = {str(i): probe for i, (_, probe) in enumerate(found)}
    best = time_probes(probes, budget_per_kernel_s * len(probes), passes=passes)
    rows = []
    for i, (row, probe) in enumerate(found):
        runs = probe.runs
        rows.append({**row, "measured_s": best[str(i)], "pass_median_s": float(np.median(runs)),
                     "pass_spread": max(runs) / min(runs)})
    return rows


def check_kernels(models: list[str], profile_name: str, passes: int = PASSES,
                  budget_per_kernel_s: float = BUDGET_PER_KERNEL_S) -> dict[str, dict[str, Any]]:
    """How well `profile_name` ranks and scales the measured kernels of each kind of program."""
    return by_kind(measure(models, profile_name, passes, budget_per_kernel_s), passes)


def by_kind(kernels: list[dict[str, Any]], passes: int = PASSES) -> dict[str, dict[str, Any]]:
    """`summarize` for each kind of program's kernels."""
    return {kind: summarize([k for k in kernels if k["program"] == kind], passes) for kind in KINDS}


def extraction_comparison(name: str, hardware: str) -> dict[str, Any]:
    fn, args = ZOO[name]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    row: dict[str, Any] = {"model": name}
    for method in ("greedy", "ilp"):
        report = optimize(program, hardware, {"extraction": method, "validate": False})["report"]
        ext = report["extraction"]
        row[method] = {"cost_s": ext["cost_s"], "extract_wall_s": report["timings_s"]["extract"],
                       "status": ext["status"], "optimality_gap": ext["optimality_gap"]}
    return row


def summarize(kernels: list[dict[str, Any]], passes: int = PASSES) -> dict[str, Any]:
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


def _rho(stats: dict[str, Any]) -> str:
    return "n/a" if stats["spearman"] != stats["spearman"] else f"{stats['spearman']:.2f}"


def markdown(profile: str, summary: dict[str, dict[str, Any]], per_model: dict[str, dict[str, dict[str, Any]]],
             extraction: list[dict[str, Any]], hardware: str) -> str:
    lines = [f"{profile} kernel estimates against measured times, each kernel's best of "
             f"{summary['optimized']['passes']} interleaved passes:", ""]
    for kind, what in (("baseline", "the fair baseline's greedy groups of the programs as written"),
                       ("optimized", "the optimized programs' kernels")):
        k = summary[kind]
        lines.append(f"- {what}: {k['kernels']} kernels, Spearman **{k['spearman']:.3f}**, median estimate/measured "
                     f"{k['median_ratio_estimate_over_measured']:.2f} (p10 {k['ratio_p10']:.2f}, p90 "
                     f"{k['ratio_p90']:.2f}; median slowest/fastest pass {k['median_pass_spread']:.2f})")
    lines += ["", (f"| model | baseline kernels | Spearman | est/meas | optimized kernels | Spearman | est/meas | "
                   f"greedy cost ({hardware}) | ILP cost | greedy extract | ILP extract | ILP status |"),
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for ext in extraction:
        b, o = per_model[ext["model"]]["baseline"], per_model[ext["model"]]["optimized"]
        g, i = ext["greedy"], ext["ilp"]
        lines.append(f"| {ext['model']} | {b['kernels']} | {_rho(b)} | {b['median_ratio_estimate_over_measured']:.2f} | "
                     f"{o['kernels']} | {_rho(o)} | {o['median_ratio_estimate_over_measured']:.2f} | "
                     f"{g['cost_s'] * 1e6:.3f} us | {i['cost_s'] * 1e6:.3f} us | {g['extract_wall_s']:.3f} s | "
                     f"{i['extract_wall_s']:.3f} s | {i['status']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=list(ZOO))
    parser.add_argument("--profile", default="cpu-host", help="profile whose kernel estimates are checked")
    parser.add_argument("--hardware", default="optu-v1", help="profile for the greedy vs ILP comparison")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    apply_measurement_settings()  # before any JAX computation creates the CPU client
    kernels = measure(args.models, args.profile)
    per_model = {name: by_kind([k for k in kernels if k["model"] == name]) for name in args.models}
    extraction = [extraction_comparison(name, args.hardware) for name in args.models]
    summary = by_kind(kernels)
    publish(RESULTS, {"profile": args.profile, "machine": machine(), "summary": summary, "per_model": per_model,
                      "extraction": {"hardware": args.hardware, "models": extraction}, "kernels": kernels},
            markdown(args.profile, summary, per_model, extraction, args.hardware), "calibration", not args.no_readme)


if __name__ == "__main__":
    main()
