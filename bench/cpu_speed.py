"""`python -m bench.cpu_speed`: real speed on this CPU, optimized vs original, both under jax.jit.

Each model is optimized for the `cpu-host` profile; the original and the optimized wire program
are jitted in the same process and fed the model's own example inputs. After warm-up (compile plus
one run each), calls alternate original/optimized in ABBA order, so drift (other processes, CPU
frequency) hits both alike; the ratio is median(original) / median(optimized), > 1 meaning the
optimized program is faster. XLA is the baseline users already have. A plain jit recomputes
weight-only work on every call; the client's `jit(weight_argnums=...)` runs it once per weight set
(lowering/precompute.py), so a second ratio ("hoisted") times both programs with their weight-only
values computed ahead.

The chain and RNN workloads are also held to a measured ceiling: the fastest of the hand-written
alternatives a performance engineer would try under jax.jit (bench/models/variants.py), each
checked against the original first, timed in rounds with the original and the optimized program.
Writes bench/results/cpu_speed.json and the tables in docs/benchmarks.md between `<!-- cpu_speed:begin/end -->`.
"""
from __future__ import annotations

import argparse
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from bench.ceiling import CeilingSettings, ceiling_safely, ceiling_table, summarize_ceiling
from bench.models.heldout import HELDOUT
from bench.models.registry import MODELS, build
from bench.models.variants import MODELS_WITH_ALTERNATIVES
from bench.report import RESULTS_DIR, fmt_ratio, fmt_time, geomean, machine, machine_line, publish, rank_agreement
from bench.timing import interleaved_medians, timed
from costmodel.profile import load_profile
from lowering.kernels import gemm_flops
from lowering.precompute import split_weight_work
from service.optimizer.pipeline import optimize
from validation.compare import output_error
from wire.capture import capture
from wire.execute import program_to_callable

RESULTS = RESULTS_DIR / "cpu_speed.json"
HELDOUT_RESULTS = RESULTS_DIR / "cpu_speed_heldout.json"
HARDWARE = "cpu-host"
NOISE = 1.05  # the main table: never slower than the original beyond this
CLOCK_TOLERANCE = 0.2  # an estimated speedup this close to the measured one predicts it


def _hoisted(program: dict[str, Any], flat: list[Any]) -> tuple[Callable, list[Any]]:
    precompute, per_call = split_weight_work(program)
    ahead = jax.block_until_ready(jax.jit(program_to_callable(precompute))(*flat)) if precompute["outputs"] else []
    return jax.jit(program_to_callable(per_call)), [*flat, *ahead]


def peak_gemm_rate(sizes: tuple[int, ...] = (1024, 2048), reps: int = 5) -> float:
    """This CPU's best matmul rate under jax.jit (flop/s, the fastest of `reps` square products of
    each size): what no program's contractions can beat, whatever order or grouping they take."""
    product, best = jax.jit(lambda x, y: x @ y), 0.0
    for size in sizes:
        a = jax.device_put(np.random.default_rng(0).standard_normal((size, size), dtype=np.float32))
        timed(product, (a, a))
        best = max(best, 2.0 * size**3 / min(timed(product, (a, a)) for _ in range(reps)))
    return best


def speed_model(name: str, budget_s: float = 2.0, peak_flops_per_s: float | None = None,
                settings: CeilingSettings | None = None) -> dict[str, Any]:
    fn, args, weights = build(name)
    program = capture(fn, *args, weight_argnums=weights)
    start = time.perf_counter()
    response = optimize(program, HARDWARE)
    optimize_s = time.perf_counter() - start
    flat = [jax.device_put(a) for a in jax.tree_util.tree_leaves(args)]
    original = jax.jit(program_to_callable(program))
    optimized = jax.jit(program_to_callable(response["program"]))
    stats = interleaved_medians(original, optimized, flat, budget_s)
    # The same inputs through both: a sanity check on the example data, not the validation.
    agreement = max((output_error(a, b) for a, b in zip(original(*flat), optimized(*flat))), default=0.0)
    ratio = stats["first"]["median_s"] / stats["second"]["median_s"]
    (orig_fn, orig_args), (opt_fn, opt_args) = _hoisted(program, flat), _hoisted(response["program"], flat)
    hoisted = interleaved_medians(lambda *_: orig_fn(*orig_args), lambda *_: opt_fn(*opt_args), (), budget_s)
    est, profile = response["estimate"], load_profile(HARDWARE)
    flops = {"original": gemm_flops(program, profile), "optimized": gemm_flops(response["program"], profile)}
    # Were the optimized program's contractions free of every other cost and run at the peak rate:
    # the most any program with its contractions could gain. Where it is small, the contractions
    # themselves (which no exact rewrite removes) already take most of the original's time.
    compute_ceiling = stats["first"]["median_s"] * peak_flops_per_s / flops["optimized"] \
        if peak_flops_per_s and flops["optimized"] else None
    row = {"model": name, "same_program": response["program"] == program, "optimize_wall_s": optimize_s,
           "validation": response["validation"]["status"], "max_rel_error_example_inputs": agreement,
           "original": stats["first"], "optimized": stats["second"], "reps": stats["reps"],
           "compile_and_first_run_s": stats["compile_and_first_run_s"], "speedup_measured": ratio,
           "slower_beyond_noise": ratio < 1 / NOISE and response["program"] != program,
           "hoisted": {"original": hoisted["first"], "optimized": hoisted["second"], "reps": hoisted["reps"],
                       "speedup_measured": hoisted["first"]["median_s"] / hoisted["second"]["median_s"]},
           "estimate": {"baseline_s": est["baseline"]["time_s"], "optimized_s": est["optimized"]["time_s"],
                        "speedup": est["speedup_vs_baseline"]},
           "gemm_flops": flops, "compute_ceiling": compute_ceiling}
    if settings is not None and name in MODELS_WITH_ALTERNATIVES:
        row["ceiling"] = ceiling_safely(name, fn, args, original, optimized, flat, budget_s, settings,
                                        row["same_program"])
    return row


def client_precompute(budget_s: float) -> dict[str, Any]:
    """A LoRA-merged layer, `x @ (w + a @ b)` with the weights fixed, through the client's `jit`
    (optu-v1 prices the weight-only `w + a @ b` once per weight set, and the client runs it so)
    against a plain jax.jit, which recomputes it on every call."""
    from service.client import jit

    rng = np.random.default_rng(7)
    x, w, a, b = (jax.device_put(rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0]))
                  for shape in ((8, 1024), (1024, 1024), (1024, 16), (16, 1024)))
    layer = lambda x, w, a, b: jax.nn.relu(x @ (w + a @ b))
    plain, ours = jax.jit(layer), jit(layer, weight_argnums=(1, 2, 3), on_error="raise")
    stats = interleaved_medians(plain, ours, (x, w, a, b), budget_s)
    return {"workload": "relu(x @ (w + a @ b)), x 8x1024, w 1024x1024, a 1024x16, b 16x1024",
            "plain_jit": stats["first"], "client_jit": stats["second"], "reps": stats["reps"],
            "speedup_measured": stats["first"]["median_s"] / stats["second"]["median_s"],
            "precompute_runs": ours.last_result.precomputed.precompute_runs if ours.last_result.precomputed else 0,
            "max_rel_error": output_error(plain(x, w, a, b), ours(x, w, a, b))}


def speed_safely(name: str, budget_s: float, peak_flops_per_s: float,
                 settings: CeilingSettings | None = None) -> dict[str, Any]:
    try:
        return speed_model(name, budget_s, peak_flops_per_s, settings)
    except Exception as err:  # noqa: BLE001 - reported, the other models still run
        return {"model": name, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}


def summarize(rows: list[dict[str, Any]], peak_flops_per_s: float) -> dict[str, Any]:
    ok = [r for r in rows if "error" not in r]
    return {"models": len(rows), "errors": len(rows) - len(ok), "peak_gemm_flops_per_s": peak_flops_per_s,
            "geomean_speedup_measured": geomean(r["speedup_measured"] for r in ok),
            "geomean_speedup_hoisted": geomean(r["hoisted"]["speedup_measured"] for r in ok),
            "slower_beyond_noise": [r["model"] for r in ok if r["slower_beyond_noise"]],
            # the original returned: the two timings are of one program, so their ratio is noise
            "noise_range_unchanged": [min((r["speedup_measured"] for r in ok if r["same_program"]), default=None),
                                      max((r["speedup_measured"] for r in ok if r["same_program"]), default=None)],
            "unchanged": [r["model"] for r in ok if r["same_program"]],
            **estimates_against_clock(ok)}


def estimates_against_clock(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How well `cpu-host`'s estimated speedups predict the measured ones: their rank correlation
    (over every model, and over those whose program changed: an unchanged one's ratio is noise) and
    the models measured more than CLOCK_TOLERANCE away from their estimate."""
    estimated, measured = [r["estimate"]["speedup"] for r in rows], [r["speedup_measured"] for r in rows]
    return {**rank_agreement(estimated, measured, [not r["same_program"] for r in rows]),
            "off_estimate": [r["model"] for r in rows
                             if abs(r["speedup_measured"] / r["estimate"]["speedup"] - 1) > CLOCK_TOLERANCE]}


def _client_line(client: dict[str, Any]) -> str:
    return (
        f"Through the client's `jit(weight_argnums=...)`, weight-only work runs once per weight set: "
        f"`{client['workload']}` (LoRA weights merged on every call by a plain `jax.jit`) takes "
        f"{fmt_time(client['plain_jit']['median_s'])} per call under `jax.jit` and "
        f"{fmt_time(client['client_jit']['median_s'])} through the client, **{fmt_ratio(client['speedup_measured'])}** "
        f"(weight-only part run {client['precompute_runs']} time(s) in {client['reps'] + 2} calls; "
        f"max rel error {client['max_rel_error']:.1e})."
    )


def _noise(summary: dict[str, Any]) -> str:
    low, high = summary["noise_range_unchanged"]
    return "none" if low is None else f"{fmt_ratio(low)}-{fmt_ratio(high)}"


def _flop(count: float) -> str:
    return next(f"{count / scale:.3g} {unit}" for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""))
                if count >= scale or scale == 1)


def table(rows: list[dict[str, Any]], meta: dict[str, Any], summary: dict[str, Any]) -> str:
    lines = [f"Measured under `jax.jit` on {machine_line(meta)}; optimized for `{HARDWARE}`. Median of "
             "interleaved runs after warm-up; ratio > 1 means the optimized program is faster. Regenerate "
             "with `python -m bench.cpu_speed`.", "",
             f"Geometric-mean measured speedup: **{fmt_ratio(summary['geomean_speedup_measured'])}** "
             f"({fmt_ratio(summary['geomean_speedup_hoisted'])} with weight-only work hoisted); slower than "
             f"the original beyond {NOISE}x noise: {', '.join(summary['slower_beyond_noise']) or 'none'}; "
             f"returned unchanged (the estimate's gain was under `cpu-host`'s min_speedup, or none was "
             f"found): {', '.join(summary['unchanged']) or 'none'}; their two timings are of one program, "
             f"so their ratios, {_noise(summary)}, are this machine's noise.", "",
             f"Estimated (`cpu-host`) against measured speedups: rank correlation "
             f"**{summary['spearman']:.2f}** over {summary['models'] - summary['errors']} models, "
             f"{summary['spearman_changed']:.2f} over the {summary['changed']} whose program changed; measured more "
             f"than {CLOCK_TOLERANCE:.0%} away from the estimate: {', '.join(summary['off_estimate']) or 'none'}.", "",
             f"`GEMM flop`: the contractions' work, original → optimized (reordering a chain changes it; "
             f"merging or fusing does not). `compute ceiling`: original time over the optimized contractions at this "
             f"CPU's peak matmul rate ({summary['peak_gemm_flops_per_s'] / 1e9:.0f} GFLOP/s, the best 1024^3 or "
             f"2048^3 product): "
             f"the most any program doing that work could gain, with everything else free.", "",
             _client_line(summary["client_precompute"]), "",
             "| model | original (median, p25-p75) | optimized (median, p25-p75) | measured | hoisted "
             "| estimated (cpu-host) | GEMM flop | compute ceiling | runs | validation |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error'][:80]} | | | | | | | | |")
            continue
        o, p = r["original"], r["optimized"]
        lines.append(
            f"| {r['model']}{' (unchanged)' if r['same_program'] else ''} | {fmt_time(o['median_s'])} "
            f"({fmt_time(o['p25_s'])}-{fmt_time(o['p75_s'])}) | {fmt_time(p['median_s'])} "
            f"({fmt_time(p['p25_s'])}-{fmt_time(p['p75_s'])}) | **{fmt_ratio(r['speedup_measured'])}** | "
            f"{fmt_ratio(r['hoisted']['speedup_measured'])} | "
            f"{fmt_ratio(r['estimate']['speedup'])} | {_flop(r['gemm_flops']['original'])} → "
            f"{_flop(r['gemm_flops']['optimized'])} | "
            f"{fmt_ratio(r['compute_ceiling']) if r['compute_ceiling'] else 'n/a'} | {r['reps']} | {r['validation']} |"
        )
    return "\n".join(lines)


def _progress(row: dict[str, Any]) -> str:
    line = f"{row['model']}: " + (row["error"] if "error" in row else f"{row['speedup_measured']:.2f}x measured")
    c = row.get("ceiling")
    if c:
        line += f"; ceiling: {c['error']}" if "error" in c else \
            f"; {c['of_ceiling']:.0%} of the ceiling, {c['measured']:.2f}x measured ({c['verdict']})"
    return line


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=None, help="default: the bench's models, or with --heldout "
                                                                   "the held-out ones")
    parser.add_argument("--heldout", action="store_true",
                        help="the workloads no estimate was tuned on (bench/models/heldout.py), without the ceiling "
                             f"table, into {HELDOUT_RESULTS.name} and the held-out table in docs/benchmarks.md")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed runs per model")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--ceiling-runs", type=int, default=CeilingSettings.runs,
                        help="interleaved rounds for the chain/RNN ceiling table (at least 2)")
    parser.add_argument("--ceiling-reps", type=int, default=CeilingSettings.min_reps,
                        help="calls per program per round, at least (more where --budget allows)")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the chain/RNN ceiling table")
    parser.add_argument("--measurement-settings", action="store_true",
                        help="synchronous dispatch and single-threaded Eigen, as `optu calibrate` measures "
                             "(default: JAX's defaults, what users run)")
    args = parser.parse_args(argv)
    if args.ceiling_runs < 2 or args.ceiling_reps < 1:
        parser.error("--ceiling-runs needs at least 2 rounds and --ceiling-reps at least 1 call")
    settings = None if args.no_ceiling or args.heldout else CeilingSettings(args.ceiling_runs, args.ceiling_reps)
    models = args.models if args.models is not None else list(HELDOUT if args.heldout else MODELS)
    out = args.out or (HELDOUT_RESULTS if args.heldout else RESULTS)
    if args.measurement_settings:
        from costmodel.calibrate import apply_measurement_settings
        apply_measurement_settings()  # before the first computation creates the CPU client
    rows, peak = [], peak_gemm_rate()
    for name in models:
        rows.append(speed_safely(name, args.budget, peak, settings))
        print(_progress(rows[-1]), flush=True)
    meta, summary = machine(), summarize(rows, peak)
    summary["client_precompute"] = client = client_precompute(args.budget)
    print(f"client precompute: {client['speedup_measured']:.2f}x measured", flush=True)
    ceilings = [r["ceiling"] for r in rows if "ceiling" in r]
    text = table(rows, meta, summary)
    if args.heldout:
        text = ("Held-out workloads (`bench/models/heldout.py`: written afresh, no estimate tuned on them; "
                "`python -m bench.cpu_speed --heldout`).\n\n" + text)
    if ceilings:
        summary["ceiling"] = summarize_ceiling(ceilings, settings)
        text += "\n\n" + ceiling_table(ceilings, summary["ceiling"])
    publish(out, {"hardware": HARDWARE, "machine": meta, "measurement_settings": args.measurement_settings,
                  "summary": summary, "models": rows}, text, "cpu_speed_heldout" if args.heldout else "cpu_speed",
            not args.no_docs)
    return {"summary": summary, "models": rows}


if __name__ == "__main__":
    main()
