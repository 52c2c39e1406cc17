"""`python -m bench.assumptions`: how much the headline rests on numbers nobody measured.

The headline is the geometric-mean estimated speedup of every registry model over the fair
baseline on `optu-v1`. It is recomputed with each of the profile's assumed numbers (its
`[provenance]` says which) at x0.5 and x2, the others as shipped: `kernel.max_gemms` at 1, 4 and
16 and the launch overhead at 0.5, 1, 2 and 5 us instead. Assumed zeros (per-op and per-buffer
overheads the profile says the OPTU does not have) have no x0.5 or x2: they are tried at 0.1 and
1 us. Each point is a whole optimization of every model (the chosen program may change with the
hardware), with validation off (it does not change an estimate); the points run on two
processes. Writes bench/results/assumptions.json and the table in docs/benchmarks.md between
`<!-- assumptions:begin/end -->`.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.models.registry import MODELS, capture_model
from bench.report import RESULTS_DIR, geomean, machine, machine_line, publish
from costmodel.profile import HardwareProfile, load_profile, with_overrides
from costmodel.provenance import assumed

RESULTS = RESULTS_DIR / "assumptions.json"
PROFILE = "optu-v1"
FACTORS = (0.5, 2.0)
SETS = {"kernel.max_gemms": (1, 4, 16), "kernel.launch_overhead_s": (0.5e-6, 1e-6, 2e-6, 5e-6)}
ZERO_ALTERNATIVES = (1e-7, 1e-6)  # seconds: for assumed zero overheads
UPPER_BOUNDS = {"gemm.weight_load_overlap": 1.0}  # a fraction
# Not swept, with the reason: extraction minimizes time, so numbers that only price energy cannot
# change the chosen program or the time headline; the converter widths are descriptive (no formula
# reads them).
ENERGY_ONLY = ("_energy_j", "energy_per_flop_j", "energy_per_byte_j", "laser_power_w")
DESCRIPTIVE = ("gemm.dac_bits", "gemm.adc_bits")


def not_swept(name: str) -> str | None:
    if name.endswith(ENERGY_ONLY):
        return "prices energy only: extraction minimizes time, so the chosen programs and the time headline cannot move"
    if name in DESCRIPTIVE:
        return "descriptive: no cost formula reads it"
    return None


def swept(profile: HardwareProfile) -> dict[str, Any]:
    """The assumed numbers that can move the time headline, by dotted field."""
    return {name: value for name, value in assumed(profile).items() if not not_swept(name)}


def sweep_points(profile: HardwareProfile) -> list[tuple[str, str, dict[str, Any]]]:
    """(assumption, setting, overrides) for every point, the profile as shipped first."""
    points: list[tuple[str, str, dict[str, Any]]] = [("as shipped", "", {})]
    for name, value in swept(profile).items():
        if name in SETS:
            settings = [(f"{v:.3g}", v) for v in SETS[name] if v != value]
        elif value == 0:
            settings = [(f"{v:.3g} s", v) for v in ZERO_ALTERNATIVES]
        else:
            settings = [(f"x{f:g}", _scaled(name, value, f)) for f in FACTORS]
        points += [(name, setting, {name: v}) for setting, v in settings]
    return points


def _scaled(name: str, value: Any, factor: float) -> Any:
    moved = min(value * factor, UPPER_BOUNDS.get(name, math.inf))
    return max(1, round(moved)) if isinstance(value, int) and not name.startswith("vector.op_weights.") else moved


_programs: dict[str, dict] = {}


def _capture(models: list[str]) -> None:
    for name in models:
        _programs[name] = capture_model(name)[0]


def headline(overrides: dict[str, Any], models: list[str]) -> dict[str, Any]:
    """Geomean speedup and energy ratio over the fair baseline of `models` on the profile with `overrides`."""
    from service.optimizer.pipeline import optimize  # in the worker process, after its capture

    profile = with_overrides(load_profile(PROFILE), overrides)
    speedups, energies = {}, {}
    for name in models:
        estimate = optimize(_programs[name], profile, {"validate": False})["estimate"]
        speedups[name] = estimate["speedup_vs_baseline"]
        energies[name] = estimate["baseline"]["energy_j"] / estimate["optimized"]["energy_j"]
    return {"geomean_speedup": geomean(speedups.values()), "geomean_energy": geomean(energies.values()),
            "speedups": speedups}


def measure(models: list[str], workers: int, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every point (or the shipped one and those of the assumptions in `only`), on `workers` processes."""
    points = [p for p in sweep_points(load_profile(PROFILE)) if not only or p[0] in ("as shipped", *only)]
    with ExitStack() as stack:
        if workers == 1:
            _capture(models)
            run = map
        else:  # spawned, not forked: a fork of a process whose XLA threads run can deadlock
            run = stack.enter_context(ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                          initializer=_capture, initargs=(models,))).map
        rows = []
        for (name, setting, overrides), result in zip(points, run(headline, [o for *_, o in points],
                                                                   [models] * len(points))):
            rows.append({"assumption": name, "setting": setting, "overrides": overrides, **result})
            print(f"{name} {setting}: {result['geomean_speedup']:.3f}x time, "
                  f"{result['geomean_energy']:.3f}x energy", flush=True)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    base = rows[0]["geomean_speedup"]
    moves: dict[str, float] = {}
    for r in rows[1:]:
        moves[r["assumption"]] = max(moves.get(r["assumption"], 0.0), abs(math.log(r["geomean_speedup"] / base)))
    return {"as_shipped": base, "low": min(r["geomean_speedup"] for r in rows),
            "high": max(r["geomean_speedup"] for r in rows),
            "most_moving": sorted(moves, key=moves.get, reverse=True),  # every swept assumption, most first
            "unmoved": sorted(name for name, move in moves.items() if move < 1e-3)}


def table(rows: list[dict[str, Any]], summary: dict[str, Any], meta: dict[str, Any], models: int) -> str:
    base = summary["as_shipped"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in rows[1:]:
        by_name.setdefault(r["assumption"], []).append(r)
    profile = load_profile(PROFILE)
    shipped = swept(profile)
    skipped = {name: reason for name in assumed(profile) if (reason := not_swept(name))}
    lines = [f"Headline geomean speedup over the fair baseline ({models} models, `{PROFILE}`, estimates) with each "
             f"assumed number moved, the others as shipped ({machine_line(meta)}): as shipped **{base:.3f}x**, "
             f"range **{summary['low']:.3f}x - {summary['high']:.3f}x**. Moves it most: "
             f"{', '.join(f'`{n}`' for n in summary['most_moving'][:3])}. Moved by under 0.1%: "
             f"{len(summary['unmoved'])} of {len(by_name)} swept. Regenerate with `python -m bench.assumptions`.", "",
             "| assumption | as shipped | setting -> geomean speedup |", "|---|---|---|"]
    for name in summary["most_moving"]:
        tried = ", ".join(f"{r['setting']}: {r['geomean_speedup']:.3f}x" for r in by_name[name])
        lines.append(f"| `{name}` | {shipped[name]:.3g} | {tried} |")
    reasons: dict[str, list[str]] = {}
    for name, reason in skipped.items():
        reasons.setdefault(reason, []).append(f"`{name}`")
    lines += ["", *(f"Not swept ({reason}): {', '.join(names)}." for reason, names in reasons.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--only", nargs="*", help="sweep only these assumptions (dotted names)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(args.models, args.workers, args.only)
    summary = summarize(rows)
    meta = machine()
    payload = {"machine": meta, "profile": PROFILE, "models": args.models, "summary": summary, "points": rows}
    publish(args.out, payload, table(rows, summary, meta, len(args.models)), "assumptions", docs=not args.no_docs)
    return payload


if __name__ == "__main__":
    main()
