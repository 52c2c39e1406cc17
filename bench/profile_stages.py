"""`python -m bench.profile_stages --models bert_1_layer matmul_chain_80`: cProfile per pipeline stage.

Each stage function the pipeline calls (ingest, saturate, extract, lower, validate) is wrapped in
its own profiler for one optimize call, so a stage's top functions are not drowned by the others.
Prints the top functions by cumulative and by own time per stage; `--out DIR` keeps .pstats files
(open with `python -m pstats` or snakeviz). A diagnostic, not part of `make bench`.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import time
from pathlib import Path
from typing import Any, Callable

from bench.models.registry import MODELS, capture_model
from service.optimizer import pipeline, search
from validation import background

# Module attributes per stage (the search's stages live in service.optimizer.search, lowering and validation
# in service.optimizer.pipeline); names missing from a version are skipped.
STAGES = {"ingest": ["ingest"], "saturate": ["saturate"], "extract": ["view_egraph", "_extract"],
          "fuse": ["seed_kernels"], "lower": ["build_kernel_program", "emit_program"], "validate": ["validate"]}
MODULES = (search, pipeline, background)


def _wrapped(fn: Callable, profiler: cProfile.Profile) -> Callable:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        profiler.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            profiler.disable()
    return run


def profile_model(name: str, hardware: str = "optu-v1", options: dict | None = None
                  ) -> tuple[dict[str, pstats.Stats], dict[str, Any]]:
    program, _ = capture_model(name)
    profilers = {stage: cProfile.Profile() for stage in STAGES}
    saved = {}
    for stage, attrs in STAGES.items():
        for module in MODULES:
            for attr in attrs:
                if hasattr(module, attr):
                    saved[module, attr] = getattr(module, attr)
                    setattr(module, attr, _wrapped(saved[module, attr], profilers[stage]))
    try:
        start = time.perf_counter()
        response = pipeline.optimize(program, hardware, options)
        wall = time.perf_counter() - start
    finally:
        for (module, attr), fn in saved.items():
            setattr(module, attr, fn)
    stats = {}
    for stage, prof in profilers.items():
        try:
            stats[stage] = pstats.Stats(prof)
        except TypeError:  # the stage never ran
            continue
    return stats, {"wall_s": wall, "timings_s": response["report"]["timings_s"],
                   "egraph": response["report"]["egraph"], "validation": response["validation"]}


def top(stats: pstats.Stats, sort: str, limit: int) -> str:
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats(sort).print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["bert_1_layer", "bert_12_layers", "matmul_chain_80"],
                        choices=list(MODELS), metavar="MODEL")
    parser.add_argument("--limit", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    for name in args.models:
        stats, info = profile_model(name)
        print(f"=== {name}: {info['wall_s']:.2f} s, stages {info['timings_s']}, {info['egraph']}, "
              f"validation {info['validation']['status']} ({info['validation'].get('criterion')})")
        for stage, st in stats.items():
            print(f"--- {name} / {stage}: {st.total_tt:.3f} s profiled")
            print(top(st, "cumulative", args.limit))
            print(top(st, "tottime", max(args.limit // 2, 5)))
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                st.dump_stats(args.out / f"{name}.{stage}.pstats")


if __name__ == "__main__":
    main()
