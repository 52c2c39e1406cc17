"""`python -m bench.hf_models`: Hugging Face transformers models as their users call them (the
architectures of bench/models/hf_zoo.py, randomly initialised from small configs), each through
`optimize(model, **inputs)` in-process, `torch.compile(backend="optu")` and a real server over
HTTP: captured or not (and why), both verdicts (against the original program, against PyTorch),
the largest relative error against eager over every output leaf, the estimate's gain over the
fair baseline, the optimization time, and mutants of the optimized program judged against
PyTorch (a wrong one passed is a soundness bug). Writes bench/results/hf_models.json and the
table in docs/benchmarks.md between `<!-- hf-models:begin/end -->`."""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

from bench.models.hf_zoo import ZOO, build
from bench.mutants import mutation_score
from bench.report import RESULTS_DIR, fmt_ratio, machine, machine_line, publish

RESULTS = RESULTS_DIR / "hf_models.json"
VERDICTS = ("passed", "identical")


def relative_error(got: Any, expected: Any) -> float:
    """max |got - expected| / max |expected| over the output leaves (inf for another structure)."""
    from torch.utils import _pytree

    got_leaves, expected_leaves = _pytree.tree_leaves(got), _pytree.tree_leaves(expected)
    if type(got) is not type(expected) or len(got_leaves) != len(expected_leaves):
        return float("inf")
    errors = [float((g.double() - e.double()).abs().max() / max(float(e.double().abs().max()), 1e-30))
              for g, e in zip(got_leaves, expected_leaves) if hasattr(e, "shape") and e.numel()]
    return max(errors, default=0.0)


def _eager(model: Any, inputs: dict[str, Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(**copy.deepcopy(inputs))


def through_optimize(model: Any, inputs: dict[str, Any], server: str | None, time_limit_s: float) -> dict[str, Any]:
    import torch

    from service.client import optimize

    start = time.perf_counter()
    try:
        result = optimize(model, **copy.deepcopy(inputs), server=server, time_limit_s=time_limit_s)
    except Exception as exc:  # a model that does not capture or optimize: the row says why
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    optimize_s = time.perf_counter() - start
    with torch.no_grad():
        got = result.fn(**copy.deepcopy(inputs))
    return {"optimize_s": optimize_s, "validation": result.validation["status"],
            "torch_validation": result.response["torch_validation"]["status"],
            "rel_error_vs_eager": relative_error(got, _eager(model, inputs)),
            "speedup_vs_baseline": result.estimate["speedup_vs_baseline"], "result": result}


def through_compile(model: Any, inputs: dict[str, Any], time_limit_s: float) -> dict[str, Any]:
    import torch

    from service.torch_backend import optu_backend

    caches = []

    def backend(gm, example_inputs):
        caches.append(optu_backend(gm, example_inputs, options={"time_limit_s": time_limit_s}))
        return caches[-1]

    torch._dynamo.reset()
    start = time.perf_counter()
    try:
        with torch.no_grad():
            got = torch.compile(model, backend=backend)(**copy.deepcopy(inputs))
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        torch._dynamo.reset()
    verdicts = [r["validation"]["status"] for c in caches for r in c.responses.values()]
    return {"compile_s": time.perf_counter() - start, "graphs": len(verdicts),
            "validation": "passed" if verdicts and all(v in VERDICTS for v in verdicts) else ",".join(verdicts),
            "rel_error_vs_eager": relative_error(got, _eager(model, inputs))}


def measure(name: str, server: str | None, time_limit_s: float, mutants: int) -> dict[str, Any]:
    from service.torch_client import capture, validate_against_torch

    model, inputs = build(name)
    row: dict[str, Any] = {"model": name, "modality": ZOO[name].modality, "kind": ZOO[name].kind}
    row["optimize"] = through_optimize(model, inputs, None, time_limit_s)
    result = row["optimize"].pop("result", None)
    if result is not None and mutants:
        captured = capture(model, (), copy.deepcopy(inputs))
        row["mutation_vs_torch"] = mutation_score(result.original, result.program, mutants,
                                                  lambda mutant: validate_against_torch(captured, mutant))
    row["torch_compile"] = through_compile(model, inputs, time_limit_s)
    if server is not None:
        http = through_optimize(model, inputs, server, time_limit_s)
        http.pop("result", None)
        row["http"] = http
    print(f"{name}: {_summary(row)}", flush=True)
    return row


def _summary(row: dict[str, Any]) -> str:
    parts = []
    for path in ("optimize", "torch_compile", "http"):
        if path in row:
            r = row[path]
            parts.append(f"{path} " + (r["error"] if "error" in r else
                                       f"{r['validation']} {r['rel_error_vs_eager']:.1e}"))
    return "; ".join(parts)


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return f"fails: {r['error'][:80]}"
    verdict = r["validation"] + (f" / torch {r['torch_validation']}" if "torch_validation" in r else "")
    return f"{verdict}, {r['rel_error_vs_eager']:.1e}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | kind | optimize: verdict / vs PyTorch, rel. error vs eager | torch.compile | HTTP | "
             "gain vs baseline | optimize time | mutants caught vs PyTorch (wrongly passed) |",
             "|---|---|---|---|---|---:|---:|---|"]
    for r in rows:
        opt, mutation = r["optimize"], r.get("mutation_vs_torch")
        caught = (
            "-"
            if mutation is None
            else f"{mutation['caught']}/{mutation['mutants']} ({len(mutation['wrongly_passed'])})"
        )
        took = f"{opt['optimize_s']:.1f} s" if "optimize_s" in opt else "-"
        lines.append(f"| {r['model']} | {r['modality']} {r['kind']} | {_cell(opt)} | {_cell(r['torch_compile'])} | "
                     f"{_cell(r.get('http'))} | {fmt_ratio(opt.get('speedup_vs_baseline'))} | {took} | {caught} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="*", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--time-limit-s", type=float, default=10)
    parser.add_argument("--mutants", type=int, default=8, help="mutants per model judged against PyTorch")
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    if args.no_http:
        rows = [measure(name, None, args.time_limit_s, args.mutants) for name in args.models]
    else:
        from service.http.devserver import running_server

        with running_server({"OPTU_LOG_LEVEL": "WARNING"}, ready_path="/readyz", timeout_s=120, quiet=True) as (url, _):
            rows = [measure(name, url, args.time_limit_s, args.mutants) for name in args.models]
    meta = machine()
    equal = [r["model"] for r in rows if all(r[p].get("rel_error_vs_eager", float("inf")) <= 1e-4
                                             and r[p].get("validation") in VERDICTS
                                             for p in ("optimize", "torch_compile", "http") if p in r)]
    wrong = [r["model"] for r in rows if r.get("mutation_vs_torch", {}).get("wrongly_passed")]
    text = (f"{table(rows)}\n\nValidated and equal to eager (relative error <= 1e-4) on every path: "
            f"{len(equal)} of {len(rows)}. Wrong mutants passed against PyTorch: {', '.join(wrong) or 'none'}. "
            f"{machine_line(meta)}; `optu-v1`; regenerate with `python -m bench.hf_models`.")
    publish(args.output, {"meta": meta, "time_limit_s": args.time_limit_s, "rows": rows}, text, "hf-models",
            docs=not args.no_docs)
    return 1 if wrong or len(equal) < len(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
