"""Scan input projections hoisted out of the loop: only x_t @ W with W loop-invariant moves, the
program computes the same in either scan direction, and the pipeline keeps it where it pays."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from bench.models.zoo import lstm_layer
from costmodel.profile import load_profile
from service.optimizer.loop_hoist import hoist_if_cheaper, hoist_scan_projections
from service.optimizer.pipeline import optimize
from wire.capture import capture
from wire.execute import program_to_callable

pytestmark = pytest.mark.slow  # whole programs through the pipeline

RNG = np.random.default_rng(0)


def _arrays(*shapes):
    return [(RNG.normal(size=s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]


def _rnn(reverse: bool):
    def fn(xs, w_x, w_h, h0, m0):
        def cell(carry, x):
            h, m = carry
            h = jnp.tanh(x @ w_x + h @ w_h + x @ m)  # x @ m reads a carry: it stays in the loop
            return (h, m * 0.9), h

        return lax.scan(cell, (h0, m0), xs, reverse=reverse)

    return fn, _arrays((6, 4, 8), (8, 16), (16, 16), (4, 16), (8, 16))


def _same_outputs(a, b, args):
    for want, got in zip(program_to_callable(a)(*args), program_to_callable(b)(*args)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_only_the_projection_by_a_loop_constant_leaves_the_loop(reverse):
    fn, args = _rnn(reverse)
    program = capture(fn, *args)
    hoisted, count = hoist_scan_projections(program)
    assert count == 1
    outside = [e for e in hoisted["eqns"] if e["op"] == "dot_general"]
    assert len(outside) == 1 and outside[0]["out"][0]["shape"] == [6, 4, 16]  # every step's x_t @ w_x at once
    (scan,) = [e for e in hoisted["eqns"] if e["op"] == "scan"]
    body = scan["params"]["jaxpr"]["program"]
    before = next(e for e in program["eqns"] if e["op"] == "scan")["params"]["jaxpr"]["program"]
    dots = lambda b: sum(e["op"] == "dot_general" for e in b["eqns"])
    assert dots(body) == dots(before) - 1 and len(scan["in"]) == len(body["inputs"])
    _same_outputs(program, hoisted, args)


def test_a_scan_with_nothing_to_hoist_is_left_alone():
    def fn(xs, h0):
        return lax.scan(lambda h, x: (jnp.tanh(x @ h), h), h0, xs)

    program = capture(fn, *_arrays((5, 8, 8), (8, 8)))
    assert hoist_scan_projections(program) == (program, 0)


def test_the_lstm_input_projection_is_hoisted_where_it_pays_and_validated():
    steps, batch, n_in, n_hid = 16, 8, 128, 256
    args = _arrays((steps, batch, n_in), (n_in, 4 * n_hid), (n_hid, 4 * n_hid)) + [np.zeros(4 * n_hid, np.float32)]
    program = capture(lstm_layer(batch, n_hid), *args, weight_argnums=(1, 2, 3))
    profile = load_profile("optu-v1")
    assert hoist_if_cheaper(program, profile)[1] == 1
    assert hoist_if_cheaper(program, load_profile("cpu-host"))[1] in (0, 1)  # priced, not assumed
    real = optimize(program, profile)
    assert any("hoisted 1" in n for n in real["report"]["notes"])
    assert real["validation"]["status"] == "passed"
    exact = optimize(program, profile, {"fp_mode": "exact"})  # not an IEEE identity: never in exact mode
    assert not any("hoisted" in n for n in exact["report"]["notes"])
    assert real["estimate"]["optimized"]["time_s"] < exact["estimate"]["optimized"]["time_s"]
    _same_outputs(program, real["program"], jax.tree.leaves(args))
