"""Kept e-graphs: a load on the main thread reuses one, starting from nothing but the registered
rules, and saturates exactly as on a fresh e-graph; other threads get fresh ones, dropped there."""
from __future__ import annotations

import threading
import warnings

import jax.numpy as jnp
import pytest
from rule_harness import random_args

from rewrites.egraphs import ROLE_RULESETS, close_egraph, open_egraph
from rewrites.ingest import ingest
from rewrites.schedule import FUSION_ONLY, SCHEDULES, Budget, saturate, term_enodes
from wire.capture import capture

X, W = random_args(0, [(3, 4), (4, 5)])


def attention(x, w):
    y = jnp.exp(x @ w) * 1.0 + 0.0
    return (y / y.sum(axis=-1, keepdims=True)).T.T


def saturated(program, role="algebra"):
    """(term e-nodes after ingest, the saturation's e-nodes, iterations and rules fired, the e-graph)."""
    with ingest(program, role=role) as loaded:
        loaded_nodes = term_enodes(loaded.egraph)
        report = saturate(loaded.egraph, SCHEDULES["real"] if role == "algebra" else FUSION_ONLY, Budget())
        return loaded_nodes, (report.enodes, report.iterations, report.rules_fired), loaded.egraph


def on_a_thread(fn, *args):
    box = []
    thread = threading.Thread(target=lambda: box.append(fn(*args)))
    thread.start()
    thread.join()
    return box[0]


@pytest.mark.parametrize("role", ROLE_RULESETS)
def test_a_reused_egraph_starts_empty_and_saturates_as_a_fresh_one(role):
    big, small = capture(attention, X, W), capture(lambda x: x.T.T * 1.0, X)
    saturated(big, role)  # leaves a kept e-graph that held a saturated program
    nodes, report, egraph = saturated(small, role)
    fresh_nodes, fresh_report, _ = on_a_thread(lambda: saturated(small, role)[:2] + (None,))
    assert (nodes, report) == (fresh_nodes, fresh_report)
    assert report[0] > nodes  # the role's rules ran
    assert saturated(big, role)[2] is egraph  # the same e-graph served again: reuse happened


def test_each_role_keeps_its_own_egraphs_with_only_its_rules_registered():
    program = capture(attention, X, W)
    with ingest(program, role="algebra") as algebra, ingest(program, role="kernels") as kernels:
        pass
    assert algebra.egraph is not kernels.egraph
    assert open_egraph("kernels") is kernels.egraph  # each went back to its own role
    registered = set(kernels.egraph._state.rulesets)
    assert {r.__egg_ident__ for r in ROLE_RULESETS["kernels"]} <= registered
    assert not {r.__egg_ident__ for r in ROLE_RULESETS["algebra"][1:]} & registered  # SHAPES is shared
    close_egraph(kernels.egraph, "kernels")


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
