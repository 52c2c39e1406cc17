"""E-graphs for loads: each starts empty but for rules, and the standard schedules' rules are
registered once per kept e-graph instead of once per load.

egglog-python converts and adds a ruleset's rules to an e-graph the first time it runs there: about
0.15 s for the algebra's, on every fresh e-graph, twice a request. The main thread keeps e-graphs
with every standard schedule registered and hands each load one at that state (egglog's push); the
load's close returns it there (pop), so what one load added is gone before the next. They are made
as loads close, up to `KEEP`. Other threads make a fresh e-graph per load and drop it on that
thread when the load closes: an egglog e-graph may only be dropped on the thread that made it, and
a thread's end cannot be hooked to drop kept ones there.
"""
from __future__ import annotations

import threading
import weakref

from egglog import EGraph

from rewrites.runner import ensure_registered
from rewrites.schedule import CHAINS_ORDERED, FUSION_ONLY, SCHEDULES
from rewrites.shapes import SHAPES

KEEP = 4  # a search holds two loads at once (the algebra's and the kernels'); a loop body's search a few more
_STANDARD = [SHAPES, FUSION_ONLY.fusion, *(rules for schedule in [*SCHEDULES.values(), CHAINS_ORDERED]
                                           for rules in (schedule.every_iteration, schedule.throttled, schedule.bounded))]
_free: list[EGraph] = []  # kept e-graphs not in use, at their registered state; main thread only
_in_use: dict[int, weakref.ref] = {}  # kept e-graphs handed out, by id (EGraph is not hashable)


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _registered() -> EGraph:
    egraph = EGraph()
    for rules in _STANDARD:
        ensure_registered(egraph, rules)
    return egraph


def open_egraph() -> EGraph:
    """An e-graph for one load: a kept one on the main thread when one is free, else a fresh one."""
    if not (_on_main_thread() and _free):
        return EGraph()
    egraph = _free.pop()
    key = id(egraph)
    _in_use[key] = weakref.ref(egraph, lambda _: _in_use.pop(key, None))  # an unclosed load's entry goes with it
    egraph.push()
    return egraph


def close_egraph(egraph: EGraph) -> None:
    """Return a kept e-graph to its registered state; drop a fresh one's Rust e-graph now, on this
    thread (egglog-python's schedule runner leaves a reference cycle holding its state, so otherwise
    it lives until a cyclic collection, which may run on another thread, where it leaks with a
    warning), and on the main thread keep a registered one in its place while fewer than `KEEP` are
    kept. Registering on close rather than on open spares loads that are never closed (a test
    inspecting its e-graph) the cost of rules they do not run."""
    main = _on_main_thread()
    if _in_use.pop(id(egraph), lambda: None)() is egraph and main:
        try:
            egraph.pop()
        except Exception:  # an e-graph an error left unusable is dropped, not kept
            pass
        else:
            _free.append(egraph)
            return
    for state in [getattr(egraph, "_state", None), *getattr(egraph, "_state_stack", [])]:
        if state is not None:
            state.egraph = None
    if main and len(_free) + len(_in_use) < KEEP:
        _free.append(_registered())
