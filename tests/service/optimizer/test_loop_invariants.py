"""Loop-invariant code motion: pure work on loop constants runs once before a scan or while loop,
anything reading a carry, a step's input or an unknown primitive stays, and the result is the same
program bit for bit."""
from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from service.optimizer.loop_hoist import hoist_scan_projections
from service.optimizer.loop_invariants import drop_unused_loop_inputs, hoist_loop_invariants
from validation.validate import validate
from wire.capture import capture
from wire.execute import program_to_callable, typecheck
from wire.format import encode_array

RNG = np.random.default_rng(0)


def _arrays(*shapes):
    return [(RNG.normal(size=s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]


def _loop(program: dict, op: str) -> dict:
    return next(e for e in program["eqns"] if e["op"] == op)


def _body(program: dict, op: str = "scan", key: str = "jaxpr") -> dict:
    return _loop(program, op)["params"][key]["program"]


def _ops(program: dict) -> list[str]:
    return [e["op"] for e in program["eqns"]]


def _identical(a: dict, b: dict, args) -> None:
    for want, got in zip(program_to_callable(a)(*args), program_to_callable(b)(*args), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _aligned(program: dict) -> None:
    """Every loop's operands still line up with its bodies' inputs, and the program type-checks."""
    typecheck(program)
    for eqn in program["eqns"]:
        p = eqn["params"]
        if eqn["op"] == "scan":
            assert len(eqn["in"]) == len(p["jaxpr"]["program"]["inputs"])
        if eqn["op"] == "while":
            carries = len(p["body_jaxpr"]["program"]["inputs"]) - p["body_nconsts"]
            assert len(p["cond_jaxpr"]["program"]["inputs"]) == p["cond_nconsts"] + carries
            assert len(eqn["in"]) == p["cond_nconsts"] + p["body_nconsts"] + carries


def rnn(xs, wx, wh, h0):
    return lax.scan(lambda h, x: (jnp.tanh(x @ wx + h @ (wh * 0.5)),) * 2, h0, xs)


RNN_ARGS = _arrays((6, 3, 4), (4, 8), (8, 8), (3, 8))


def test_a_scaled_recurrent_weight_is_scaled_once_before_the_scan_leaving_one_gemm_in_the_body():
    program = capture(rnn, *RNN_ARGS)
    hoisted, moved = hoist_loop_invariants(program)
    assert moved == 1 and _ops(hoisted) == ["mul", "scan"]
    scaled = hoisted["eqns"][0]["out"][0]["name"]
    scan = _loop(hoisted, "scan")
    assert scan["params"]["num_consts"] == 3 and scan["in"][2] == scaled  # the last const, fed the scaled weight
    assert "mul" not in _ops(_body(hoisted))
    _aligned(hoisted)
    _identical(program, hoisted, RNN_ARGS)
    assert validate(program, hoisted, "exact")["status"] in ("passed", "identical")

    both, projections = hoist_scan_projections(hoisted)  # x @ wx: one GEMM over every step
    assert projections == 1 and _ops(both) == ["mul", "dot_general", "scan"]
    assert _ops(_body(both)).count("dot_general") == 1
    _aligned(both)
    for want, got in zip(program_to_callable(program)(*RNN_ARGS), program_to_callable(both)(*RNN_ARGS)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_work_that_reads_a_carry_or_a_step_input_stays_in_the_loop():
    def fn(xs, w, h0, m0):
        def cell(carry, x):
            h, m = carry
            h = jnp.tanh(h @ (m * 0.5) + x * 2.0)  # m is a carry and x a step's input: nothing moves
            return (h, m * 0.9), h

        return lax.scan(cell, (h0, m0), xs)

    program = capture(fn, *_arrays((5, 3, 8), (8, 8), (3, 8), (8, 8)))
    assert hoist_loop_invariants(program) == (program, 0)


def test_a_program_without_loops_passes_through_every_loop_pass_as_it_is():
    program = capture(lambda x, w: jnp.tanh(x @ w), *_arrays((3, 8), (8, 8)))
    snapshot = copy.deepcopy(program)
    for loop_pass in (hoist_loop_invariants, drop_unused_loop_inputs, hoist_scan_projections):
        result, changed = loop_pass(program)
        assert result is program and changed == 0
    assert program == snapshot


def test_a_primitive_outside_the_pure_list_stays_and_so_does_what_reads_it():
    def fn(xs, w, h0):
        return lax.scan(lambda h, x: (jnp.tanh(h @ (lax.optimization_barrier(w) * 0.5) + x),) * 2, h0, xs)

    program = capture(fn, *_arrays((5, 3, 8), (8, 8), (3, 8)))
    assert "optimization_barrier" in _ops(_body(program))
    assert hoist_loop_invariants(program) == (program, 0)


def test_a_broadcast_stays_in_the_loop_while_what_feeds_it_leaves():
    def fn(xs, b, h0):
        return lax.scan(lambda h, x: (jnp.tanh(h + x + jnp.broadcast_to(b * 2.0, h.shape)),) * 2, h0, xs)

    args = _arrays((5, 3, 8), (8,), (3, 8))
    program = capture(fn, *args)
    hoisted, moved = hoist_loop_invariants(program)
    assert moved == 1 and _ops(hoisted) == ["mul", "scan"]  # b * 2 moves; its [3, 8] broadcast does not
    (broadcast,) = [e for e in _body(hoisted)["eqns"] if e["op"] == "broadcast_in_dim"]
    assert broadcast["out"][0]["shape"] == [3, 8]
    _aligned(hoisted)
    _identical(program, hoisted, args)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_reversed_scan_computes_the_same_after_hoisting(reverse):
    def fn(xs, w, h0):
        def cell(h, x):
            h = jnp.tanh(h @ (w.T * 0.5) + x + jnp.sum(w, axis=0))  # the sum reaches the add as [1, 8]
            return h, h * 2.0

        return lax.scan(cell, h0, xs, reverse=reverse)

    args = _arrays((6, 3, 8), (8, 8), (3, 8))
    program = capture(fn, *args)
    hoisted, moved = hoist_loop_invariants(program)
    # the sum's [1, 8] view stays where it is read: free there, one more loop input outside
    assert moved == 3 and _ops(hoisted) == ["transpose", "mul", "reduce_sum", "scan"]
    assert _ops(_body(hoisted)) == ["dot_general", "add", "broadcast_in_dim", "add", "tanh", "mul"]
    assert _loop(hoisted, "scan")["params"]["reverse"] is reverse
    _aligned(hoisted)
    _identical(program, hoisted, args)


def test_a_while_loop_scales_its_weight_once_and_its_condition_bound_too():
    def fn(wh, h0, limit):
        def body(c):
            i, h = c
            return i + 1, jnp.tanh(h @ (wh * 0.5))

        return lax.while_loop(lambda c: c[0] < limit * 2, body, (0, h0))

    args = [*_arrays((8, 8), (3, 8)), np.int32(3)]
    program = capture(fn, *args)
    hoisted, moved = hoist_loop_invariants(program)
    assert moved == 2 and sorted(_ops(hoisted)) == ["mul", "mul", "while"]
    loop = _loop(hoisted, "while")
    assert loop["params"]["cond_nconsts"] == 2 and loop["params"]["body_nconsts"] == 2
    assert _ops(_body(hoisted, "while", "body_jaxpr")) == ["add", "dot_general", "tanh"]
    assert _ops(_body(hoisted, "while", "cond_jaxpr")) == ["lt"]
    _aligned(hoisted)
    _identical(program, hoisted, args)


@pytest.mark.parametrize("static_trips,dtype", [(True, jnp.float32), (False, jnp.float32), (True, jnp.bfloat16)])
def test_a_fori_loop_scales_its_weight_once(static_trips, dtype):
    def fn(wh, h0, n):
        return lax.fori_loop(0, 4 if static_trips else n, lambda i, h: jnp.tanh(h @ (wh * 0.5)), h0)

    args = [*(a.astype(dtype) for a in _arrays((8, 8), (3, 8))), np.int32(4)]
    program = capture(fn, *args)
    op, key = ("scan", "jaxpr") if static_trips else ("while", "body_jaxpr")
    hoisted, moved = hoist_loop_invariants(program)
    assert moved == 1 and _ops(hoisted) == ["mul", op]
    assert "mul" not in _ops(_body(hoisted, op, key))
    _aligned(hoisted)
    _identical(program, hoisted, args)


def test_nested_scans_lift_work_as_far_out_as_its_operands_allow():
    def fn(xss, w, h0):
        def outer(h, xs):
            def inner(g, x):
                # w * 0.5 is constant in both loops; h * 0.25 only in the inner one
                return jnp.tanh(g @ (w * 0.5) + x + h * 0.25), None

            g, _ = lax.scan(inner, h, xs)
            return g, g

        return lax.scan(outer, h0, xss)

    args = _arrays((3, 4, 2, 8), (8, 8), (2, 8))
    program = capture(fn, *args)
    hoisted, moved = hoist_loop_invariants(program)
    assert moved == 2 and _ops(hoisted) == ["mul", "scan"]
    outer_body = _body(hoisted)
    assert _ops(outer_body) == ["mul", "scan"]  # h * 0.25, now computed once per outer step
    assert _ops(_body(outer_body)) == ["dot_general", "add", "add", "tanh"]
    for body in (hoisted, outer_body):
        _aligned(body)
    _identical(program, hoisted, args)


def test_a_body_embedded_constant_is_copied_out_with_the_work_that_reads_it():
    program = capture(rnn, *RNN_ARGS)
    body = _body(program)
    scale = np.full((8, 8), 0.5, np.float32)
    body["consts"] = [{"name": "k0", "shape": [8, 8], "dtype": "float32", "data": encode_array(scale)}]
    mul = next(e for e in body["eqns"] if e["op"] == "mul")
    mul["in"] = [mul["in"][0], "k0"]
    original = copy.deepcopy(program)
    hoisted, moved = hoist_loop_invariants(program)
    assert program == original  # the input is never changed in place
    assert moved == 1 and [c["shape"] for c in hoisted["consts"]] == [[8, 8]]
    assert hoisted["eqns"][0]["in"][1] == hoisted["consts"][0]["name"]
    _aligned(hoisted)
    _identical(program, hoisted, RNN_ARGS)


def test_loop_inputs_no_body_reads_are_dropped_and_the_rest_stay_aligned():
    def fn(xs, ys, w, h0):
        def scan_body(h, xy):
            x, _ = xy  # the second scanned input is never read
            return jnp.tanh(x @ w + h), h

        h, hs = lax.scan(scan_body, h0, (xs, ys))
        _, g = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] @ w), (0, h))
        return hs, g

    args = _arrays((5, 4, 8), (5, 4, 8), (8, 8), (4, 8))
    program = capture(fn, *args)
    # the while body is handed one more constant it never reads (w again, under a new name)
    loop = _loop(program, "while")
    body, n_cond = loop["params"]["body_jaxpr"]["program"], loop["params"]["cond_nconsts"]
    body["inputs"].insert(0, {"name": "spare", "shape": [8, 8], "dtype": "float32"})
    loop["in"].insert(n_cond, "in2")
    loop["params"]["body_nconsts"] += 1
    typecheck(program)

    dropped_program, dropped = drop_unused_loop_inputs(program)
    assert dropped == 2
    assert len(_loop(dropped_program, "scan")["in"]) == len(_loop(program, "scan")["in"]) - 1  # ys
    kept = _loop(dropped_program, "while")
    assert kept["params"]["body_nconsts"] == loop["params"]["body_nconsts"] - 1
    assert "spare" not in [s["name"] for s in kept["params"]["body_jaxpr"]["program"]["inputs"]]
    _aligned(dropped_program)
    _identical(program, dropped_program, args)
    assert drop_unused_loop_inputs(dropped_program) == (dropped_program, 0)
