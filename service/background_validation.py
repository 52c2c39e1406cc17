"""Validation of the algebraic optimum in a background thread, overlapping the fusion stages.

Fusion only regroups the algebraic optimum into kernels, so when value numbering finds the returned
program the same computation, the algebraic optimum's validation is its validation, and XLA's
compiles and runs (which release the GIL) overlap the fusion search instead of following it.
"""
from __future__ import annotations

import gc
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax

from lowering.regions import find_regions
from lowering.validate import validate


class BackgroundValidation:
    """`start(algebraic)` validates it against `original` in a thread; `result_for(candidate)` is
    that verdict when the candidate computes the same, else the candidate's own validation. A
    context manager: leaving waits for the thread."""

    def __init__(self, original: dict[str, Any], fp_mode: str, timings: dict[str, float]):
        self.original, self.fp_mode, self.timings = original, fp_mode, timings
        self.algebraic: dict[str, Any] | None = None
        self.future: Future | None = None
        self.gc_was_enabled = False

    def __enter__(self) -> BackgroundValidation:
        return self

    def __exit__(self, *exc: object) -> None:
        self._wait()

    def start(self, algebraic: dict[str, Any]) -> None:
        self.algebraic = algebraic
        x64 = bool(jax.config.jax_enable_x64)  # JAX's config contexts are per thread: carry the caller's
        # egglog's e-graphs may only be dropped on the thread that made them; a cycle collection run
        # by this thread's allocations would try (and leak them), so collection waits until it is done
        self.gc_was_enabled = gc.isenabled()
        gc.disable()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="optu-validate")
        self.future = pool.submit(self._run, x64)
        pool.shutdown(wait=False)  # the thread runs on; the pool takes no more work

    def _run(self, x64: bool) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            with jax.enable_x64(x64):
                return validate(self.original, self.algebraic, self.fp_mode)
        finally:  # reported apart: it ran beside the fusion stages
            self.timings["validate_background"] = round(time.perf_counter() - start, 6)

    def result_for(self, candidate: dict[str, Any]) -> dict[str, Any]:
        plan = find_regions(self.algebraic, candidate) if self.future is not None else None
        if plan is not None and not plan.regions:
            return self.future.result()
        self._wait()  # one validation at a time: they share the cores
        return validate(self.original, candidate, self.fp_mode)

    def _wait(self) -> None:
        if self.future is not None:
            self.future.exception()
            if self.gc_was_enabled:
                gc.enable()
            self.gc_was_enabled = False
