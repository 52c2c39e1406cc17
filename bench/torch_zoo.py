"""The torch bench: each model of the torch zoo captured and optimized in-process; its estimate
against the fair baseline; and CPU latency (median of 200) of the returned callable against torch
eager, torch.compile with inductor, and the exported core-ATen GraphModule run by torch (what an
FX program emitted from the optimized one would cost to run). Writes bench/results/torch_zoo.json."""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from bench.models.torch_zoo import ZOO, build
from bench.report import ROOT, fmt_ratio, fmt_time, machine, machine_line, publish

RESULTS = ROOT / "bench" / "results" / "torch_zoo.json"


def median_latency(fn: Callable[..., Any], args: tuple, reps: int) -> float:
    """Median seconds per call over `reps` calls after two warm-up calls (compiles happen there)."""
    import torch

    with torch.no_grad():
        fn(*args), fn(*args)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, reps: int, time_limit_s: float) -> dict[str, Any]:
    import torch

    from service.client import optimize
    from wire.torch_capture import export

    model, args = build(name)
    start = time.perf_counter()
    result = optimize(model, *args, time_limit_s=time_limit_s)
    optimize_s = time.perf_counter() - start
    est = result.estimate
    with torch.no_grad():
        error = max(float((a - b).abs().max()) for a, b in zip([result.fn(*args)], [model(*args)]))
    latency = {"optu_fn": median_latency(result.fn, args, reps), "torch_eager": median_latency(model, args, reps),
               "exported_graph_module": median_latency(export(model, args).module(), args, reps)}
    try:
        latency["torch_compile_inductor"] = median_latency(torch.compile(model, backend="inductor"), args, reps)
    except Exception as exc:  # no C++ toolchain, or inductor refuses the model: say so in the results
        latency["torch_compile_inductor"] = None
        latency["inductor_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return {"model": name, "equations": len(result.program["eqns"]), "optimize_s": optimize_s,
            "validation": result.validation["status"], "max_abs_error_vs_eager": error,
            "baseline_s": est["baseline"]["time_s"], "optimized_s": est["optimized"]["time_s"],
            "speedup_vs_baseline": est["speedup_vs_baseline"], "cpu_latency_s": latency}


def table(rows: list[dict[str, Any]], meta: dict[str, Any], reps: int) -> str:
    lines = ["| model | optimize | validation | est. speedup vs baseline | optu fn | torch eager | "
             "inductor | exported GraphModule |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = r["cpu_latency_s"]
        lines.append(f"| {r['model']} | {r['optimize_s']:.1f} s | {r['validation']} | "
                     f"{fmt_ratio(r['speedup_vs_baseline'])} | {fmt_time(lat['optu_fn'])} | "
                     f"{fmt_time(lat['torch_eager'])} | {fmt_time(lat['torch_compile_inductor'])} | "
                     f"{fmt_time(lat['exported_graph_module'])} |")
    lines.append(f"\nCPU latency: median of {reps} calls after warm-up; {machine_line(meta)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--time-limit-s", type=float, default=10)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    meta = machine()
    rows = [measure(name, args.reps, args.time_limit_s) for name in args.models]
    payload = {"meta": meta, "reps": args.reps, "rows": rows}
    publish(args.output, payload, table(rows, meta, args.reps), "torch-zoo", docs=not args.no_docs)
    return payload


if __name__ == "__main__":
    main()
