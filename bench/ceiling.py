"""The chain and RNN workloads against a measured ceiling: the fastest hand-written alternative
(bench/models/variants.py) under jax.jit, timed in the same rounds as the original and the
optimized program; part of `python -m bench.cpu_speed`."""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
import numpy as np

from bench.models.variants import LABELS, alternatives
from bench.report import fmt_ratio, fmt_time, geomean
from bench.timing import interleaved_rounds
from validation.compare import output_error, tolerance_for

NOISE_BAND = 0.03  # slower than the original when original / optimized < 1 - NOISE_BAND
TARGET = 0.90  # the optimized program's speed as a fraction of the ceiling's


@dataclass(frozen=True)
class CeilingSettings:
    runs: int = 20  # interleaved rounds; the reported time is the median over them
    min_reps: int = 20  # calls per program per round, at least


def fresh_draw(flat: Sequence[Any], seed: int = 1) -> list[np.ndarray]:
    """New inputs of the examples' shapes and scales: a bias of zeros in the examples would hide an
    alternative that drops it."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(np.shape(a)) * (float(np.sqrt(np.mean(np.square(a)))) or 0.1))
            .astype(np.asarray(a).dtype) for a in flat]


def _worst_error(fn: Callable, reference: Callable, draws: Sequence[Sequence[Any]]) -> float:
    worst = 0.0
    for flat in draws:
        ref, out = jax.tree_util.tree_leaves(reference(*flat)), jax.tree_util.tree_leaves(fn(*flat))
        if len(ref) != len(out):
            return float("inf")
        worst = max(worst, *(output_error(a, b) for a, b in zip(ref, out)))
    return worst


def alternative_errors(alts: dict[str, Callable], reference: Callable,
                       draws: Sequence[Sequence[Any]]) -> dict[str, float]:
    """Each alternative's worst normwise error against `reference` over the input draws; raises
    where one computes something else, so no wrong variant sets a ceiling."""
    outputs = jax.tree_util.tree_leaves(reference(*draws[0]))
    tolerance = min(tolerance_for(str(np.asarray(o).dtype), "real") for o in outputs)
    errors = {name: _worst_error(fn, reference, draws) for name, fn in alts.items()}
    wrong = {name: e for name, e in errors.items() if not e <= tolerance}
    if wrong:
        raise AssertionError(f"hand-written alternatives differ from the original beyond {tolerance:g}: {wrong}")
    return errors


def ceiling_model(name: str, fn: Callable, args: Sequence[Any], original: Callable, optimized: Callable,
                  flat: list[Any], budget_s: float, settings: CeilingSettings, same_program: bool = False
                  ) -> dict[str, Any]:
    """`original` and `optimized` (jitted wire programs of the flat inputs) and each alternative of
    `fn(*args)`, timed together; the ceiling is the fastest alternative. Where the optimizer
    returned the original (`same_program`), their ratio is this machine's noise, not a verdict."""
    treedef = jax.tree_util.tree_structure(tuple(args))
    alts = {key: jax.jit(lambda *leaves, f=f: f(*jax.tree_util.tree_unflatten(treedef, leaves)))
            for key, f in alternatives(name, fn, args).items()}
    errors = alternative_errors(alts, original, [flat, [jax.device_put(a) for a in fresh_draw(flat)]])
    timed = interleaved_rounds({"original": original, **alts, "optimized": optimized}, flat, budget_s,
                               settings.runs, settings.min_reps)
    times = timed["times"]
    best = min(alts, key=lambda key: times[key]["median_s"])
    measured = times["original"]["median_s"] / times["optimized"]["median_s"]
    of_ceiling = times[best]["median_s"] / times["optimized"]["median_s"]
    verdict = "same program" if same_program else \
        "slower" if measured < 1 - NOISE_BAND else "faster" if measured > 1 + NOISE_BAND else "noise"
    return {"model": name, "runs": timed["runs"], "reps": timed["reps"], "original": times["original"],
            "alternatives": {key: times[key] for key in alts}, "alternative_errors": errors,
            "ceiling": {"alternative": best, **times[best]}, "optimized": times["optimized"],
            "of_ceiling": of_ceiling, "meets_target": of_ceiling >= TARGET, "measured": measured,
            "verdict": verdict}


def ceiling_safely(name: str, *args: Any) -> dict[str, Any]:
    try:
        return ceiling_model(name, *args)
    except Exception as err:  # noqa: BLE001 - reported in the table; the model's main row stands
        return {"model": name, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}


def summarize_ceiling(rows: list[dict[str, Any]], settings: CeilingSettings) -> dict[str, Any]:
    ok = [r for r in rows if "error" not in r]
    return {"target": TARGET, "noise_band": NOISE_BAND, "runs": settings.runs, "min_reps": settings.min_reps,
            "models": [r["model"] for r in rows], "errors": [r["model"] for r in rows if "error" in r],
            "geomean_of_ceiling": geomean(r["of_ceiling"] for r in ok),
            "below_target": [r["model"] for r in ok if not r["meets_target"]],
            "slower_beyond_noise": [r["model"] for r in ok if r["verdict"] == "slower"],
            # one program timed twice: how far apart this machine puts identical programs
            "same_program_range": [f(r["measured"] for r in ok if r["verdict"] == "same program")
                                   if any(r["verdict"] == "same program" for r in ok) else None for f in (min, max)]}


def _percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def ceiling_table(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    """The second table of the CPU benchmark: each chain/RNN model, its alternatives, ceiling and optimized."""
    lines = [f"Chains and RNNs against a measured ceiling: the fastest of the hand-written programs a "
             f"performance engineer would try under `jax.jit` (the program as written; a chain in its "
             f"flop-optimal parenthesisation; an RNN with every step's `x @ W_x` hoisted into one GEMM before "
             f"the recurrence, or with `x @ W_x + h @ W_h` as `concat(x, h) @ concat(W_x; W_h)`), each checked "
             f"against the original before it is timed. All timed together: the median of {summary['runs']} "
             f"interleaved rounds of at least {summary['min_reps']} calls each. `of ceiling`: ceiling time / "
             f"optimized time (target >= {_percent(summary['target'])}); `measured`: original / optimized, "
             f"slower beyond noise below {1 - summary['noise_band']:.2f}x.", "",
             f"Optimized speed as a share of the ceiling's, geometric mean: "
             f"**{_percent(summary['geomean_of_ceiling']) if summary['geomean_of_ceiling'] else 'n/a'}**; below "
             f"{_percent(summary['target'])} of the ceiling: {', '.join(summary['below_target']) or 'none'}; "
             f"slower than the original beyond noise: {', '.join(summary['slower_beyond_noise']) or 'none'}"
             + (f"; the same program timed twice (returned unchanged) measured "
                f"{fmt_ratio(summary['same_program_range'][0])}-{fmt_ratio(summary['same_program_range'][1])}, "
                f"this machine's noise beside the {1 - summary['noise_band']:.2f}x bound"
                if summary["same_program_range"][0] is not None else "") + ".", "",
             "| model | original | hand-written (median) | ceiling | optimized | of ceiling | measured "
             "| rounds x calls |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error'].splitlines()[0][:120]} | | | | | | |")
            continue
        alts = "; ".join(f"{LABELS.get(k, k)} {fmt_time(t['median_s'])}" for k, t in r["alternatives"].items())
        ceiling = r["ceiling"]
        lines.append(f"| {r['model']}{' (unchanged)' if r['verdict'] == 'same program' else ''} | "
                     f"{fmt_time(r['original']['median_s'])} | {alts} | {fmt_time(ceiling['median_s'])} "
                     f"({LABELS.get(ceiling['alternative'], ceiling['alternative'])}) | "
                     f"{fmt_time(r['optimized']['median_s'])} | **{_percent(r['of_ceiling'])}** | "
                     f"{fmt_ratio(r['measured'])} ({r['verdict']}) | {r['runs']} x {r['reps']} |")
    return "\n".join(lines)
