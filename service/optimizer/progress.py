"""Progress of an optimization as it runs: stages report where they are (the stage, the e-graph's
size, the best estimate so far) to whoever listens in this context, such as a job's status. A
context variable, so the stages need no extra parameter and a run nobody watches pays nothing."""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, TypedDict, Unpack


class Progress(TypedDict, total=False):
    """What a stage reports as it runs: each report names some of these."""

    stage: str  # the stage running now
    egraph_nodes: int  # e-nodes of the latest e-graph
    best_estimate_s: float  # estimated time of the best program found so far
    point: str  # a sweep's grid point, "k/n"


Listener = Callable[[Progress], None]

_listener: ContextVar[Listener | None] = ContextVar("optu_progress", default=None)


@contextmanager
def listening(listener: Listener | None) -> Iterator[None]:
    """Within the block, `report` hands its facts to `listener`."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def report(**facts: Unpack[Progress]) -> None:
    """Tell the listener, if any, e.g. report(stage="saturate") or report(egraph_nodes=1234)."""
    listener = _listener.get()
    if listener is not None:
        listener(facts)


@contextmanager
def stage(timings: dict[str, float], name: str) -> Iterator[None]:
    """Adds the block's wall time to `timings[name]` (a piecewise search runs a stage per piece),
    and reports the stage as progress."""
    report(stage=name)
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = round(timings.get(name, 0.0) + time.perf_counter() - start, 6)
