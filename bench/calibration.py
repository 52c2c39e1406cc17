"""`python -m bench.calibration`: check `cpu-host` kernel estimates against measured kernel times,
and compare greedy-DAG with ILP extraction on the zoo.

Each zoo model's kernels, as written (in the fair baseline's kernels) and as returned, are timed
against the profile's estimates by `service.optimizer.kernel_check` (what `optu calibrate --check`
does on a user's programs), fed with the values the model really computes, under the settings
`optu calibrate` measures under (synchronous dispatch, single-threaded Eigen). Each kernel in each
pass is the least median of 5 consecutive calls; a kernel's time is its best pass. Writes
bench/results/calibration.json. Nothing here is asserted.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import jax

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from bench.report import machine, publish
from costmodel.calibrate import apply_measurement_settings
from service.optimizer.kernel_check import Checked, by_kind, measure
from service.optimizer.pipeline import optimize
from wire.capture import capture

RESULTS = Path(__file__).resolve().parent / "results" / "calibration.json"


def zoo_programs(models: list[str]) -> list[Checked]:
    """Each zoo model's program with the model's real values, so each kernel sees realistic data
    (no NaNs from the log of noise)."""
    found = []
    for name in models:
        fn, args = ZOO[name]()
        found.append((name, capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name]), jax.tree_util.tree_leaves(args)))
    return found


def extraction_comparison(name: str, program: dict[str, Any], hardware: str) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name}
    for method in ("greedy", "ilp"):
        report = optimize(program, hardware, {"extraction": method, "validate": False})["report"]
        ext = report["extraction"]
        row[method] = {"cost_s": ext["cost_s"], "extract_wall_s": report["timings_s"]["extract"],
                       "status": ext["status"], "optimality_gap": ext["optimality_gap"]}
    return row


def _rho(stats: dict[str, Any]) -> str:
    return "n/a" if stats["spearman"] != stats["spearman"] else f"{stats['spearman']:.2f}"


def markdown(profile: str, summary: dict[str, dict[str, Any]], per_model: dict[str, dict[str, dict[str, Any]]],
             extraction: list[dict[str, Any]], hardware: str) -> str:
    lines = [f"{profile} kernel estimates against measured times, each kernel's best of "
             f"{summary['optimized']['passes']} interleaved passes:", ""]
    for kind, what in (("baseline", "the programs as written, in the fair baseline's kernels"),
                       ("optimized", "the returned programs, in their kernels")):
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
        lines.append(
            f"| {ext['model']} | {b['kernels']} | {_rho(b)} | {b['median_ratio_estimate_over_measured']:.2f} | "
            f"{o['kernels']} | {_rho(o)} | {o['median_ratio_estimate_over_measured']:.2f} | "
            f"{g['cost_s'] * 1e6:.3f} us | {i['cost_s'] * 1e6:.3f} us | {g['extract_wall_s']:.3f} s | "
            f"{i['extract_wall_s']:.3f} s | {i['status']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=list(ZOO))
    parser.add_argument("--profile", default="cpu-host", help="profile whose kernel estimates are checked")
    parser.add_argument("--hardware", default="optu-v1", help="profile for the greedy vs ILP comparison")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    apply_measurement_settings()  # before any JAX computation creates the CPU client
    programs = zoo_programs(args.models)
    kernels = measure(programs, args.profile)
    per_model = {name: by_kind([k for k in kernels if k["model"] == name]) for name in args.models}
    extraction = [extraction_comparison(name, program, args.hardware) for name, program, _ in programs]
    summary = by_kind(kernels)
    publish(RESULTS, {"profile": args.profile, "machine": machine(), "summary": summary, "per_model": per_model,
                      "extraction": {"hardware": args.hardware, "models": extraction}, "kernels": kernels},
            markdown(args.profile, summary, per_model, extraction, args.hardware), "calibration", not args.no_docs)


if __name__ == "__main__":
    main()
