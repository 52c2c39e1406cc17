"""`python -m bench.attention`: attention at short and long context, blocks and whole layers.

Per row (an attention block, encoder or causal decoder, or BERT-base encoder layers; batch 1, 12
heads, head dim 64): the fair baseline's and the optimizer's estimates on `optu-v1` and
`gpu-roofline` (returned as ops, and with `lowering: "pallas"`), the speedup, optimized / lower
bound, the optimizer's wall time, and for the blocks that fit this machine, the measured time of
the returned program against `jax.jit` of the original (interleaved medians). Writes
bench/results/attention.json and the table in docs/benchmarks.md between `<!-- attention:begin -->`
and `<!-- attention:end -->`. Wall times are reported, never asserted.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from bench.models.large import bert_encoder
from bench.report import RESULTS_DIR, fmt_ratio, fmt_time, machine, machine_line, publish
from bench.timing import interleaved_medians
from service.optimizer.pipeline import optimize
from wire.capture import capture
from wire.execute import program_to_callable

RESULTS = RESULTS_DIR / "attention.json"
# column -> (profile, options): gpu-roofline as XLA runs the returned ops, and with each key-blocked
# attention returned as one fused Pallas kernel (`lowering: "pallas"`)
PROFILES = {"optu-v1": ("optu-v1", {}), "gpu-roofline": ("gpu-roofline", {}),
            "gpu-roofline pallas": ("gpu-roofline", {"lowering": "pallas"})}
LENGTHS = (128, 512, 2048, 8192, 32768)
HEADS, DEPTH = 12, 64
MEASURED_UP_TO = 2048  # longer scores do not fit this machine's memory for the float64 check and timing
# Measured elsewhere, on an NVIDIA H200 (causal, batch 1, 12 heads, head dim 64, float32): the
# original under jax.jit and a fused Pallas flash kernel; shown beside the estimates, not used by them.
H200_MS = {8192: (4.91, 2.47), 32768: (75.7, 27.8)}


def _attention(causal: bool) -> Callable:
    def fn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(DEPTH))
        if causal:
            n = q.shape[2]
            s = jnp.where(jnp.arange(n)[:, None] >= jnp.arange(n)[None, :], s, -jnp.inf)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)
    return fn


def _by_hand(causal: bool) -> Callable:
    """The same block rewritten by hand to jax.nn.dot_product_attention (its layout is [b, n, h, d])."""
    def fn(q, k, v):
        heads_second = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
        return heads_second(jax.nn.dot_product_attention(*map(heads_second, (q, k, v)), is_causal=causal))
    return fn


BY_HAND = {"encoder block": _by_hand(False), "decoder block (causal)": _by_hand(True)}


def workloads(n: int, layers: tuple[int, ...]) -> dict[str, tuple[Callable, tuple, tuple[int, ...]]]:
    rng = np.random.default_rng(n)
    qkv = tuple(rng.standard_normal((1, HEADS, n, DEPTH), np.float32) for _ in range(3))
    rows = {"encoder block": (_attention(False), qkv, ()), "decoder block (causal)": (_attention(True), qkv, ())}
    for count in layers:
        rows[f"BERT-base, {count} layer{'s' * (count > 1)}"] = bert_encoder(count, seq=n, batch=1)
    return rows


def _estimate(program: dict, hardware: str, options: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    response = optimize(program, hardware, {"validate": False, **options})
    wall = time.perf_counter() - start
    e = response["estimate"]
    return {"baseline_s": e["baseline"]["time_s"], "optimized_s": e["optimized"]["time_s"],
            "bound_s": e["lower_bound"]["time_s"], "speedup": e["speedup_vs_baseline"],
            "over_bound": e["optimized"]["time_s"] / e["lower_bound"]["time_s"], "wall_s": wall,
            "key_blocked": sum(k["kind"] == "key_blocked" for k in response["kernels"]),
            "program": response["program"]}


def _measure(fn: Callable, args: tuple, program: dict, budget_s: float, by_hand: Callable | None
             ) -> dict[str, float]:
    """This CPU: the returned program against the original, both under jax.jit, and against the
    block rewritten by hand to jax.nn.dot_product_attention."""
    flat = jax.tree.leaves(args)
    original = jax.jit(lambda *xs: fn(*jax.tree.unflatten(jax.tree.structure(args), xs)))
    returned = jax.jit(program_to_callable(program))
    timing = interleaved_medians(original, returned, flat, budget_s)
    jit_s, returned_s = timing["first"]["median_s"], timing["second"]["median_s"]
    row = {"jit_s": jit_s, "returned_s": returned_s, "jit_over_returned": jit_s / returned_s}
    if by_hand is not None:
        timing = interleaved_medians(jax.jit(by_hand), returned, flat, budget_s)
        row["by_hand_s"] = timing["first"]["median_s"]
        row["by_hand_over_returned"] = timing["first"]["median_s"] / timing["second"]["median_s"]
    return row


def measure(lengths: tuple[int, ...], layers: tuple[int, ...], budget_s: float) -> list[dict[str, Any]]:
    rows = []
    for n in lengths:
        for name, (fn, args, weights) in workloads(n, layers).items():
            program = capture(fn, *args, weight_argnums=weights)
            row: dict[str, Any] = {"workload": name, "n": n}
            returned = {}
            for column, (hardware, options) in PROFILES.items():
                row[column] = _estimate(program, hardware, options)
                returned[column] = row[column].pop("program")
            if n <= MEASURED_UP_TO and "block" in name:  # the program XLA runs on a GPU, as it would here
                row["cpu"] = _measure(fn, args, returned["gpu-roofline"], budget_s, BY_HAND.get(name))
            rows.append(row)
            print(name, n, {h: (round(row[h]["speedup"], 3), round(row[h]["over_bound"], 3)) for h in PROFILES},
                  flush=True)
    return rows


def table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["Attention, batch 1, 12 heads, head dim 64, float32: the fair baseline's and the optimizer's "
             "estimates, optimized / lower bound, and the optimizer's wall time on this machine "
             f"({machine_line(meta)}). `CPU`: the returned program's measured time against `jax.jit` of "
             "the original (interleaved medians; > 1: the returned program is faster), for the blocks "
             f"whose scores fit this machine (N <= {MEASURED_UP_TO}); `vs dpa`: against the same block "
             "rewritten by hand to `jax.nn.dot_product_attention`. `H200`: measured on an NVIDIA H200, "
             "causal, the original under jax.jit / a fused Pallas flash kernel (ms), not by this bench. "
             "`gpu-roofline`: the returned ops as XLA runs them; `pallas`: with each key-blocked attention "
             "returned as one fused Pallas kernel (`lowering: \"pallas\"`). "
             "Regenerate with `python -m bench.attention`.", "",
             "| workload | N | optu-v1 baseline | optimized | speedup | / bound | gpu-roofline speedup | / bound "
             "| pallas speedup | / bound | optimize wall | CPU | vs dpa | H200 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        optu, gpu, pallas = r["optu-v1"], r["gpu-roofline"], r["gpu-roofline pallas"]
        cpu = fmt_ratio(r["cpu"]["jit_over_returned"]) if "cpu" in r else "-"
        by_hand = fmt_ratio(r["cpu"]["by_hand_over_returned"]) if "by_hand_over_returned" in r.get("cpu", {}) else "-"
        h200 = "{:.2f} / {:.2f}".format(*H200_MS[r["n"]]) if "causal" in r["workload"] and r["n"] in H200_MS else "-"
        lines.append(
            f"| {r['workload']} | {r['n']} | {fmt_time(optu['baseline_s'])} | {fmt_time(optu['optimized_s'])} "
            f"| {fmt_ratio(optu['speedup'])} | {fmt_ratio(optu['over_bound'])} | {fmt_ratio(gpu['speedup'])} "
            f"| {fmt_ratio(gpu['over_bound'])} | {fmt_ratio(pallas['speedup'])} | {fmt_ratio(pallas['over_bound'])} "
            f"| {optu['wall_s']:.1f} s | {cpu} | {by_hand} | {h200} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    parser.add_argument("--layers", type=int, nargs="*", default=[1, 12], help="encoder depths to include")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of CPU timing per measured row")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(tuple(args.lengths), tuple(args.layers), args.budget)
    meta = machine()
    publish(args.out, {"machine": meta, "rows": rows}, table(rows, meta), "attention", not args.no_docs)
    return rows


if __name__ == "__main__":
    main()
