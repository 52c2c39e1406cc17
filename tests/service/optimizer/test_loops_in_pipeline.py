"""Loops through the whole pipeline: invariant work leaves the loop, the per-step input projection
becomes one GEMM over every step, the result is validated, the report's notes say what the
returned program holds, and loop bodies share the request's time limit instead of each getting
all of it."""
from __future__ import annotations

import pytest

import jax.numpy as jnp
import numpy as np
from jax import lax

from service.optimizer import pipeline
from test_debug import TANH_IS_IDENTITY
from wire.capture import capture

pytestmark = pytest.mark.slow  # whole programs through the pipeline

RNG = np.random.default_rng(3)


def _arrays(*shapes):
    return [(RNG.normal(size=s) / np.sqrt(s[-2] if len(s) > 1 else 1)).astype(np.float32) for s in shapes]


def _rnn(xs, wx, wh, h0):
    return lax.scan(lambda h, x: (jnp.tanh(x @ wx + h @ (wh * 0.5)),) * 2, h0, xs)


def test_the_scaling_leaves_the_loop_and_the_input_projection_becomes_one_gemm_over_all_steps():
    args = _arrays((32, 64, 256), (256, 256), (256, 256), (64, 256))
    program = capture(_rnn, *args, weight_argnums=(1, 2))
    response = pipeline.optimize(program, "optu-v1", {"fp_mode": "real"})
    out = response["program"]
    before = [e for e in out["eqns"] if e["op"] != "scan"]
    (scan,) = [e for e in out["eqns"] if e["op"] == "scan"]
    body = scan["params"]["jaxpr"]["program"]
    assert [e["op"] for e in body["eqns"]].count("dot_general") == 1  # h @ (wh * 0.5): the recurrence
    assert "mul" in [e["op"] for e in before]  # wh * 0.5, once
    (projection,) = [e for e in before if e["op"] == "dot_general"]
    assert projection["out"][0]["shape"] == [32, 64, 256]  # every step's x_t @ wx at once
    assert response["validation"]["status"] == "passed"
    assert response["estimate"]["speedup_vs_baseline"] > 1.0
    notes = response["report"]["notes"]
    assert any("moved 1 loop-invariant" in note for note in notes)  # wh * 0.5
    assert any("hoisted 1 scan input projection" in note for note in notes)  # the one `projection` above


def test_a_result_that_failed_validation_claims_no_move_of_the_original_it_returns():
    args = _arrays((4, 8, 16), (16, 16), (16, 16), (8, 16))
    program = capture(lambda *a: jnp.tanh(_rnn(*a)[0]), *args, weight_argnums=(1, 2))
    response = pipeline.optimize(program, "optu-v1", {"fp_mode": "real"}, extra_rules=[TANH_IS_IDENTITY])
    assert response["validation"]["status"] == "failed" and response["program"] == program
    assert not any("moved" in note or "hoisted" in note for note in response["report"]["notes"])


def test_loop_bodies_share_the_requests_time_limit(monkeypatch):
    calls = []
    real = pipeline.optimize

    def spy(program, hardware=None, options=None, extra_rules=()):
        calls.append(options.time_limit_s if options is not None and not isinstance(options, dict)
                     else (options or {}).get("time_limit_s"))
        return real(program, hardware, options, extra_rules)

    monkeypatch.setattr(pipeline, "optimize", spy)

    def three_loops(xs, w):
        for _ in range(3):
            xs = lax.scan(lambda h, x: (jnp.tanh(x @ w + h), h), xs[0], xs)[1]
        return xs

    program = capture(three_loops, *_arrays((4, 8, 16), (16, 16)))
    response = pipeline.optimize(program, "optu-v1", {"time_limit_s": 2.0})
    top, bodies = calls[0], calls[1:]
    # three bodies, each optimized with and without its input projection hoisted, and the program
    # itself: a seventh each, not the whole limit each
    assert top == 2.0 and len(bodies) == 6
    assert all(b == 2.0 / 7 for b in bodies)
    assert response["validation"]["status"] in ("passed", "identical")
