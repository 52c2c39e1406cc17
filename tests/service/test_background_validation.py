"""Validation beside the fusion stages: the algebraic optimum's verdict stands for a returned program
that computes the same, and only for one; a wrong candidate is still caught."""
from __future__ import annotations

import gc
import json

import jax
import jax.numpy as jnp
import numpy as np

from service.background_validation import BackgroundValidation
from service.capture import capture
from service.pipeline import optimize

X, W = np.ones((8, 16), np.float32), np.full((16, 16), 0.1, np.float32)


def _program():
    return capture(lambda x, w: jnp.tanh(x @ w) * 2.0, X, W)


def _renamed(program):
    """The same computation under other value names (as the fusion stage emits it)."""
    text = json.dumps(program)
    for eqn in program["eqns"]:
        for out in eqn["out"]:
            text = text.replace(f'"{out["name"]}"', f'"{out["name"]}_k"')
    return json.loads(text)


def test_a_candidate_computing_the_same_gets_the_background_verdict():
    program, timings = _program(), {}
    gc.enable()  # (another test's server thread may hold a window of its own; this one owns it now)
    with BackgroundValidation(program, "real", timings) as early:
        early.start(program)
        assert not gc.isenabled() and early.gc_was_enabled  # no cycle collection on the validation thread
        verdict = early.result_for(_renamed(program))
    assert verdict["status"] == "passed" and "validate_background" in timings
    assert not early.gc_was_enabled  # the window is closed: collection was handed back


def test_a_different_candidate_is_validated_on_its_own():
    program = _program()
    wrong = json.loads(json.dumps(program).replace('"tanh"', '"logistic"'))
    with BackgroundValidation(program, "real", {}) as early:
        early.start(program)
        assert early.result_for(wrong)["status"] == "failed"


def test_the_pipeline_validates_beside_fusion_and_under_the_callers_x64_mode():
    response = optimize(_program())
    assert response["validation"]["status"] == "passed"
    assert "validate_background" in response["report"]["timings_s"]
    with jax.enable_x64(True):  # the thread runs under the caller's JAX config, not its own default
        x, w, v = (np.full(s, 0.5) for s in [(1, 1), (1, 1), (1,)])
        wide = capture(lambda x, w, v: (x @ w) * v, x, w, v)  # rewritten: x @ (w * v)
        response = optimize(wide)
        assert response["program"] != wide and response["validation"]["status"] == "passed"
