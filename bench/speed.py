"""`python -m bench.speed`: how long optimizing takes, end to end at default settings, on programs
of shapes and styles the optimizer was not tuned on, and how it grows.

- Encoders written in plain jax.numpy, flax.linen and equinox (bench/models/encoders.py) over a
  family of shapes (hidden 256-1024, 4-16 heads, seq 64-512, batch 8), at 1 and 12 layers, their
  weights marked as weights, and the plain one also with them passed as ordinary arguments.
- Every model of the Hugging Face zoo (bench/models/hf_zoo.py) as its users call it, through
  torch.export and the check against PyTorch.
- Matmul chains of 40, 80 and 160 products with dimensions drawn from {8, 16, 64, 256, 512},
  three seeds each; the 80-chains also under an unlimited search (the server's largest limits),
  whose estimate the default must reach within 1%.
- Growth: the plain BERT-base encoder at 1-12 layers (cut into its layers, each kind searched
  once), the zoo's GPT-2 at 2, 4, 8 and 12 layers (pre-LN, cut after each normalization) and the
  chains by length; the exponent is the least-squares slope of log(time) against log(size)
  (1 = linear).
- Memory: the peak resident set of a server (its process and its workers) optimizing the 12-layer
  BERT-base encoder over HTTP.

Every row is `service.client.optimize` in this process (capture, search, extraction, lowering,
validation, the callable built), after a warm-up as a server's worker does at start
(service/optimizer/warm_up.py), so one-time process costs are not counted. Every row's estimate
is compared with `--reference`'s, the estimates of the code before a change, so speed is never
bought with quality. Writes bench/results/speed.json and the table in docs/benchmarks.md between
`<!-- speed:begin/end -->`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx
import jax
import jax.numpy as jnp
import numpy as np

from bench.models.encoders import STYLES, encoder
from bench.models.hf_zoo import ZOO, ZooModel
from bench.report import RESULTS_DIR, machine, machine_line, publish, write_json
from service.client import optimize
from service.http.devserver import running_server
from service.optimizer import pipeline
from service.optimizer.warm_up import warm_up
from wire.capture import capture

RESULTS = RESULTS_DIR / "speed.json"
REFERENCE = RESULTS_DIR / "speed_reference.json"
# (hidden, heads, seq): every value the family names, each at least once.
ONE_LAYER_SHAPES = ((256, 4, 64), (512, 8, 512), (768, 12, 128), (1024, 16, 128), (768, 16, 64))
TWELVE_LAYER_SHAPES = ((768, 12, 128), (512, 8, 64))
LAYERS = (1, 2, 4, 8, 12)
# Hugging Face GPT-2 (pre-LN: cut after each normalization, the residual stream carried across) at
# several depths
DECODER_LAYERS = (2, 4, 8, 12)
CHAIN_LENGTHS = (40, 80, 160)
SEEDS = (0, 1, 2)
CHAIN_DIMS = (8, 16, 64, 256, 512)
UNLIMITED = {"time_limit_s": 60.0, "node_limit": 500_000, "iter_limit": 100}
TARGETS_S = {"encoder, 1 layer": 1.5, "encoder, 12 layers": 10.0, "chain 40": None, "chain 80": 1.0,
             "chain 160": 3.0, "hugging face": 5.0}
# every model of the Hugging Face zoo (bench/models/hf_zoo.py): text, vision and audio; encoders,
# decoders and encoder-decoders
HUGGING_FACE = tuple(ZOO)
RSS_LIMIT_BYTES = 2 * 2**30
TINY = {"one": ((64, 4, 16),), "twelve": ((64, 4, 16),), "layers": (1, 2), "chains": (6, 12), "seeds": (0,),
        "batch": 2, "hugging_face": ("bert",), "decoder_layers": (1, 2)}


def random_chain(length: int, seed: int) -> tuple[Callable[..., Any], tuple, tuple]:
    """`length` matmuls left to right, dimensions drawn from CHAIN_DIMS."""
    dims = np.random.default_rng(seed).choice(CHAIN_DIMS, size=length + 1)

    def fn(*ms):
        out = ms[0]
        for m in ms[1:]:
            out = out @ m
        return out

    return fn, tuple(jax.ShapeDtypeStruct((int(a), int(b)), jnp.float32) for a, b in zip(dims, dims[1:])), ()


def measure(key: str, group: str, workload: tuple, options: dict[str, Any] | None = None) -> dict[str, Any]:
    fn, args, weights = workload
    return _timed(key, group, lambda: optimize(fn, *args, weight_argnums=weights, **(options or {})))


def _timed(key: str, group: str, run: Callable[[], Any]) -> dict[str, Any]:
    """One row: `run` (a client optimize call) timed end to end, with its report and estimates."""
    start = time.perf_counter()
    result = run()
    wall = time.perf_counter() - start
    estimate = result.estimate
    row = {"key": key, "group": group, "wall_s": wall, "timings_s": result.report["timings_s"],
           "equations": result.report["equations"]["original"], "estimate_s": estimate["optimized"]["time_s"],
           "speedup_vs_baseline": estimate["speedup_vs_baseline"], "validation": result.validation["status"],
           "enodes": result.report["egraph"]["enodes"], "stop_reason": result.report["egraph"]["stop_reason"]}
    print(f"{key}: {wall:.2f} s, {row['estimate_s'] * 1e6:.4g} us, {row['speedup_vs_baseline']:.3f}x, "
          f"{row['validation']}", flush=True)
    return row


def encoder_rows(shapes: Sequence[tuple[int, int, int]], layers: int, batch: int) -> list[dict[str, Any]]:
    """Each style with its weights marked, and the plain one also with its weights passed as
    ordinary arguments (`plain-args`), as most callers of a jit wrapper pass them."""
    group = f"encoder, {layers} layer{'s' if layers > 1 else ''}"
    rows = []
    for h, a, s in shapes:
        rows += [measure(f"{style} {layers}L h{h} a{a} s{s}", group, encoder(style, layers, h, a, s, batch))
                 for style in STYLES]
        fn, args, _ = encoder("plain", layers, h, a, s, batch)
        rows.append(measure(f"plain-args {layers}L h{h} a{a} s{s}", group, (fn, args, ())))
    return rows


def _zoo_row(key: str, group: str, zoo_model: ZooModel) -> dict[str, Any]:
    """One Hugging Face model as its users call it: capture through torch.export, the check
    against PyTorch and the callable included."""
    model, inputs = zoo_model.build()
    return _timed(key, group, lambda: optimize(model, **inputs))


def hugging_face_rows(names: Sequence[str]) -> list[dict[str, Any]]:
    """Models of the Hugging Face zoo (bench/models/hf_zoo.py)."""
    return [_zoo_row(f"hf {name}", "hugging face", ZOO[name]) for name in names]


def decoder_depth_rows(depths: Sequence[int]) -> list[dict[str, Any]]:
    """The zoo's GPT-2 at each depth."""
    gpt2 = ZOO["gpt2"]
    return [_zoo_row(f"hf gpt2 {n}L", "gpt2 depth", dataclasses.replace(gpt2, config={**gpt2.config, "n_layer": n}))
            for n in depths]


def chain_rows(lengths: Sequence[int], seeds: Sequence[int]) -> list[dict[str, Any]]:
    return [measure(f"chain {n} seed {seed}", f"chain {n}", random_chain(n, seed)) for n in lengths for seed in seeds]


def growth_exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else None


def server_peak_rss(workload: tuple) -> dict[str, Any]:
    """The 12-layer encoder POSTed to a fresh server: the peak resident set of the server process
    and of each of its workers (the kernel's high-water mark, VmHWM), summed."""
    fn, args, weights = workload
    body = json.dumps({"program": capture(fn, *args, weight_argnums=weights)}).encode()
    with running_server({"OPTU_LOG_LEVEL": "WARNING"}, ready_path="/readyz", timeout_s=120, quiet=True) as (url, proc):
        reply = httpx.post(url + "/v1/optimize", content=body, timeout=600,
                           headers={"content-type": "application/json"})
        peaks = {pid: _peak_rss(pid) for pid in [proc.pid, *_descendants(proc.pid)]}
    return {"status": reply.status_code, "processes": len(peaks), "peak_rss_bytes": sum(peaks.values()),
            "largest_process_bytes": max(peaks.values())}


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], list(children.get(pid, []))
    while stack:
        found.append(stack.pop())
        stack.extend(children.get(found[-1], []))
    return found


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def summarize(rows: list[dict[str, Any]], reference: dict[str, float]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        ref = reference.get(row["key"])
        row["vs_reference"] = row["estimate_s"] / ref if ref else None
        groups.setdefault(row["group"], []).append(row)
    return {name: {"rows": len(g), "median_s": statistics.median(r["wall_s"] for r in g),
                   "worst_s": max(r["wall_s"] for r in g), "target_s": TARGETS_S.get(name),
                   "worst_vs_reference": max((r["vs_reference"] for r in g if r["vs_reference"]), default=None),
                   # the report's stages, the client's own among them, over the wall time: 1 when they account for it
                   "least_stages_share": min(sum(r["timings_s"].values()) / r["wall_s"] for r in g)}
            for name, g in groups.items()}


def table(result: dict[str, Any], meta: dict[str, Any]) -> str:
    fmt = lambda x, spec=".2f": "n/a" if x is None else format(x, spec)
    lines = [f"End-to-end optimize time at default settings on {machine_line(meta)}. "
             "Regenerate with `python -m bench.speed`.", "",
             "| programs | rows | median | worst | target | worst estimate vs before | least stages / wall |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in result["summary"].items():
        lines.append(f"| {name} | {s['rows']} | {s['median_s']:.2f} s | {s['worst_s']:.2f} s | "
                     f"{'<= ' + fmt(s['target_s'], 'g') + ' s' if s['target_s'] else '-'} | "
                     f"{fmt(s['worst_vs_reference'], '.4f')} | {s['least_stages_share']:.3f} |")
    g, rss, unlimited = result["growth_exponent"], result["memory"], result["unlimited"]
    decoder = ", ".join(f"{n}: {r['wall_s']:.2f} s" for n, r in zip(result["decoder_layers"], result["decoder_rows"]))
    lines += ["", f"Growth exponent (1 = linear): {fmt(g['layers'])} in encoder layers (plain BERT-base, "
              f"{', '.join(map(str, result['layers']))} layers), {fmt(g['chain_length'])} in chain length, "
              f"{fmt(g['decoder_layers'])} in Hugging Face GPT-2 layers ({decoder}).",
              f"80-chains at default settings against an unlimited search ({UNLIMITED}): worst estimate ratio "
              f"{fmt(unlimited['worst_ratio'], '.4f')}.",
              f"Peak resident memory of the server optimizing the 12-layer encoder: "
              f"{rss['peak_rss_bytes'] / 2**30:.2f} GiB over {rss['processes']} processes (limit 2 GiB).", "",
              "| program | eqns | wall | stages / wall | ingest | saturate | extract | fuse | kernels | validate "
              "| e-nodes | speedup vs baseline | estimate vs before | validation |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        t = r["timings_s"]
        lines.append(f"| {r['key']} | {r['equations']} | {r['wall_s']:.2f} s | {sum(t.values()) / r['wall_s']:.2f} | "
                     + " | ".join(f"{t.get(k, 0):.2f}" for k in ("ingest", "saturate", "extract", "fuse",
                                                                 "extract_kernels", "validate"))
                     + f" | {r['enodes']} | {r['speedup_vs_baseline']:.3f}x | {fmt(r['vs_reference'], '.4f')} "
                       f"| {r['validation']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: checks the script, measures nothing")
    parser.add_argument("--reference", action="store_true",
                        help="record this code's estimates as the reference later runs are compared with")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    shapes = TINY if args.tiny else {"one": ONE_LAYER_SHAPES, "twelve": TWELVE_LAYER_SHAPES, "layers": LAYERS,
                                     "chains": CHAIN_LENGTHS, "seeds": SEEDS, "batch": 8,
                                     "hugging_face": HUGGING_FACE, "decoder_layers": DECODER_LAYERS}
    bert = (768, 12, 128) if not args.tiny else shapes["one"][0]
    measure("warm-up", "warm-up", encoder("plain", 1, 64, 4, 16, 2))
    warm_up(pipeline.optimize)  # as a server's worker starts; each in-process request freezes the heap it finds
    rows = [*encoder_rows(shapes["one"], 1, shapes["batch"]), *encoder_rows(shapes["twelve"], 12, shapes["batch"]),
            *chain_rows(shapes["chains"], shapes["seeds"]), *hugging_face_rows(shapes["hugging_face"])]
    if args.reference:
        write_json(REFERENCE, {"machine": machine(), "estimates_s": {r["key"]: r["estimate_s"] for r in rows}})
        return {"rows": rows}
    layer_rows = [measure(f"plain {n}L bert-base", "layers", encoder("plain", n, *bert, shapes["batch"]))
                  for n in shapes["layers"]]
    decoder_rows = decoder_depth_rows(shapes["decoder_layers"])
    middle = shapes["chains"][len(shapes["chains"]) // 2]
    unlimited = [measure(f"chain {middle} seed {s}, unlimited", "unlimited", random_chain(middle, s), UNLIMITED)
                 for s in shapes["seeds"]]
    defaults = {r["key"]: r["estimate_s"] for r in rows}
    ratios = [defaults[f"chain {middle} seed {s}"] / u["estimate_s"] for s, u in zip(shapes["seeds"], unlimited)]
    chains = [r for r in rows if r["group"].startswith("chain")]
    reference = json.loads(REFERENCE.read_text())["estimates_s"] if REFERENCE.exists() and not args.tiny else {}
    result = {"rows": rows, "summary": summarize(rows, reference), "layers": list(shapes["layers"]),
              "layer_rows": layer_rows, "decoder_layers": list(shapes["decoder_layers"]), "decoder_rows": decoder_rows,
              "unlimited": {"rows": unlimited, "ratios": ratios, "worst_ratio": max(ratios)},
              "growth_exponent": {
                  "layers": growth_exponent(shapes["layers"], [r["wall_s"] for r in layer_rows]),
                  "decoder_layers": growth_exponent(shapes["decoder_layers"], [r["wall_s"] for r in decoder_rows]),
                  "chain_length": growth_exponent([int(r["group"].split()[1]) for r in chains],
                                                  [r["wall_s"] for r in chains])},
              "memory": server_peak_rss(encoder("plain", shapes["layers"][-1], *bert, shapes["batch"])),
              "rss_limit_bytes": RSS_LIMIT_BYTES, "cpus": os.cpu_count()}
    meta = machine()
    publish(args.out, {"machine": meta, **result}, table(result, meta), "speed", not args.no_docs)
    return result


if __name__ == "__main__":
    main()
