"""`python -m bench.gpu_speed`: gpu-roofline's estimates against an NVIDIA GPU's clock, whole programs.

Every bench model (bench/models/registry.py), at GPU-sized shapes (bench/gpu_shapes.py: a call of
1 ms or more as estimated), is optimized for `gpu-roofline`; the program as
written and the returned one are each timed under `jax.jit` on the GPU, and the measured speedup
(original / returned) is set beside the estimated one (baseline / optimized), with the rank
correlation over the models; and the program returned with `lowering: "pallas"` (its fused kernels
as Pallas kernels, which lower through Triton there), timed beside them. Three steps, since a GPU
machine has JAX but neither this project nor its pins:

  python -m bench.gpu_speed prepare [--out DIR]       # here: optimize, export with jax.export
  python -m bench.gpu_speed time DIR [--out FILE]     # there: JAX and NumPy alone, under 5 minutes
  python -m bench.gpu_speed report FILE               # here: the table in docs/benchmarks.md

`prepare` exports each program for both CPU and CUDA (jax.export, serialized), so `time` can be
tried on a CPU first (`--cpu`). The Pallas program is written as wire programs instead (an export
made here would hold its kernels' interpret-mode form): `time` builds it with this repository's
`wire/` (and pydantic) where they import, and skips it, saying so, where they do not.
Weight-only work runs once ahead of the timed calls, for every program, as gpu-roofline prices it
(`kernel.precompute_weights`) and the client runs it. `time` runs the programs in interleaved rounds
(20 rounds, each a median of back-to-back calls).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from bench.report import geomean, rank_agreement
from bench.timing import interleaved_rounds

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_speed.json"
EXPORTS = Path(__file__).resolve().parent / "results" / "gpu_speed_programs"
ROUNDS = 20
SLOWER = 0.98  # a returned program measured below this ratio is slower than the original
FUSED = ("tiled", "flash_attention")  # the fused kernels a Pallas program carries
MIN_CALL_S = 1e-3  # a GPU call this long is its kernels' time, not the launches'


def prepare(models: list[str], out: Path = EXPORTS, min_call_s: float = MIN_CALL_S) -> list[dict[str, Any]]:
    """Optimize each model for gpu-roofline at GPU-sized shapes (`bench.gpu_shapes`: one call
    estimated at `min_call_s` or more as written; 0: the registry's shapes) and export both
    programs' parts into `out`, with a manifest of their estimates and sizes."""
    from bench.gpu_shapes import gpu_sized
    from service.optimizer.pipeline import optimize

    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for name in models:
        program, factor = gpu_sized(name, min_call_s)
        response = optimize(program, "gpu-roofline", {"validate": False})
        estimate = response["estimate"]
        case = {"model": name, "size_factor": factor, "unchanged": response["program"] == program,
                "estimated": {"baseline_s": estimate["baseline"]["time_s"],
                              "optimized_s": estimate["optimized"]["time_s"],
                              "speedup": estimate["speedup_vs_baseline"], "dispatch_s": estimate["dispatch_s"]}}
        for role, version in (("original", program), ("returned", response["program"])):
            case[role] = _export(version, out, f"{name}.{role}")
        pallas = optimize(program, "gpu-roofline", {"validate": False, "lowering": "pallas"})
        case["estimated"]["pallas_speedup"] = pallas["estimate"]["speedup_vs_baseline"]
        case["pallas"] = _wire_parts(pallas["program"], out, f"{name}.pallas")
        case["pallas_kernels"] = sum(e["op"] in FUSED for e in pallas["program"]["eqns"])
        cases.append(case)
        print(f"{name} (activations x{factor}): estimated {case['estimated']['speedup']:.3f}x, baseline "
              f"{estimate['baseline']['time_s'] * 1e3:.3f} ms", flush=True)
    (out / "manifest.json").write_text(json.dumps({"cases": cases}, indent=1))
    return cases


def _export(program: dict[str, Any], out: Path, stem: str) -> dict[str, Any]:
    """The program's parts (`_parts`), each exported for CPU and CUDA into `out`."""
    from wire.execute import program_to_callable

    def write(body: dict[str, Any], path: Path) -> None:
        specs = [jax.ShapeDtypeStruct(tuple(s["shape"]), s["dtype"]) for s in body["inputs"]]
        exported = jax.export.export(jax.jit(program_to_callable(body)), platforms=("cpu", "cuda"))(*specs)
        path.write_bytes(exported.serialize())

    return _parts(program, out, f"{stem}.{{}}.bin", write)


def _wire_parts(program: dict[str, Any], out: Path, stem: str) -> dict[str, Any]:
    """The program's parts (`_parts`) as wire programs (JSON) in `out`."""
    return _parts(program, out, f"{stem}.{{}}.json", lambda body, path: path.write_text(json.dumps(body)))


def _parts(program: dict[str, Any], out: Path, name: str, write: Callable[[dict[str, Any], Path], None]
           ) -> dict[str, Any]:
    """The program's weight-only part (None without one) and per-call part, each written by `write`
    to `out` / `name` (its "{}" the part's name); the per-call part takes the inputs and then the
    weight-only part's outputs."""
    from lowering.precompute import split_weight_work

    has_weights = any(s.get("role") == "weight" for s in program["inputs"])
    ahead, per_call = split_weight_work(program) if has_weights else (None, program)
    parts: dict[str, Any] = {"inputs": [{"shape": s["shape"], "dtype": s["dtype"]} for s in program["inputs"]]}
    for part, body in (("ahead", ahead if ahead and ahead["outputs"] else None), ("per_call", per_call)):
        parts[part] = None if body is None else name.format(part)
        if body is not None:
            write(body, out / parts[part])
    return parts


def _inputs(specs: list[dict[str, Any]], seed: int) -> list[Any]:
    """Values for a program's inputs: floats drawn from N(0, 0.5), integers and flags zero (an
    index in range, whatever it indexes)."""
    rng = np.random.default_rng(seed)
    values = []
    for spec in specs:
        dtype = np.dtype(jax.numpy.dtype(spec["dtype"]))
        if np.issubdtype(dtype, np.floating):
            values.append(jax.numpy.asarray(0.5 * rng.standard_normal(spec["shape"]), spec["dtype"]))
        else:
            values.append(jax.numpy.zeros(spec["shape"], spec["dtype"]))
    return values


def _runner(parts: dict[str, Any], exports: Path, inputs: list[Any]):
    """The per-call part as a function of no arguments, its weight-only part run once now."""
    load = _load_wire if parts["per_call"].endswith(".json") else _load_export
    ahead = list(load(exports / parts["ahead"])(*inputs)) if parts["ahead"] else []
    per_call = load(exports / parts["per_call"])
    args = [*inputs, *ahead]
    return lambda: per_call(*args)


def _load_export(path: Path):
    return jax.export.deserialize(bytearray(path.read_bytes())).call


def _load_wire(path: Path):
    from wire.execute import jitted_program  # this repository's wire/ and pydantic

    return jitted_program(json.loads(path.read_text()))


def time_programs(exports: Path, out: Path | None = RESULTS, budget_s: float = 4.0, rounds: int = ROUNDS,
                  require_gpu: bool = True) -> dict[str, Any]:
    """Time every exported pair of `exports` on this machine's default device."""
    if require_gpu and jax.default_backend() != "gpu":
        raise SystemExit("no GPU here: pass --cpu to try the programs on this CPU (their times say nothing "
                         "about a GPU)")
    started, rows = time.perf_counter(), []
    for case in json.loads((exports / "manifest.json").read_text())["cases"]:
        inputs = _inputs(case["original"]["inputs"], seed=0)
        fns = {role: _runner(case[role], exports, inputs) for role in ("original", "returned")}
        try:
            fns["pallas"] = _runner(case["pallas"], exports, inputs)
        except ImportError as missing:
            print(f"{case['model']}: the Pallas program is not timed: {missing}", flush=True)
        times = interleaved_rounds(fns, (), budget_s, runs=rounds, min_reps=3)["times"]
        row = {"model": case["model"], "size_factor": case.get("size_factor", 1), "unchanged": case["unchanged"],
               "estimated": case["estimated"],
               "original_s": times["original"]["median_s"], "returned_s": times["returned"]["median_s"],
               "pallas_kernels": case["pallas_kernels"], "pallas_s": times.get("pallas", {}).get("median_s")}
        row["measured_speedup"] = row["original_s"] / row["returned_s"]
        row["pallas_speedup"] = row["original_s"] / row["pallas_s"] if row["pallas_s"] else None
        rows.append(row)
        print(f"{row['model']}: original {row['original_s'] * 1e6:.1f} us, returned {row['returned_s'] * 1e6:.1f} us, "
              f"measured {row['measured_speedup']:.3f}x, estimated {case['estimated']['speedup']:.3f}x", flush=True)
    result = {"device": str(jax.devices()[0]), "jax": jax.__version__, "rounds": rounds, "rows": rows,
              "summary": summarize(rows), "wall_s": time.perf_counter() - started}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
    return result


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank correlation of estimated and measured speedups (over every model, and over those whose
    program changed: an unchanged one's ratio is the machine's noise), geometric means and the
    returned programs measured slower than the original."""
    estimated, measured = [r["estimated"]["speedup"] for r in rows], [r["measured_speedup"] for r in rows]
    return {"models": len(rows), **rank_agreement(estimated, measured, [not r["unchanged"] for r in rows]),
            "estimated_geomean": geomean(estimated), "measured_geomean": geomean(measured),
            "slower": [r["model"] for r in rows if r["measured_speedup"] < SLOWER],
            "pallas_slower": [r["model"] for r in rows if r["pallas_speedup"] and r["pallas_speedup"] < SLOWER]}


def table(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        f"Measured on {result['device']} (JAX {result['jax']}): each bench model as written and as returned for "
        f"`gpu-roofline` at GPU-sized shapes (x N: its activations N times the registry's, bench/gpu_shapes.py), "
        f"under `jax.jit`, weight-only work run once ahead; medians of {result['rounds']} "
        f"interleaved rounds. Regenerate with `python -m bench.gpu_speed` (prepare here, time on the GPU, report).",
        "",
        f"Rank correlation of estimated and measured speedups: **{s['spearman']:.2f}** over {s['models']} "
        f"models, **{s['spearman_changed']:.2f}** over the {s['changed']} whose program changed; geometric mean "
        f"estimated {s['estimated_geomean']:.3f}x, measured {s['measured_geomean']:.3f}x; measured slower than "
        f"the original (below {SLOWER}x): {', '.join(s['slower']) or 'none'}; with `lowering: \"pallas\"`: "
        f"{', '.join(s.get('pallas_slower', [])) or 'none'}.",
        "",
        "| model | original | returned | measured | estimated | estimated baseline | estimated optimized "
        "| Pallas kernels | pallas measured | pallas estimated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        e = r["estimated"]
        pallas = f"{r['pallas_speedup']:.3f}x" if r.get("pallas_speedup") else "not timed"
        name = r["model"] + (f" (x{r['size_factor']})" if r.get("size_factor", 1) > 1 else "")
        lines.append(f"| {name}{' (unchanged)' if r['unchanged'] else ''} | {r['original_s'] * 1e6:.1f} us | "
                     f"{r['returned_s'] * 1e6:.1f} us | **{r['measured_speedup']:.3f}x** | {e['speedup']:.3f}x | "
                     f"{e['baseline_s'] * 1e6:.1f} us | {e['optimized_s'] * 1e6:.1f} us | {r.get('pallas_kernels', 0)} "
                     f"| {pallas} | {e.get('pallas_speedup', 1.0):.3f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    ready = steps.add_parser("prepare")
    ready.add_argument("--models", nargs="*")
    ready.add_argument("--out", type=Path, default=EXPORTS)
    ready.add_argument("--min-call-ms", type=float, default=MIN_CALL_S * 1e3,
                       help="scale each model's activations until one call is estimated this long (0: as registered)")
    timing = steps.add_parser("time")
    timing.add_argument("exports", type=Path)
    timing.add_argument("--out", type=Path, default=RESULTS)
    timing.add_argument("--budget", type=float, default=4.0, help="seconds of timing per model")
    timing.add_argument("--cpu", action="store_true", help="time on this CPU (a dry run: says nothing of a GPU)")
    report = steps.add_parser("report")
    report.add_argument("results", type=Path, nargs="?", default=RESULTS)
    args = parser.parse_args(argv)
    if args.step == "prepare":
        from bench.models.registry import MODELS
        prepare(args.models or list(MODELS), args.out, args.min_call_ms / 1e3)
    elif args.step == "time":
        time_programs(args.exports, args.out, args.budget, require_gpu=not args.cpu)
    else:
        from bench.report import publish
        result = json.loads(args.results.read_text())
        publish(RESULTS, result, table(result), "gpu_speed")


if __name__ == "__main__":
    main()
