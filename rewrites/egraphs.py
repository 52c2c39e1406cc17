"""E-graphs for loads: each starts empty but for rules, and its role's rules are registered once
per kept e-graph instead of once per load.

egglog-python converts and adds a ruleset's rules to an e-graph the first time it runs there: about
0.15 s for the algebra's, on every fresh e-graph, twice a request. The main thread keeps e-graphs
per role (the algebra's loads, the kernels' loads), each with the rulesets its role runs
registered, and hands each load one at that state (egglog's push); the load's close returns it
there (pop), so what one load added is gone before the next. A push copies the registered rules:
the kernels' e-graph holds only the fusion rules, which makes its push several times cheaper than
one holding every schedule. They are made as loads close, up to `KEEP` per role. Other threads
make a fresh e-graph per load and drop it on that thread when the load closes: an egglog e-graph
may only be dropped on the thread that made it, and a thread's end cannot be hooked to drop kept
ones there.
"""
from __future__ import annotations

import threading
import weakref
from typing import Literal

from egglog import EGraph, Ruleset

from rewrites.egglog_internals import ensure_registered
from rewrites.schedule import CHAINS_ORDERED, FUSION_ONLY, SCHEDULES, Schedule
from rewrites.shapes import SHAPES

Role = Literal["algebra", "kernels"]
KEEP = 3  # per role: a search holds one load of each at once; a loop body's search a few more


def _rulesets(schedule: Schedule) -> list[Ruleset]:
    steps = (schedule.every_iteration, *schedule.throttled, schedule.bounded, schedule.fusion)
    return [rules for rules in steps if rules is not None]


ROLE_RULESETS: dict[Role, list[Ruleset]] = {
    "algebra": [SHAPES, *(r for schedule in [*SCHEDULES.values(), CHAINS_ORDERED] for r in _rulesets(schedule))],
    "kernels": [SHAPES, *_rulesets(FUSION_ONLY)],
}
_free: dict[Role, list[EGraph]] = {role: [] for role in ROLE_RULESETS}  # kept, not in use, registered; main thread only
_in_use: dict[int, tuple[weakref.ref, Role]] = {}  # kept e-graphs handed out, by id (EGraph is not hashable)


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _registered(role: Role) -> EGraph:
    egraph = EGraph()
    for rules in ROLE_RULESETS[role]:
        ensure_registered(egraph, rules)
    return egraph


def open_egraph(role: Role = "algebra") -> EGraph:
    """An e-graph for one load of `role`: a kept one on the main thread when one is free, else a
    fresh one. (Any ruleset runs on any e-graph; another role's is registered for that load only.)"""
    free = _free[role]
    if not (_on_main_thread() and free):
        return EGraph()
    egraph = free.pop()
    key = id(egraph)
    # an unclosed load's entry goes with it
    _in_use[key] = (weakref.ref(egraph, lambda _: _in_use.pop(key, None)), role)
    egraph.push()
    return egraph


def close_egraph(egraph: EGraph, role: Role = "algebra") -> None:
    """Return a kept e-graph to its registered state; drop a fresh one's Rust e-graph now, on this
    thread (egglog-python's schedule runner leaves a reference cycle holding its state, so otherwise
    it lives until a cyclic collection, which may run on another thread, where it leaks with a
    warning), and on the main thread keep a registered one of `role` in its place while fewer than
    `KEEP` are kept. Registering on close rather than on open spares loads that are never closed (a
    test inspecting its e-graph) the cost of rules they do not run."""
    main = _on_main_thread()
    ref, role = _in_use.pop(id(egraph), (lambda: None, role))  # a kept one returns to its own role
    if ref() is egraph and main:
        try:
            egraph.pop()
        except Exception:  # an e-graph an error left unusable is dropped, not kept
            pass
        else:
            _free[role].append(egraph)
            return
    for state in [getattr(egraph, "_state", None), *getattr(egraph, "_state_stack", [])]:
        if state is not None:
            state.egraph = None
    if main and len(_free[role]) + sum(r == role for _, r in _in_use.values()) < KEEP:
        _free[role].append(_registered(role))
