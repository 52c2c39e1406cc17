"""Interleaved wall-clock timing of jitted functions on the same inputs: drift (other processes,
CPU frequency) hits every function alike, and medians keep outliers out."""
from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable, Sequence

import jax


def timed(fn: Callable, args: Sequence[Any]) -> float:
    """Seconds for one call, its results ready."""
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def spread(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4)
    return {"median_s": statistics.median(xs), "p25_s": q[0], "p75_s": q[2], "min_s": min(xs)}


def interleaved_medians(first: Callable, second: Callable, args: Sequence[Any], budget_s: float,
                        min_reps: int = 5, max_reps: int = 2001) -> dict[str, Any]:
    """Warm both up, then time them alternately (ABBA) for about `budget_s`; medians and spread."""
    compile_s = [timed(first, args), timed(second, args)]  # the first call compiles
    probe = timed(first, args) + timed(second, args)
    reps = max(min_reps, min(max_reps, int(budget_s / max(probe, 1e-9))))
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(reps):
        order = ((0, first), (1, second)) if i % 2 == 0 else ((1, second), (0, first))
        for slot, fn in order:
            times[slot].append(timed(fn, args))
    return {"reps": reps, "compile_and_first_run_s": compile_s, "first": spread(times[0]),
            "second": spread(times[1])}


def interleaved_rounds(fns: dict[str, Callable], args: Sequence[Any], budget_s: float, runs: int,
                       min_reps: int, max_reps: int = 1000) -> dict[str, Any]:
    """Warm each up, then `runs` rounds; in each, every function makes `reps` blocked calls back to
    back, in a shuffled order (seeded: a fixed order, even alternated, put the same two functions at
    the ends of every round and timed one program against itself at 1.07-1.18x on this 2-core
    machine). `reps` is at least `min_reps`, more
    where `budget_s` allows. A round's time is the median of its calls (a mean would charge one
    program for a preemption that hit its calls by chance on a shared machine); per function: the
    median over rounds and its spread."""
    if runs < 2:
        raise ValueError(f"interleaved_rounds needs at least 2 rounds, got {runs}")
    for fn in fns.values():
        timed(fn, args)  # compiles
    probe = sum(timed(fn, args) for fn in fns.values())
    reps = max(min_reps, min(max_reps, int(budget_s / max(runs * probe, 1e-9))))
    per_call: dict[str, list[float]] = {name: [] for name in fns}
    order, shuffle = list(fns), random.Random(0).shuffle
    for _ in range(runs):
        shuffle(order)
        for name in order:
            per_call[name].append(statistics.median(timed(fns[name], args) for _ in range(reps)))
    return {"runs": runs, "reps": reps, "times": {name: spread(xs) for name, xs in per_call.items()}}
