"""`make bench`: optimize every zoo model in-process and report estimates and optimizer wall time.

Writes bench/results/latest.json and regenerates the README table between its markers. Speedups
are ratios against the `baseline` estimate computed in the same run; wall times are for this
machine and are reported, never asserted.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.capture import capture
from service.pipeline import VERSION, optimize

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "latest.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def bench_model(name: str, hardware: str) -> dict:
    fn, args = ZOO[name]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    start = time.perf_counter()
    response = optimize(program, hardware)
    wall = time.perf_counter() - start
    est, report = response["estimate"], response["report"]
    return {
        "model": name,
        "equations": len(program["eqns"]),
        "optimized_equations": len(response["program"]["eqns"]),
        "naive_s": est["naive"]["time_s"],
        "baseline_s": est["baseline"]["time_s"],
        "optimized_s": est["optimized"]["time_s"],
        "speedup_vs_baseline": est["speedup_vs_baseline"],
        "kernels": len(response["kernels"]),
        "validation": response["validation"]["status"],
        "max_rel_error": response["validation"]["max_rel_error"],
        "enodes": report["egraph"]["enodes"],
        "eclasses": report["egraph"]["eclasses"],
        "stop_reason": report["egraph"]["stop_reason"],
        "rewrites": sum(report["rewrites"].values()),
        "rules_fired": report["rewrites"],
        "extraction": report["extraction"],
        "optimize_wall_s": wall,
        "timings_s": report["timings_s"],
    }


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor(),
            "jax": jax.__version__, "optu_eqsat": VERSION}


def table(rows: list[dict], hardware: str, meta: dict) -> str:
    lines = [f"Estimated on `{hardware}`; optimizer wall time on {meta['machine']} "
             f"(Python {meta['python']}, jax {meta['jax']}). Regenerate with `make bench`.", "",
             "| model | eqns | baseline est. | optimized est. | speedup | kernels | rewrites | e-nodes "
             "| saturate | extraction | validation (max rel err) | optimize wall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        ext = r["extraction"]
        gap = "" if ext["optimality_gap"] is None else f", gap {ext['optimality_gap']:.2g}"
        lines.append(f"| {r['model']} | {r['equations']} | {r['baseline_s'] * 1e6:.2f} us | "
                     f"{r['optimized_s'] * 1e6:.2f} us | {r['speedup_vs_baseline']:.2f}x | {r['kernels']} | "
                     f"{r['rewrites']} | {r['enodes']} | {r['timings_s']['saturate']:.2f} s | "
                     f"{ext['method']}{gap} | {r['validation']} ({r['max_rel_error']:.1e}) | "
                     f"{r['optimize_wall_s']:.2f} s |")
    return "\n".join(lines)


def update_readme(text: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the README's text between two marker comments."""
    readme = README.read_text()
    if begin in readme and end in readme:
        head, rest = readme.split(begin, 1)
        README.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hardware", default="optu-v1")
    parser.add_argument("--models", nargs="*", default=list(ZOO))
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    rows = [bench_model(name, args.hardware) for name in args.models]
    meta = machine()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"hardware": args.hardware, "machine": meta, "models": rows}, indent=2) + "\n")
    text = table(rows, args.hardware, meta)
    print(text)
    if not args.no_readme:
        update_readme(text)


if __name__ == "__main__":
    main()
