"""Causal attention on an NVIDIA GPU: the original under `jax.jit`, the optimizer's program for
`gpu-roofline` with `lowering: "pallas"` (one fused Pallas kernel, through Triton), and
`jax.nn.dot_product_attention` (batch 1, 12 heads, head dim 64, float32 and bfloat16).

Two steps, since a GPU machine typically has JAX but not this project's optimizer:
  python -m bench.attention_gpu prepare [--lengths 2048 8192 32768]   # here: optimize, write programs
  python -m bench.attention_gpu time                                   # there: time them, write the table
`time` needs JAX, NumPy, pydantic and this repository's `wire/` only; it takes under 5 minutes
and writes bench/results/attention_gpu.json. Off a GPU it refuses (Pallas would only interpret).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

RESULTS = Path(__file__).parent / "results"
PROGRAMS = RESULTS / "attention_gpu_programs"
HEADS, DEPTH = 12, 64
DTYPES = ("float32", "bfloat16")


def causal(q, k, v):
    """Causal attention as a model writes it: [batch, heads, n, depth]."""
    n = q.shape[2]
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(DEPTH)).astype(q.dtype)
    s = jnp.where(jnp.arange(n)[:, None] >= jnp.arange(n)[None, :], s, jnp.finfo(q.dtype).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


def by_library(q, k, v):
    swap = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
    return swap(jax.nn.dot_product_attention(swap(q), swap(k), swap(v), is_causal=True))


def prepare(lengths: list[int], programs: Path = PROGRAMS) -> None:
    from service.optimizer.pipeline import optimize
    from wire.capture import capture

    programs.mkdir(parents=True, exist_ok=True)
    for n in lengths:
        for dtype in DTYPES:
            spec = jax.ShapeDtypeStruct((1, HEADS, n, DEPTH), jnp.dtype(dtype))
            program = capture(causal, spec, spec, spec)
            response = optimize(program, "gpu-roofline", {"validate": False, "lowering": "pallas"})
            fused = sum(e["op"] == "flash_attention" for e in response["program"]["eqns"])
            (programs / f"causal_{n}_{dtype}.json").write_text(json.dumps(
                {"n": n, "dtype": dtype, "original": program, "returned": response["program"], "fused_kernels": fused,
                 "estimated_speedup": response["estimate"]["speedup_vs_baseline"]}))
            print(
                f"N={n} {dtype}: {fused} fused kernel(s), estimated {response['estimate']['speedup_vs_baseline']:.2f}x"
            )


def _median_s(fn: Callable, args: list, budget_s: float) -> float:
    jax.block_until_ready(fn(*args))  # compile and warm up
    times, started = [], time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - started < budget_s and len(times) < 200):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def time_programs(budget_s: float, programs: Path = PROGRAMS, out: Path | None = RESULTS / "attention_gpu.json",
                  require_gpu: bool = True) -> list[dict[str, Any]]:
    from wire.execute import jitted_program

    if require_gpu and jax.default_backend() != "gpu":
        raise SystemExit("no GPU: Pallas kernels only interpret here, so their time means nothing")
    rows = []
    for path in sorted(programs.glob("causal_*.json")):
        case = json.loads(path.read_text())
        rng = np.random.default_rng(0)
        args = [jnp.asarray(rng.standard_normal((1, HEADS, case["n"], DEPTH)), case["dtype"]) for _ in range(3)]
        original, returned = jitted_program(case["original"]), jitted_program(case["returned"])
        row = {"n": case["n"], "dtype": case["dtype"], "fused_kernels": case["fused_kernels"],
               "estimated_speedup": case["estimated_speedup"],
               "original_s": _median_s(original, args, budget_s), "returned_s": _median_s(returned, args, budget_s),
               "library_s": _median_s(jax.jit(by_library), args, budget_s),
               "max_abs_diff": float(jnp.max(jnp.abs(original(*args)[0].astype(jnp.float32)
                                                      - returned(*args)[0].astype(jnp.float32))))}
        rows.append(row)
        print(f"N={row['n']} {row['dtype']}: original {row['original_s'] * 1e3:.2f} ms, returned "
              f"{row['returned_s'] * 1e3:.2f} ms ({row['original_s'] / row['returned_s']:.2f}x; estimated "
              f"{row['estimated_speedup']:.2f}x), dot_product_attention {row['library_s'] * 1e3:.2f} ms, "
              f"max |diff| {row['max_abs_diff']:.2e}", flush=True)
    if out is not None:
        out.write_text(json.dumps({"device": str(jax.devices()[0]), "rows": rows}, indent=1))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["prepare", "time"])
    parser.add_argument("--lengths", type=int, nargs="*", default=[2048, 8192, 32768])
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timing per program")
    args = parser.parse_args(argv)
    prepare(args.lengths) if args.step == "prepare" else time_programs(args.budget)


if __name__ == "__main__":
    main()
