"""`python -m bench.lower_bound`: is the lower bound one, and how much headroom does it leave?
Generated programs of every family (bench/models/generated.py) go through the whole pipeline on
every shipped profile; each must come back with `lower_bound` at or below both the optimized and
the baseline estimate, and `optimized / lower_bound` says how far from the floor the answer is.
Writes bench/results/lower_bound.json and the table in docs/benchmarks.md between `<!-- lower_bound:begin -->`
and `<!-- lower_bound:end -->`.
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings

from bench.models.generated import FAMILIES
from bench.report import RESULTS_DIR, fmt_ratio, geomean, machine, machine_line, publish
from service.optimizer.pipeline import optimize

RESULTS = RESULTS_DIR / "lower_bound.json"
PROFILES = ("optu-v1", "gpu-roofline", "cpu-host")


def measure(profile: str, examples: int) -> list[dict[str, Any]]:
    """One row per generated program: its family, the three estimates and whether the bound held."""
    rows: list[dict[str, Any]] = []
    for family in FAMILIES:
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(family())
        def run(program):
            estimate = optimize(program, profile, {"time_limit_s": 1, "validate": False})["estimate"]
            bound, optimized, baseline = (estimate[k]["time_s"] for k in ("lower_bound", "optimized", "baseline"))
            rows.append({"family": family.__name__, "bound_s": bound, "optimized_s": optimized,
                         "baseline_s": baseline, "binds": estimate["lower_bound"]["bound"],
                         "held": bound <= optimized and bound <= baseline})

        run()
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"programs": len(rows), "held": sum(r["held"] for r in rows),
            "geomean_optimized_over_bound": geomean(r["optimized_s"] / r["bound_s"] for r in rows),
            "max_optimized_over_bound": max(r["optimized_s"] / r["bound_s"] for r in rows),
            "binds": dict(Counter(r["binds"] for r in rows))}


def table(summaries: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"The lower bound against whole optimizations of generated programs (chains, MLPs, attention, "
        f"scans, conds, weight-only work; {machine_line(meta)}). `held`: bound <= optimized and bound <= "
        "baseline. Regenerate with `python -m bench.lower_bound`.",
        "",
        "| profile | programs | held | optimized / bound (geomean) | max | binds |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for profile, s in summaries.items():
        binds = ", ".join(f"{k} {v}" for k, v in sorted(s["binds"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {profile} | {s['programs']} | {s['held']} | {fmt_ratio(s['geomean_optimized_over_bound'])} "
                     f"| {fmt_ratio(s['max_optimized_over_bound'])} | {binds} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", nargs="*", default=list(PROFILES))
    parser.add_argument("--examples", type=int, default=15, help="programs per family and profile")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    rows = {profile: measure(profile, args.examples) for profile in args.profiles}
    summaries = {profile: summarize(r) for profile, r in rows.items()}
    meta = machine()
    publish(args.out, {"machine": meta, "summary": summaries, "programs": rows}, table(summaries, meta),
            "lower_bound", not args.no_docs)
    return summaries


if __name__ == "__main__":
    main()
