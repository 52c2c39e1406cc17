"""`python -m bench.mutation`: can validation tell a wrong program? Every registry model is
optimized, 20 deterministic single-point mutants of the optimized program are made
(bench/mutants.py), and each is validated against the original. A mutant validation reports
`passed` that random testing does not show to compute the original's function is a soundness bug;
the score is caught (failed) over the mutants that are not observably equivalent. Writes
bench/results/mutation.json and the table in docs/benchmarks.md between `<!-- mutation:begin/end -->`."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.models.registry import MODELS, capture_model
from bench.mutants import mutation_score
from bench.report import RESULTS_DIR, machine, machine_line, publish
from service.client import optimize_program

RESULTS = RESULTS_DIR / "mutation.json"
TARGET = 0.95


def score_model(name: str) -> dict:
    program, _ = capture_model(name)
    optimized = optimize_program(program)["program"]
    start = time.perf_counter()
    score = mutation_score(program, optimized)
    row = {"model": name, **score, "validate_s": round(time.perf_counter() - start, 2)}
    print(f"{name}: {row['caught']}/{row['mutants']} caught, {len(row['equivalent'])} equivalent, "
          f"{row['validate_s']:.1f} s", flush=True)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | mutants | caught | observably equivalent | score | raw score | wrongly passed | not caught |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        score = "-" if r["score"] is None else f"{r['score']:.0%}"
        raw = "-" if r["raw_score"] is None else f"{r['raw_score']:.0%}"
        missed = "; ".join(f"{what}: {status}" for what, status in r["missed"]) or "-"
        lines.append(f"| {r['model']} | {r['mutants']} | {r['caught']} | {len(r['equivalent'])} | {score} | {raw} | "
                     f"{len(r['wrongly_passed'])} | {missed} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=None, help=f"default: all of {', '.join(MODELS)}")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    rows = [score_model(name) for name in (args.models or MODELS)]
    low = [r["model"] for r in rows if r["score"] is not None and r["score"] < TARGET]
    wrong = [r["model"] for r in rows if r["wrongly_passed"]]
    text = (
        f"Mutation testing of validation on {machine_line(machine())}. Regenerate with `python -m bench.mutation`.\n\n"
        f"{table(rows)}\n\nBelow {TARGET:.0%}: {', '.join(low) or 'none'}. "
        f"A mutant that is not observably equivalent reported passed: {', '.join(wrong) or 'none'}."
    )
    publish(args.out, {"machine": machine(), "target": TARGET, "models": rows}, text, "mutation",
            docs=not args.no_docs)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
