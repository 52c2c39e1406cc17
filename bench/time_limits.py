"""`python -m bench.time_limits`: the search is anytime. Each model is optimized under growing time
limits and at the default settings; the estimate must not grow with the limit, and the default must
come within 2% of the best the sweep found. Writes bench/results/time_limits.json and the table in
docs/benchmarks.md between `<!-- time_limits:begin -->`/`<!-- time_limits:end -->`.

For the matmul chain the table also gives its order's ceiling: the cheapest order the matrix-chain
dynamic program finds under each price the optimizer uses (a GEMM kernel of its own; one of a run
of GEMMs in one kernel), lowered with the fair baseline's own kernels. No order does better by much:
the chain's work is its products.
"""
from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from bench.models.registry import capture_model
from bench.report import RESULTS_DIR, fmt_ratio, fmt_time, machine, machine_line, publish
from costmodel.kernel_cost import proxies
from costmodel.profile import HardwareProfile, load_profile
from lowering.kernels import build_kernel_program
from rewrites.chain_order import Order, cheapest_order, find_chains
from service.optimizer.pipeline import optimize

RESULTS = RESULTS_DIR / "time_limits.json"
MODELS = ("matmul_chain_80", "bert_12_layers", "nasrnn")
LIMITS_S = (0.1, 1.0, 10.0, 30.0)
DEFAULT_WITHIN = 1.02  # the default settings' estimate against the sweep's best
HARDWARE = "optu-v1"


def sweep(name: str, limits: Sequence[float]) -> dict[str, Any]:
    """The model optimized under each time limit, then at the default settings."""
    program, _ = capture_model(name)
    points = []
    for limit in [*limits, None]:
        start = time.perf_counter()
        response = optimize(program, HARDWARE, {} if limit is None else {"time_limit_s": limit})
        wall = time.perf_counter() - start
        report = response["report"]
        points.append({"time_limit_s": limit, "optimize_wall_s": wall, "timings_s": report["timings_s"],
                       "estimate_s": response["estimate"]["optimized"]["time_s"],
                       "speedup_vs_baseline": response["estimate"]["speedup_vs_baseline"],
                       "enodes": report["egraph"]["enodes"], "stop_reason": report["egraph"]["stop_reason"],
                       "validation": response["validation"]["status"]})
        print(f"{name}, limit {limit if limit is not None else 'default'}: {wall:.2f} s, "
              f"{points[-1]['estimate_s'] * 1e6:.4g} us", flush=True)
    swept, default = points[:-1], points[-1]
    best = min(p["estimate_s"] for p in points)
    return {"model": name, "equations": len(program["eqns"]), "points": points,
            "non_increasing": all(b["estimate_s"] <= a["estimate_s"] * (1 + 1e-9) for a, b in zip(swept, swept[1:])),
            "default_vs_best": default["estimate_s"] / best,
            "chain_ceiling_s": chain_ceiling(program, load_profile(HARDWARE))}


def chain_ceiling(program: dict[str, Any], profile: HardwareProfile) -> float | None:
    """For a program that is one matmul chain: its cheapest order under each price, as a program
    under the fair baseline's kernels; None for anything else."""
    chains = find_chains(program)
    if len(chains) != 1 or len(chains[0].leaves) != len(program["eqns"]) + 1:
        return None
    chain = chains[0]
    best = None
    for price in proxies(profile).values():
        cost = partial(price, profile, chain.params, chain.dtype)
        _, order = cheapest_order(chain.dims, cost)
        time_s = build_kernel_program(_chain_program(program, chain, order), profile).total.time_s
        best = time_s if best is None else min(best, time_s)
    return best


def _chain_program(program: dict[str, Any], chain, order: Order) -> dict[str, Any]:
    """`program` computing its chain in `order`, depth first (as the optimizer emits it)."""
    eqns: list[dict[str, Any]] = []

    def build(node: Order) -> tuple[str, int, int]:
        if isinstance(node, int):
            return chain.leaves[node], chain.dims[node], chain.dims[node + 1]
        (a, m, _), (b, _, n) = build(node[0]), build(node[1])
        eqns.append({"op": "dot_general", "in": [a, b], "params": chain.params,
                     "out": [{"name": f"p{len(eqns)}", "shape": [m, n], "dtype": chain.dtype}]})
        return eqns[-1]["out"][0]["name"], m, n

    root, _, _ = build(order)
    return {**program, "eqns": eqns, "outputs": [root]}


def table(results: list[dict[str, Any]], limits: Sequence[float], meta: dict[str, Any]) -> str:
    head = " | ".join(f"{limit:g} s" for limit in limits)
    lines = [f"Optimized estimate on `{HARDWARE}` under each time limit, and at the default settings "
             f"(wall time on {machine_line(meta)}). Regenerate with `python -m bench.time_limits`.", "",
             f"| model | {head} | default | non-increasing | default / best | wall at default |",
             "|---|" + "---:|" * (len(limits) + 4)]
    for r in results:
        cells = " | ".join(f"{fmt_time(p['estimate_s'])} ({p['optimize_wall_s']:.1f} s)" for p in r["points"][:-1])
        default = r["points"][-1]
        lines.append(f"| {r['model']} | {cells} | {fmt_time(default['estimate_s'])} | "
                     f"{'yes' if r['non_increasing'] else '**no**'} | {r['default_vs_best']:.4f} "
                     f"{'' if r['default_vs_best'] <= DEFAULT_WITHIN else '(over 2%)'} | "
                     f"{default['optimize_wall_s']:.2f} s |")
    for r in results:
        if r["chain_ceiling_s"]:
            baseline = r["points"][-1]["estimate_s"] * r["points"][-1]["speedup_vs_baseline"]
            lines += ["", f"{r['model']}: the cheapest order's ceiling is {fmt_time(r['chain_ceiling_s'])} "
                      f"({fmt_ratio(baseline / r['chain_ceiling_s'])} over the baseline's "
                      f"{fmt_time(baseline)}); the default settings return {fmt_time(r['points'][-1]['estimate_s'])}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--limits", type=float, nargs="*", default=list(LIMITS_S))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    results = [sweep(name, args.limits) for name in args.models]
    meta = machine()
    publish(args.out, {"machine": meta, "limits_s": args.limits, "models": results},
            table(results, args.limits, meta), "time_limits", not args.no_docs)
    return results


if __name__ == "__main__":
    main()
