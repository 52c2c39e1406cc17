"""`python -m bench.calibration`: check `cpu-host` kernel estimates against measured kernel times,
and compare greedy-DAG with ILP extraction on the zoo.

Each zoo model is optimized on `cpu-host`; every per-call kernel of the optimized kernel program
becomes a sub-program (its equations; inputs: the values it reads, fed with the values the model
really computes; outputs: the values it writes), run under jax.jit on the CPU with the settings
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
from lowering.kernels import build_kernel_program
from lowering.runnable import kernel_subprogram
from lowering.to_jax import program_to_callable
from service.capture import capture
from service.pipeline import optimize

RESULTS = Path(__file__).resolve().parent / "results" / "calibration.json"
PASSES = 8  # interleaved timing passes over all kernels
BUDGET_PER_KERNEL_S = 0.4  # timing time per kernel, over all passes (compilation excluded)


def model_kernels(name: str, profile_name: str) -> list[tuple[dict[str, Any], Probe]]:
    """(row, probe) for each per-call kernel of the optimized model; the probe times the kernel."""
    fn, args = ZOO[name]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    profile = load_profile(profile_name)
    optimized = optimize(program, profile, {"validate": False})["program"]
    kp = build_kernel_program(optimized, profile)
    # The model's real values, so each kernel sees realistic data (no NaNs from log of noise).
    env = dict(zip((i["name"] for i in optimized["inputs"]), jax.tree_util.tree_leaves(args)))
    found = []
    for phase, kernels in (("precompute", kp.precompute), ("per_call", kp.kernels)):
        for kernel in kernels:
            sub = kernel_subprogram(optimized, kernel)
            run = program_to_callable(sub)
            inputs = tuple(env[i["name"]] for i in sub["inputs"])
            env.update(zip(sub["outputs"], run(*inputs)))
            if phase == "per_call":
                found.append(({"model": name, "kernel": kernel.id, "kind": kernel.kind, "ops": kernel.ops,
                               "inputs": len(sub["inputs"]), "outputs": len(sub["outputs"]),
                               "bound": kernel.estimate.bound, "estimate_s": kernel.estimate.time_s},
                              Probe(run, inputs)))
    return found


def measure(models: list[str], profile_name: str, passes: int = PASSES) -> list[dict[str, Any]]:
    found = [item for name in models for item in model_kernels(name, profile_name)]
    probes = {str(i): probe for i, (_, probe) in enumerate(found)}
    best = time_probes(probes, BUDGET_PER_KERNEL_S * len(probes), passes=passes)
    rows = []
    for i, (row, probe) in enumerate(found):
        runs = probe.runs
        rows.append({**row, "measured_s": best[str(i)], "pass_median_s": float(np.median(runs)),
                     "pass_spread": max(runs) / min(runs)})
    return rows


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


def summarize(kernels: list[dict[str, Any]]) -> dict[str, Any]:
    est = np.array([k["estimate_s"] for k in kernels])
    meas = np.array([k["measured_s"] for k in kernels])
    rho, p_value = spearmanr(est, meas)
    ratios = est / meas
    spread = [k["pass_spread"] for k in kernels]
    return {"kernels": len(kernels), "spearman": float(rho), "p_value": float(p_value),
            "passes": PASSES, "median_pass_spread": float(np.median(spread)) if spread else float("nan"),
            "median_ratio_estimate_over_measured": float(np.median(ratios)),
            "ratio_p10": float(np.percentile(ratios, 10)), "ratio_p90": float(np.percentile(ratios, 90))}


def markdown(summary: dict[str, Any], per_model: list[dict[str, Any]], extraction: list[dict[str, Any]],
             hardware: str) -> str:
    lines = [(f"cpu-host estimate vs measured, {summary['kernels']} kernels: Spearman "
              f"{summary['spearman']:.3f}, median estimate/measured "
              f"{summary['median_ratio_estimate_over_measured']:.2f} "
              f"(p10 {summary['ratio_p10']:.2f}, p90 {summary['ratio_p90']:.2f}); each kernel's best of "
              f"{summary['passes']} interleaved passes (median slowest/fastest pass "
              f"{summary['median_pass_spread']:.2f})"), "",
             (f"| model | kernels | Spearman | median est/meas | greedy cost ({hardware}) | ILP cost | "
              "greedy extract | ILP extract | ILP status |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for stats, ext in zip(per_model, extraction):
        rho = "n/a" if stats["spearman"] != stats["spearman"] else f"{stats['spearman']:.2f}"
        g, i = ext["greedy"], ext["ilp"]
        lines.append(f"| {ext['model']} | {stats['kernels']} | {rho} | "
                     f"{stats['median_ratio_estimate_over_measured']:.2f} | {g['cost_s'] * 1e6:.3f} us | "
                     f"{i['cost_s'] * 1e6:.3f} us | {g['extract_wall_s']:.3f} s | {i['extract_wall_s']:.3f} s | "
                     f"{i['status']} |")
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
    per_model = [summarize([k for k in kernels if k["model"] == name]) for name in args.models]
    extraction = [extraction_comparison(name, args.hardware) for name in args.models]
    summary = summarize(kernels)
    publish(RESULTS, {"profile": args.profile, "machine": machine(), "summary": summary,
                      "per_model": dict(zip(args.models, per_model)),
                      "extraction": {"hardware": args.hardware, "models": extraction}, "kernels": kernels},
            markdown(summary, per_model, extraction, args.hardware), "calibration", not args.no_readme)


if __name__ == "__main__":
    main()
