"""`python -m bench.scaling`: how optimize time grows with program size.

1. The BERT-base encoder at 1, 2, 4, 8, 12 and 24 layers: end-to-end optimize wall time, time per
   stage (saturate and extract apart), e-nodes, and time and e-nodes per layer; the growth
   exponent is the least-squares slope of log(time) against log(layers) (1 = linear, 2 = quadratic).
2. The 80-matmul chain: the optimum order under the cost model is known independently (the
   classic matrix-chain dynamic program over the kernel estimates the response reports, written
   apart from the optimizer's own, rewrites/chain_order.py), so we can say how long the optimizer
   needs until its algebraic optimum reaches it, and whether the ILP proved it.
Writes bench/results/scaling.json and the README table between `<!-- scaling:begin/end -->`.
"""
from __future__ import annotations

import argparse
import functools
import math
import time
from pathlib import Path
from typing import Any, Sequence

from bench.models.large import bert_encoder, matmul_chain
from bench.report import RESULTS_DIR, fmt_ratio, machine, machine_line, publish
from service.capture import capture
from service.pipeline import optimize

RESULTS = RESULTS_DIR / "scaling.json"
LAYERS = (1, 2, 4, 8, 12, 24)
CHAIN_LIMITS_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)  # saturation budgets tried, cheapest first (10 s: the default)
OPTIMAL_RTOL = 1e-6
TINY = {"hidden": 64, "heads": 4, "seq": 16, "batch": 2}


def growth_exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else None


def bert_point(layers: int, options: dict | None = None, **shape: int) -> dict[str, Any]:
    fn, args, weights = bert_encoder(layers, **shape)
    start = time.perf_counter()
    program = capture(fn, *args, weight_argnums=weights)
    capture_s = time.perf_counter() - start
    del args  # the weights are only needed for capture; 24 layers hold 680 MB
    start = time.perf_counter()
    response = optimize(program, "optu-v1", options)
    wall = time.perf_counter() - start
    t, g = response["report"]["timings_s"], response["report"]["egraph"]
    search = t.get("saturate", 0.0) + t.get("extract", 0.0)
    return {"layers": layers, "equations": len(program["eqns"]), "capture_s": capture_s, "optimize_wall_s": wall,
            "timings_s": t, "saturate_plus_extract_s": search, "enodes": g["enodes"], "eclasses": g["eclasses"],
            "partition": response["report"].get("partition"),
            "iterations": g["iterations"], "stop_reason": g["stop_reason"],
            "speedup_vs_baseline": response["estimate"]["speedup_vs_baseline"],
            "validation": response["validation"]["status"],
            "per_layer": {"optimize_wall_s": wall / layers, "saturate_plus_extract_s": search / layers,
                          "enodes": g["enodes"] / layers}}


def bert_scaling(layers: Sequence[int] = LAYERS, options: dict | None = None, **shape: int) -> dict[str, Any]:
    # A server's workers are warm (service/workers.py): a tiny encoder first, so one-time process costs
    # (first JAX traces and compiles of its own helpers, egglog's first rulesets) miss the first point.
    bert_point(1, options, **TINY)
    points = []
    for n in layers:
        points.append(bert_point(n, options, **shape))
        p = points[-1]
        print(f"bert {n} layers: {p['optimize_wall_s']:.2f} s, search {p['saturate_plus_extract_s']:.2f} s, "
              f"{p['enodes']} e-nodes", flush=True)
    xs = [p["layers"] for p in points]
    return {"shape": shape or {"hidden": 768, "heads": 12, "seq": 128, "batch": 8}, "points": points,
            "growth_exponent": {"optimize_wall_s": growth_exponent(xs, [p["optimize_wall_s"] for p in points]),
                                "saturate_plus_extract_s": growth_exponent(
                                    xs, [p["saturate_plus_extract_s"] for p in points]),
                                "enodes": growth_exponent(xs, [p["enodes"] for p in points])}}


def chain_optimum(program: dict, hardware: str = "optu-v1") -> float | None:
    """The cheapest parenthesisation of a matmul chain, one kernel per matmul, priced by the same
    kernel-program estimate the response reports (`lowering.kernels`), by the O(n^3) matrix-chain
    dynamic program. Fusing matmuls can only beat it, so an optimized estimate at or below it is
    optimal among unfused programs (and the chain leaves little else to fuse)."""
    from costmodel.profile import load_profile
    from lowering.kernels import NAIVE, build_kernel_program

    profile, eqns = load_profile(hardware), program["eqns"]
    if not eqns or any(e["op"] != "dot_general" for e in eqns):
        return None
    params, dtype = eqns[0]["params"], eqns[0]["out"][0]["dtype"]
    dims = [program["inputs"][0]["shape"][0]] + [spec["shape"][1] for spec in program["inputs"]]

    @functools.lru_cache(maxsize=None)
    def price(m: int, k: int, n: int) -> float:
        one = {"format": program["format"], "consts": [], "outputs": ["c"],
               "inputs": [{"name": "a", "shape": [m, k], "dtype": dtype},
                          {"name": "b", "shape": [k, n], "dtype": dtype}],
               "eqns": [{"op": "dot_general", "in": ["a", "b"], "params": params,
                         "out": [{"name": "c", "shape": [m, n], "dtype": dtype}]}]}
        return build_kernel_program(one, profile, NAIVE).total.time_s

    count = len(dims) - 1
    best = [[0.0] * count for _ in range(count)]
    for span in range(1, count):
        for i in range(count - span):
            j = i + span
            best[i][j] = min(best[i][k] + best[k + 1][j] + price(dims[i], dims[k + 1], dims[j + 1])
                             for k in range(i, j))
    return best[0][count - 1]


def chain_time_to_optimal(n: int = 80, limits: Sequence[float] = CHAIN_LIMITS_S) -> dict[str, Any]:
    """Optimize the n-matmul chain under growing time limits until the algebra's extraction is
    optimal and the ILP proved it (greedy-only extractions can reach the optimum without a proof).
    The algebraic optimum is priced one kernel per matmul (`report.fusion.greedy_s`), as the dynamic
    program prices orders; the returned program may then run GEMMs back to back, for less."""
    fn, args, weights = matmul_chain(n)
    program = capture(fn, *args, weight_argnums=weights)
    optimum, tries = chain_optimum(program), []
    for limit in limits:
        start = time.perf_counter()
        response = optimize(program, "optu-v1", {"time_limit_s": limit})
        wall = time.perf_counter() - start
        report = response["report"]
        cost = report["fusion"]["greedy_s"]
        reached = optimum is not None and cost <= optimum * (1 + OPTIMAL_RTOL)
        tries.append({"time_limit_s": limit, "optimize_wall_s": wall, "timings_s": report["timings_s"],
                      "enodes": report["egraph"]["enodes"], "stop_reason": report["egraph"]["stop_reason"],
                      "extraction": report["extraction"]["algebra"], "algebraic_estimate_s": cost,
                      "optimized_estimate_s": response["estimate"]["optimized"]["time_s"], "reached_optimum": reached,
                      "ilp_proved_optimal": report["extraction"]["algebra"].get("status") == "optimal",
                      "speedup_vs_baseline": response["estimate"]["speedup_vs_baseline"]})
        ext = report["extraction"]["algebra"]
        print(f"chain {n}, limit {limit} s: {wall:.2f} s, estimate/optimum "
              f"{cost / optimum if optimum else float('nan'):.4f}, {ext.get('method')} {ext.get('status')}", flush=True)
        if reached and tries[-1]["ilp_proved_optimal"]:
            break  # a larger budget cannot do better than a proven optimum
    first = next((t for t in tries if t["reached_optimum"]), None)
    proved = next((t for t in tries if t["reached_optimum"] and t["ilp_proved_optimal"]), None)
    return {"matmuls": n, "equations": len(program["eqns"]), "optimum_cost_s": optimum, "tries": tries,
            "time_to_optimal_s": first["optimize_wall_s"] if first else None,
            "time_to_proof_s": proved["optimize_wall_s"] if proved else None,
            "ilp_proved_optimal": proved is not None}


def _pieces(point: dict[str, Any]) -> str:
    part = point.get("partition")
    return f"{part['pieces']}, {part['searched']}" if part else "whole"


def table(bert: dict[str, Any], chain: dict[str, Any] | None, meta: dict[str, Any]) -> str:
    g = bert["growth_exponent"]
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"
    lines = [f"Optimizer wall time on {machine_line(meta)} (2 cores shared; noisy). Regenerate with "
             "`python -m bench.scaling`.", "",
             f"BERT-base encoder, optimize wall time vs layers: growth exponent {fmt(g['optimize_wall_s'])} "
             f"end to end, {fmt(g['saturate_plus_extract_s'])} for saturate + extract, {fmt(g['enodes'])} for "
             "e-nodes built (1 = linear). From 200 equations on, the encoder is searched piecewise "
             "(`pieces`: cut into, searched; service/partition.py): e-nodes count the e-graphs built.", "",
             "Stages: `extract` is the algebra's extraction; `fuse` loads the algebraic optimum into the "
             "fusion e-graph, saturates it and seeds greedy fusion's kernels; `kernels` extracts the kernels.", "",
             "| layers | eqns | optimize wall | per layer | ingest | saturate | extract | fuse | kernels | lower "
             "| validate | saturate + extract | pieces | e-nodes | e-nodes / layer | stop | speedup | validation |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---|"]
    for p in bert["points"]:
        t = p["timings_s"]
        lines.append(f"| {p['layers']} | {p['equations']} | {p['optimize_wall_s']:.2f} s | "
                     f"{p['per_layer']['optimize_wall_s']:.2f} s | {t.get('ingest', 0):.2f} s | "
                     f"{t.get('saturate', 0):.2f} s | {t.get('extract', 0):.2f} s | {t.get('fuse', 0):.2f} s | "
                     f"{t.get('extract_kernels', 0):.2f} s | {t.get('lower', 0):.2f} s | "
                     f"{t.get('validate', 0):.2f} s | {p['saturate_plus_extract_s']:.2f} s | {_pieces(p)} | {p['enodes']} | "
                     f"{p['per_layer']['enodes']:.0f} | {p['stop_reason']} | "
                     f"{fmt_ratio(p['speedup_vs_baseline'])} | {p['validation']} |")
    if chain:
        lines += ["", f"{chain['matmuls']}-matmul chain: optimum under the cost model (matrix-chain DP) "
                  f"{chain['optimum_cost_s'] * 1e6:.4g} us; time to an optimal program: "
                  + (f"{chain['time_to_optimal_s']:.2f} s" if chain["time_to_optimal_s"] is not None
                     else "not reached within the budgets tried") + "; proved optimal by the ILP: "
                  + (f"after {chain['time_to_proof_s']:.2f} s" if chain["time_to_proof_s"] is not None
                     else "no"), "",
                  "`algebra / optimum`: the chosen order, one kernel per matmul, against the DP's; `optimized`: "
                  "the returned program, whose kernels may run GEMMs back to back (`kernel.max_gemms`).", "",
                  "| time limit | optimize wall | saturate | extract | saturate + extract | e-nodes | stop | extraction "
                  "| algebra / optimum | optimized |",
                  "|---:|---:|---:|---:|---:|---:|---|---|---:|---:|"]
        for t in chain["tries"]:
            ext, opt = t["extraction"], chain["optimum_cost_s"]
            sat, ext_s = t["timings_s"].get("saturate", 0), t["timings_s"].get("extract", 0)
            lines.append(f"| {t['time_limit_s']} s | {t['optimize_wall_s']:.2f} s | {sat:.2f} s | {ext_s:.2f} s | "
                         f"{sat + ext_s:.2f} s | {t['enodes']} | {t['stop_reason']} | {ext['method']} "
                         f"({ext.get('status')}) | {t['algebraic_estimate_s'] / opt if opt else float('nan'):.4f} | "
                         f"{t['optimized_estimate_s'] * 1e6:.4g} us |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="*", default=list(LAYERS))
    parser.add_argument("--chain", type=int, default=80, help="matmuls in the chain; 0 skips it")
    parser.add_argument("--chain-limits", type=float, nargs="*", default=list(CHAIN_LIMITS_S))
    parser.add_argument("--tiny", action="store_true", help="a tiny encoder (hidden 64, 4 heads, seq 16, "
                                                            "batch 2): checks the script, measures nothing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    bert = bert_scaling(args.layers, **(TINY if args.tiny else {}))
    chain = chain_time_to_optimal(args.chain, args.chain_limits) if args.chain else None
    meta = machine()
    publish(args.out, {"machine": meta, "bert": bert, "chain": chain}, table(bert, chain, meta), "scaling",
            not args.no_readme)
    return {"bert": bert, "chain": chain}


if __name__ == "__main__":
    main()
