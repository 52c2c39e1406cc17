"""`python -m bench.decode`: a decode step with a KV cache, as a serving loop runs it.

The plain-JAX decoder of bench/models/kv_decoder.py (hidden 256, 4 heads, 2 layers, vocab 512),
its step jitted with a preallocated cache of 128, 1024 and 4096 positions and the token at the
last one. Per length: the step's time on this CPU through the jit client (the returned program,
its weight-only work run once) against `jax.jit` of the step, in interleaved rounds; the
estimate of the returned program against the fair baseline and the lower bound on optu-v1 and
gpu-roofline. Writes bench/results/decode.json and the README table between
`<!-- decode:begin/end -->`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from bench.models.kv_decoder import KVDecoder
from bench.report import RESULTS_DIR, fmt_ratio, fmt_time, machine, machine_line, publish
from bench.timing import interleaved_rounds
from service.client import jit, optimize

LENGTHS = (128, 1024, 4096)
PROFILES = ("optu-v1", "gpu-roofline")


def measure(length: int, budget_s: float) -> dict[str, Any]:
    decoder = KVDecoder(vocab=512, hidden=256, heads=4, layers=2, length=length)
    params = decoder.params()
    args = (params, decoder.empty_cache() + 0.1, decoder.empty_cache() - 0.1, jnp.int32(7), jnp.int32(length - 1))
    optimized = jit(decoder.step, weight_argnums=0, hardware="cpu-host")
    optimized(*args)  # optimizes, once for every position
    times = interleaved_rounds({"jax.jit": jax.jit(decoder.step), "optimized": optimized}, args, budget_s,
                               runs=5, min_reps=10)["times"]
    row = {"length": length, "jax_jit_s": times["jax.jit"]["median_s"], "optimized_s": times["optimized"]["median_s"],
           "cpu_validation": optimized.last_result.validation["status"], "estimates": {}}
    for hardware in PROFILES:
        estimate = optimize(decoder.step, *args, weight_argnums=(0,), hardware=hardware, validate=False).estimate
        row["estimates"][hardware] = {"speedup_vs_baseline": estimate["speedup_vs_baseline"],
                                      "optimized_s": estimate["optimized"]["time_s"],
                                      "optimized_over_bound": estimate["optimized_over_bound"],
                                      "binding": estimate["lower_bound"]["binding"]}
    print(f"L={length}: jax.jit {fmt_time(row['jax_jit_s'])}, optimized {fmt_time(row['optimized_s'])}", flush=True)
    return row


def table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Decode step with a KV cache (bench/models/kv_decoder.py: hidden 256, 4 heads, 2 layers), "
             f"measured on {machine_line(meta)}; CPU: the step through the jit client (optimized for "
             f"cpu-host) against jax.jit, medians of interleaved rounds, > 1 means the optimized step is "
             f"faster. Regenerate with `python -m bench.decode`.", "",
             "| cache length | jax.jit | optimized | CPU ratio | optu-v1 speedup | / bound | gpu-roofline speedup | / bound |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e = r["estimates"]
        lines.append(f"| {r['length']} | {fmt_time(r['jax_jit_s'])} | {fmt_time(r['optimized_s'])} | "
                     f"{fmt_ratio(r['jax_jit_s'] / r['optimized_s'])} | "
                     + " | ".join(f"{fmt_ratio(e[p]['speedup_vs_baseline'])} | {fmt_ratio(e[p]['optimized_over_bound'])} "
                                  f"({e[p]['binding']})" for p in PROFILES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    parser.add_argument("--budget-s", type=float, default=4.0, help="timing budget per length")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "decode.json")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    meta = machine()
    rows = [measure(length, args.budget_s) for length in args.lengths]
    payload = {"machine": meta, "rows": rows}
    publish(args.out, payload, table(rows, meta), "decode", readme=not args.no_readme)
    return payload


if __name__ == "__main__":
    main()
