"""Matrix-chain ordering: chains are found where an intermediate has no other reader, the dynamic
program matches brute force, and the seeded order is extracted without any reassociation rule."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.extract import extract_greedy_dag
from costmodel.kernel_cost import NodeCoster, gemm_kernel_time, static_classes
from costmodel.profile import load_profile
from lowering.emit import emit_program
from rewrites.chain_order import cheapest_order, find_chains, orders_every_matmul, seed_chain_orders
from rewrites.egraph_view import view_egraph
from rewrites.ingest import ingest
from rewrites.schedule import NO_RULES, Budget, saturate
from rule_harness import VALIDATED
from service.optimizer.pipeline import optimize
from validation.validate import validate
from wire.capture import capture

PROFILE = load_profile("optu-v1")
DIMS = [2048, 16, 2048, 16, 2048, 8, 1024, 4, 512]  # left to right makes 2048 x 2048 products


def _chain(dims, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32) for a, b in zip(dims, dims[1:])]


def _flops(m, k, n):
    return m * k * n


def _brute_force(dims, i, j):
    """Every parenthesisation of matrices i..j, by enumeration."""
    if i == j:
        return 0
    return min(_brute_force(dims, i, k) + _brute_force(dims, k + 1, j) + _flops(dims[i], dims[k + 1], dims[j + 1])
               for k in range(i, j))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=2, max_size=7))
def test_the_dynamic_program_matches_brute_force(dims):
    cost, order = cheapest_order(dims, _flops)
    assert cost == _brute_force(dims, 0, len(dims) - 2)

    def replay(node):  # the returned order costs what the program says: (cost, rows, cols)
        if isinstance(node, int):
            return 0, dims[node], dims[node + 1]
        (lc, m, k), (rc, _, n) = replay(node[0]), replay(node[1])
        return lc + rc + _flops(m, k, n), m, n

    assert replay(order)[0] == cost


def test_a_run_of_free_leaves_costs_nothing():
    dims = [64, 32, 32, 32, 16]
    cost, order = cheapest_order(dims, _flops, free=[False, True, True, True])
    assert order == (0, ((1, 2), 3)) or order == (0, (1, (2, 3)))
    assert cost == _flops(64, 32, 16)  # only x @ (the precomputed product) runs per call


def test_chains_are_flattened_only_through_intermediates_nothing_else_reads():
    a, b, c, d = _chain([16, 8, 16, 8, 16])
    whole = capture(lambda a, b, c, d: ((a @ b) @ c) @ d, a, b, c, d)
    (chain,) = find_chains(whole)
    assert chain.leaves == ("in0", "in1", "in2", "in3") and chain.dims == (16, 8, 16, 8, 16)
    def shared(a, b, c, d):
        ab = a @ b
        return (ab @ c) @ d, ab

    (chain,) = find_chains(capture(shared, a, b, c, d))  # a @ b is returned too: a leaf, not inlined
    assert chain.leaves[1:] == ("in2", "in3") and chain.leaves[0] not in ("in0", "in1")
    scaled = capture(lambda a, b, c, d: (((a @ b) * 2.0) @ c) @ d, a, b, c, d)
    (chain,) = find_chains(scaled)  # the scale sits between: (2ab) @ c @ d, and a @ b alone (too short)
    assert chain.leaves[1:] == ("in2", "in3") and chain.dims == (16, 16, 8, 16)


def test_the_seeded_order_is_extracted_with_no_reassociation_rule():
    mats = _chain(DIMS)
    program = capture(lambda *ms: functools.reduce(jnp.matmul, ms), *mats)
    loaded = ingest(program)
    price = functools.partial(gemm_kernel_time, PROFILE)
    seed_chain_orders(loaded, [price], set())
    saturate(loaded.egraph, NO_RULES, Budget())  # the analyses only: types of the seeded products
    view = view_egraph(loaded.egraph)
    coster = NodeCoster(view, loaded.params, PROFILE, static_classes(view, program), proxy="epilogues")
    extraction = extract_greedy_dag(view, coster)
    optimum, _ = cheapest_order(DIMS, lambda m, k, n: price(program["eqns"][0]["params"], "float32", m, k, n))
    left_to_right = sum(
        price(program["eqns"][0]["params"], "float32", DIMS[0], k, n) for k, n in zip(DIMS[1:], DIMS[2:])
    )
    assert optimum < 0.5 * left_to_right
    assert abs(extraction.cost - optimum) < 1e-9
    emitted = emit_program(view, extraction.choice, loaded.params, program)
    assert validate(program, emitted.program, "real")["status"] in VALIDATED


def test_exact_mode_keeps_the_written_order():
    program = capture(lambda *ms: functools.reduce(jnp.matmul, ms), *_chain(DIMS))
    exact = optimize(program, options={"fp_mode": "exact"})
    real = optimize(program, options={"fp_mode": "real"})
    assert [e["in"][1] for e in exact["program"]["eqns"]] == [f"in{k}" for k in range(1, len(DIMS) - 1)]
    assert real["report"]["extraction"]["algebra"]["cost_s"] < 0.5 * exact["report"]["extraction"]["algebra"]["cost_s"]


def test_only_long_chains_holding_every_matmul_skip_reassociation_by_rewrites():
    def chain(n):
        return lambda *ms: functools.reduce(lambda a, b: a @ b, ms)

    long = capture(chain(6), *[jax.ShapeDtypeStruct((4, 4), jnp.float32)] * 6)
    short = capture(chain(5), *[jax.ShapeDtypeStruct((4, 4), jnp.float32)] * 5)
    mixed = capture(lambda *ms: (chain(6)(*ms), ms[0] @ ms[1]), *[jax.ShapeDtypeStruct((4, 4), jnp.float32)] * 6)
    assert orders_every_matmul(long, find_chains(long))
    assert not orders_every_matmul(short, find_chains(short))  # 14 orders: the rules enumerate them
    assert not orders_every_matmul(mixed, find_chains(mixed))  # a product outside the chain
