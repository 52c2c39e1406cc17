"""Validation beside the search, on threads of its own: the inputs are drawn while the e-graphs are
built, and the algebraic optimum is validated while the fusion stages run.

Fusion only regroups the algebraic optimum into kernels, so when value numbering finds the returned
program the same computation, the algebraic optimum's validation is its validation, and XLA's
compiles and runs (which release the GIL) overlap the fusion search instead of following it.
"""
from __future__ import annotations

import gc
import threading
import time
from typing import Any, Callable

import jax

from validation.inputs import TRIALS, InputDraws
from validation.region_check import CheckMemory
from validation.regions import distinct_checks, find_regions
from validation.validate import validate
from validation.verdict import Verdict
from wire.json_types import Program


class CollectionPause:
    """Cyclic garbage collection off while any holder needs it off, then back as it was. egglog's
    e-graphs may only be dropped on the thread that made them; a collection run by a validation
    thread's allocations would try (and leak them), so none runs while such a thread is alive."""

    def __init__(self) -> None:
        self.lock, self.holds, self.was_enabled = threading.Lock(), 0, False

    def hold(self) -> None:
        with self.lock:
            if self.holds == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.holds += 1

    def release(self) -> None:
        with self.lock:
            self.holds -= 1
            if self.holds == 0 and self.was_enabled:
                gc.enable()


COLLECTION = CollectionPause()  # process-wide, as the collector is: concurrent requests share it


class Job:
    """`fn(*args)` on a thread of its own, after `after` has finished, under the caller's
    `jax_enable_x64` (JAX's config contexts are per thread). Collection is paused from the start
    until `settle` finds the thread gone: released by the caller's thread, never by the job's."""

    def __init__(self, fn: Callable[..., Any], *args: Any, after: Job | None = None):
        x64 = bool(jax.config.jax_enable_x64)
        self.value: Any = None
        self.error: BaseException | None = None
        self.paused = True
        COLLECTION.hold()

        def run() -> None:
            if after is not None:
                after.thread.join()
            try:
                with jax.enable_x64(x64):
                    self.value = fn(*args)
            except BaseException as err:  # handed to whoever asks for the result
                self.error = err
        self.thread = threading.Thread(target=run, name="optu-validate", daemon=True)
        self.thread.start()

    def settle(self, wait: bool = False) -> None:
        if wait:
            self.thread.join()
        if self.paused and not self.thread.is_alive():
            self.paused = False
            COLLECTION.release()

    def result(self) -> Any:
        self.settle(wait=True)
        if self.error is not None:
            raise self.error
        return self.value


class BackgroundValidation:
    """Entering draws the validation inputs of `original` in the background until a check starts;
    `start(algebraic)` then validates the algebraic optimum there, and `result_for(candidate)` is
    that verdict when the candidate computes the same, else the candidate's own validation. That
    one reuses what the algebraic optimum's check showed (fusion's choices often differ from it in
    one region of many, or regroup a region around the same merged GEMM), so that check runs on
    when the candidate shares a region or a checked value with it, and otherwise stops at its next
    draw. Leaving waits for both."""

    def __init__(self, original: Program, fp_mode: str, timings: dict[str, float]):
        self.original, self.fp_mode, self.timings = original, fp_mode, timings
        self.algebraic: Program | None = None
        self.draws = InputDraws()
        self.speculative = self.draws.stoppable()  # the algebraic optimum's check, stopped when not wanted
        self.memory = CheckMemory.for_mode(fp_mode)  # what either check showed on these draws
        self.checking = threading.Event()  # a check has started: drawing ahead stops
        self.jobs: list[Job] = []

    def __enter__(self) -> BackgroundValidation:
        self.jobs.append(Job(self.draws.fill, self.original, range(TRIALS), self.checking))
        return self

    def __exit__(self, *exc: object) -> None:
        self.settle(wait=True)

    def settle(self, wait: bool = False) -> None:
        """Hand back the collection pause of every finished job (all of them, waiting, with `wait`).
        Call it from the searching thread between stages, so collection is paused no longer than needed."""
        for job in self.jobs:
            job.settle(wait)

    def start(self, algebraic: Program) -> None:
        self.settle()
        self.algebraic = algebraic
        self.checking.set()
        self.jobs.append(Job(self._validate_algebraic, after=self.jobs[-1]))

    def _validate_algebraic(self) -> Verdict:
        begin = time.perf_counter()
        try:
            return validate(self.original, self.algebraic, self.fp_mode, draws=self.speculative, memory=self.memory)
        finally:  # reported apart: it ran beside the fusion stages
            self.timings["validate"] = round(time.perf_counter() - begin, 6)

    def result_for(self, candidate: Program) -> Verdict:
        started = self.algebraic is not None
        plan = find_regions(self.algebraic, candidate, self.memory.table) if started else None
        if plan is not None and not plan.regions:
            return self.jobs[-1].result()
        self.checking.set()
        if not (started and self._shares_region_checks(candidate)):
            self.speculative.stop()  # of no use to this candidate: it gives the cores back at its next draw
        self.settle(wait=True)  # one validation at a time: they share the cores
        return validate(self.original, candidate, self.fp_mode, draws=self.draws, memory=self.memory)

    def _shares_region_checks(self, candidate: Program) -> bool:
        """Whether the algebraic optimum's check runs a region check the candidate's would run too,
        or shows a value the candidate computes equal to the original's (its regions stop there)."""
        if self.fp_mode != "real":
            return False
        plans = [(program, find_regions(self.original, program, self.memory.table))
                 for program in (self.algebraic, candidate)]
        if any(plan is None or not plan.regions for _, plan in plans):
            return False
        (algebraic, algebraic_plan), (_, plan) = plans
        roots = {algebraic_plan.numbered.key[p] for region in algebraic_plan.regions for _, p in region.roots}
        computed = {plan.numbered.key[o["name"]] for i in {i for r in plan.regions for i in r.eqns}
                    for o in candidate["eqns"][i]["out"]}
        checks = (set(distinct_checks(self.original, program, plan)) for program, plan in plans)
        return bool(roots & computed or set.intersection(*checks))
