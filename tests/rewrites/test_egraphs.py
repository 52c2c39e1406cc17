"""Kept e-graphs: a load on the main thread reuses one, starting from nothing but the registered
rules, and saturates exactly as on a fresh e-graph; other threads get fresh ones, dropped there."""
from __future__ import annotations

import threading
import warnings

import jax.numpy as jnp
from rule_harness import random_args

from rewrites.egraphs import close_egraph, open_egraph
from rewrites.ingest import ingest
from rewrites.schedule import SCHEDULES, Budget, saturate, term_enodes
from wire.capture import capture

X, W = random_args(0, [(3, 4), (4, 5)])


def attention(x, w):
    y = jnp.exp(x @ w) * 1.0 + 0.0
    return (y / y.sum(axis=-1, keepdims=True)).T.T


def saturated(program):
    """(term e-nodes after ingest, the saturation's e-nodes, iterations and rules fired, the e-graph)."""
    with ingest(program) as loaded:
        loaded_nodes = term_enodes(loaded.egraph)
        report = saturate(loaded.egraph, SCHEDULES["real"], Budget())
        return loaded_nodes, (report.enodes, report.iterations, report.rules_fired), loaded.egraph


def on_a_thread(fn, *args):
    box = []
    thread = threading.Thread(target=lambda: box.append(fn(*args)))
    thread.start()
    thread.join()
    return box[0]


def test_a_reused_egraph_starts_empty_and_saturates_as_a_fresh_one():
    big, small = capture(attention, X, W), capture(lambda x: x.T.T * 1.0, X)
    saturated(big)  # leaves a kept e-graph that held a saturated program
    nodes, report, egraph = saturated(small)
    fresh_nodes, fresh_report, _ = on_a_thread(lambda: saturated(small)[:2] + (None,))
    assert (nodes, report) == (fresh_nodes, fresh_report)
    assert saturated(big)[2] is egraph  # the same e-graph served again: reuse happened


def test_loads_at_once_get_different_egraphs_and_each_returns_to_empty():
    program = capture(attention, X, W)
    with ingest(program):
        pass  # closing a load keeps a registered e-graph for the next one
    with ingest(program) as first, ingest(program) as second:
        assert first.egraph is not second.egraph
        assert term_enodes(first.egraph) == term_enodes(second.egraph) > 0
    egraph = open_egraph()
    assert any(egraph is e for e in (first.egraph, second.egraph))
    assert not [table for table, size in egraph.all_function_sizes() if size]  # no term, no analysis fact
    close_egraph(egraph)


def test_a_load_on_another_thread_is_fresh_and_dropped_there():
    program = capture(attention, X, W)
    kept = open_egraph()
    close_egraph(kept)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an e-graph dropped on the wrong thread is a warning pytest reports
        egraph = on_a_thread(lambda: saturated(program)[2])
    assert egraph is not kept
    assert egraph._state.egraph is None  # the Rust e-graph went with its thread's load
