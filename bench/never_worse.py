"""`python -m bench.never_worse`: every bench model on every shipped profile, optimized estimate
against the fair baseline. It must never be above it; `kernels from` says whose kernels were
returned (the e-graph's extraction, a policy over the optimized program, or the baseline's program
where the gain was under the profile's `min_speedup`). Writes bench/results/never_worse.json and the
table in docs/benchmarks.md between `<!-- never_worse:begin -->`/`<!-- never_worse:end -->`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.models.registry import MODELS, capture_model
from bench.report import RESULTS_DIR, fmt_ratio, machine, machine_line, publish
from service.optimizer.pipeline import optimize

RESULTS = RESULTS_DIR / "never_worse.json"
PROFILES = ("optu-v1", "gpu-roofline", "cpu-host")


def measure(names: list[str], profiles: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        program, _ = capture_model(name)
        row: dict[str, Any] = {"model": name}
        for profile in profiles:
            response = optimize(program, profile)
            estimate = response["estimate"]
            row[profile] = {"speedup_vs_baseline": estimate["speedup_vs_baseline"],
                            "chosen": response["report"]["fusion"].get("chosen"),
                            "validation": response["validation"]["status"]}
        print(name, " ".join(f"{p} {row[p]['speedup_vs_baseline']:.3f}x" for p in profiles), flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], profiles: list[str], meta: dict[str, Any]) -> str:
    below = [(r["model"], p) for r in rows for p in profiles if r[p]["speedup_vs_baseline"] < 1 - 1e-9]
    lines = [f"Optimized estimate over the fair baseline on every shipped profile ({machine_line(meta)}); "
             f"below 1.00x anywhere: {', '.join(f'{m} on {p}' for m, p in below) or 'none'}. "
             "Regenerate with `python -m bench.never_worse`.", "",
             "| model | " + " | ".join(profiles) + " |", "|---|" + "---|" * len(profiles)]
    for r in rows:
        cells = " | ".join(f"{fmt_ratio(r[p]['speedup_vs_baseline'])} ({r[p]['chosen']}, {r[p]['validation']})"
                           for p in profiles)
        lines.append(f"| {r['model']} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--profiles", nargs="*", default=list(PROFILES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    rows, meta = measure(args.models, args.profiles), machine()
    publish(args.out, {"machine": meta, "profiles": args.profiles, "models": rows},
            table(rows, args.profiles, meta), "never_worse", not args.no_docs)
    return rows


if __name__ == "__main__":
    main()
