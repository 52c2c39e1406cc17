"""`python -m bench.decode`: a decode step with a KV cache, as a serving loop runs it.

The plain-JAX decoder of bench/models/kv_decoder.py (hidden 256, 4 heads, 2 layers, vocab 512),
its step jitted with a preallocated cache of 128, 1024 and 4096 positions and the token at the
last one. Per length: the step's time on this CPU through the jit client (the returned program,
its weight-only work run once) against `jax.jit` of the step, in interleaved rounds; the
estimate of the returned program against the fair baseline and the lower bound on optu-v1 and
gpu-roofline. The same for PyTorch: a Hugging Face GPT-2 of the same sizes, its step on a static
cache of that length through `optimize` (the returned callable, its cache written in place)
against eager, every call at the last position. Writes bench/results/decode.json and the table in
docs/benchmarks.md between `<!-- decode:begin/end -->`.
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
    row.update(torch_step(length, budget_s))
    print(f"L={length}: jax.jit {fmt_time(row['jax_jit_s'])}, optimized {fmt_time(row['optimized_s'])}; "
          f"eager {fmt_time(row['eager_s'])}, optimized {fmt_time(row['torch_optimized_s'])}", flush=True)
    return row


def torch_step(length: int, budget_s: float) -> dict[str, Any]:
    """GPT-2's decode step at the last position of a static cache, eager against the callable
    `optimize` returns (optimized for cpu-host), in interleaved rounds."""
    import torch
    import transformers

    config = transformers.GPT2Config(vocab_size=512, n_embd=256, n_layer=2, n_head=4, n_positions=length)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    cache = transformers.StaticCache(config=config, max_cache_len=length)
    step = {"input_ids": torch.tensor([[7]]), "past_key_values": cache,
            "cache_position": torch.tensor([length - 1]), "use_cache": True}

    def wind_back():  # each call writes the last row and counts a token: every call at the last position
        for layer in cache.layers:
            layer.cumulative_length.fill_(length - 1)

    def at_last_position(run):
        return lambda: (wind_back(), run(**step).logits)[1]

    with torch.no_grad():
        model(**step)  # the static cache allocates its tensors on its first update
        wind_back()
        result = optimize(model, **step, hardware="cpu-host")
        fns = {"eager": at_last_position(model), "optimized": at_last_position(result.fn)}
        times = interleaved_rounds(fns, (), budget_s, runs=5, min_reps=10)["times"]
    return {"eager_s": times["eager"]["median_s"], "torch_optimized_s": times["optimized"]["median_s"],
            "torch_validation": result.response["torch_validation"]["status"]}


def table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Decode step with a KV cache (JAX: bench/models/kv_decoder.py; PyTorch: a Hugging Face GPT-2 on a "
             f"static cache; both hidden 256, 4 heads, 2 layers), measured on {machine_line(meta)}; CPU: the "
             f"step through the jit client or `optimize` (optimized for cpu-host) against jax.jit or eager, "
             f"medians of interleaved rounds, > 1 means the optimized step is faster. Regenerate with "
             f"`python -m bench.decode`.", "",
             "| cache length | jax.jit | optimized | CPU ratio | torch eager | optimized | CPU ratio "
             "| optu-v1 speedup | / bound | gpu-roofline speedup | / bound |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e = r["estimates"]
        lines.append(
            f"| {r['length']} | {fmt_time(r['jax_jit_s'])} | {fmt_time(r['optimized_s'])} | "
            f"{fmt_ratio(r['jax_jit_s'] / r['optimized_s'])} | {fmt_time(r['eager_s'])} | "
            f"{fmt_time(r['torch_optimized_s'])} | {fmt_ratio(r['eager_s'] / r['torch_optimized_s'])} | "
            + " | ".join(
                f"{fmt_ratio(e[p]['speedup_vs_baseline'])} | {fmt_ratio(e[p]['optimized_over_bound'])} "
                f"({e[p]['binding']})"
                for p in PROFILES
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    parser.add_argument("--budget-s", type=float, default=4.0, help="timing budget per length")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "decode.json")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    meta = machine()
    rows = [measure(length, args.budget_s) for length in args.lengths]
    payload = {"machine": meta, "rows": rows}
    publish(args.out, payload, table(rows, meta), "decode", docs=not args.no_docs)
    return payload


if __name__ == "__main__":
    main()
