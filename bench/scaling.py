"""`python -m bench.scaling`: how optimize time grows with program size.

The BERT-base encoder at 1, 2, 4, 8, 12 and 24 layers: end-to-end optimize wall time, time per
stage (saturate and extract apart), e-nodes, and time and e-nodes per layer; the growth exponent is
the least-squares slope of log(time) against log(layers) (1 = linear, 2 = quadratic). (How the
estimate moves with the time limit, the matmul chain's among them, is bench/time_limits.py.)
Writes bench/results/scaling.json and the README table between `<!-- scaling:begin/end -->`.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any, Sequence

from bench.models.large import bert_encoder
from bench.report import RESULTS_DIR, fmt_ratio, machine, machine_line, publish
from service.capture import capture
from service.pipeline import optimize

RESULTS = RESULTS_DIR / "scaling.json"
LAYERS = (1, 2, 4, 8, 12, 24)
TINY = {"hidden": 64, "heads": 4, "seq": 16, "batch": 2}


def growth_exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else None


def bert_point(layers: int, options: dict | None = None, **shape: int) -> dict[str, Any]:
    fn, args, weights = bert_encoder(layers, **shape)
    start = time.perf_counter()
    program = capture(fn, *args, weight_argnums=weights)
    capture_s = time.perf_counter() - start
    del args  # the weights are only needed for capture; 24 layers hold 680 MB
    start = time.perf_counter()
    response = optimize(program, "optu-v1", options)
    wall = time.perf_counter() - start
    t, g = response["report"]["timings_s"], response["report"]["egraph"]
    search = t.get("saturate", 0.0) + t.get("extract", 0.0)
    return {"layers": layers, "equations": len(program["eqns"]), "capture_s": capture_s, "optimize_wall_s": wall,
            "timings_s": t, "saturate_plus_extract_s": search, "enodes": g["enodes"], "eclasses": g["eclasses"],
            "partition": response["report"].get("partition"),
            "iterations": g["iterations"], "stop_reason": g["stop_reason"],
            "speedup_vs_baseline": response["estimate"]["speedup_vs_baseline"],
            "validation": response["validation"]["status"],
            "per_layer": {"optimize_wall_s": wall / layers, "saturate_plus_extract_s": search / layers,
                          "enodes": g["enodes"] / layers}}


def bert_scaling(layers: Sequence[int] = LAYERS, options: dict | None = None, **shape: int) -> dict[str, Any]:
    # A server's workers are warm (service/workers.py): a tiny encoder first, so one-time process costs
    # (first JAX traces and compiles of its own helpers, egglog's first rulesets) miss the first point.
    bert_point(1, options, **TINY)
    points = []
    for n in layers:
        points.append(bert_point(n, options, **shape))
        p = points[-1]
        print(f"bert {n} layers: {p['optimize_wall_s']:.2f} s, search {p['saturate_plus_extract_s']:.2f} s, "
              f"{p['enodes']} e-nodes", flush=True)
    xs = [p["layers"] for p in points]
    return {"shape": shape or {"hidden": 768, "heads": 12, "seq": 128, "batch": 8}, "points": points,
            "growth_exponent": {"optimize_wall_s": growth_exponent(xs, [p["optimize_wall_s"] for p in points]),
                                "saturate_plus_extract_s": growth_exponent(
                                    xs, [p["saturate_plus_extract_s"] for p in points]),
                                "enodes": growth_exponent(xs, [p["enodes"] for p in points])}}


def _pieces(point: dict[str, Any]) -> str:
    part = point.get("partition")
    return f"{part['pieces']}, {part['searched']}" if part else "whole"


def table(bert: dict[str, Any], meta: dict[str, Any]) -> str:
    g = bert["growth_exponent"]
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"
    lines = [f"Optimizer wall time on {machine_line(meta)} (2 cores shared; noisy). Regenerate with "
             "`python -m bench.scaling`.", "",
             f"BERT-base encoder, optimize wall time vs layers: growth exponent {fmt(g['optimize_wall_s'])} "
             f"end to end, {fmt(g['saturate_plus_extract_s'])} for saturate + extract, {fmt(g['enodes'])} for "
             "e-nodes built (1 = linear). From 200 equations on, the encoder is searched piecewise "
             "(`pieces`: cut into, searched; service/partition.py): e-nodes count the e-graphs built.", "",
             "Stages: `extract` is the algebra's extraction; `fuse` loads the algebraic optimum into the "
             "fusion e-graph, saturates it and seeds greedy fusion's kernels; `kernels` extracts the kernels.", "",
             "| layers | eqns | optimize wall | per layer | ingest | saturate | extract | fuse | kernels | lower "
             "| validate | saturate + extract | pieces | e-nodes | e-nodes / layer | stop | speedup | validation |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---|"]
    for p in bert["points"]:
        t = p["timings_s"]
        lines.append(f"| {p['layers']} | {p['equations']} | {p['optimize_wall_s']:.2f} s | "
                     f"{p['per_layer']['optimize_wall_s']:.2f} s | {t.get('ingest', 0):.2f} s | "
                     f"{t.get('saturate', 0):.2f} s | {t.get('extract', 0):.2f} s | {t.get('fuse', 0):.2f} s | "
                     f"{t.get('extract_kernels', 0):.2f} s | {t.get('lower', 0):.2f} s | "
                     f"{t.get('validate', 0):.2f} s | {p['saturate_plus_extract_s']:.2f} s | {_pieces(p)} | {p['enodes']} | "
                     f"{p['per_layer']['enodes']:.0f} | {p['stop_reason']} | "
                     f"{fmt_ratio(p['speedup_vs_baseline'])} | {p['validation']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="*", default=list(LAYERS))
    parser.add_argument("--tiny", action="store_true", help="a tiny encoder (hidden 64, 4 heads, seq 16, "
                                                            "batch 2): checks the script, measures nothing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    bert = bert_scaling(args.layers, **(TINY if args.tiny else {}))
    meta = machine()
    publish(args.out, {"machine": meta, "bert": bert}, table(bert, meta), "scaling",
            not args.no_readme)
    return {"bert": bert}


if __name__ == "__main__":
    main()
