"""Translation validation catches a wrong program and tolerates only what the dtype allows."""
from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np

from lowering.validate import output_error, validate
from service.capture import capture


def _program():
    x = np.ones((4, 8), np.float32)
    return capture(lambda a, b: jnp.tanh(a) + b, x, x)


def test_identical_programs_pass_with_zero_error():
    program = _program()
    result = validate(program, copy.deepcopy(program), "exact")
    assert result == {**result, "status": "passed", "max_rel_error": 0.0, "trials": 2}


def test_a_wrong_program_fails():
    program = _program()
    wrong = copy.deepcopy(program)
    wrong["eqns"][-1]["op"] = "sub"
    result = validate(program, wrong)
    assert result["status"] == "failed" and result["max_rel_error"] > 0.1


def test_error_is_normwise_relative_and_nan_positions_must_match():
    ref = np.array([1.0, 100.0, np.nan], np.float32)
    assert output_error(ref, ref.copy()) == 0.0
    assert np.isclose(output_error(ref, np.array([1.0, 101.0, np.nan], np.float32)), 0.01)
    assert output_error(ref, np.array([1.0, 100.0, 0.0], np.float32)) == float("inf")
    assert output_error(np.array([1, 2]), np.array([1, 3])) == 1.0


def test_exact_mode_sees_the_sign_of_zero():
    from lowering.validate import bit_identical
    assert bit_identical(np.array([0.0, np.nan]), np.array([0.0, np.nan]))
    assert not bit_identical(np.array([0.0]), np.array([-0.0]))
    assert output_error(np.array([0.0]), np.array([-0.0])) == 0.0  # real mode: equal numbers


def test_ill_conditioned_programs_are_judged_against_a_float64_reference():
    # 40 steps of the chaotic logistic map: two algebraically equal float32 programs diverge
    # completely, but neither is less accurate than the other against float64.
    def original(x):
        for _ in range(40):
            x = 3.99 * x * (1.0 - x)
        return x

    def expanded(x):
        for _ in range(40):
            x = 3.99 * x - 3.99 * x * x
        return x

    x = np.full((64,), 0.3, np.float32)
    result = validate(capture(original, x), capture(expanded, x))
    assert result["criterion"] == "float64_reference"
    assert result["status"] == "passed"
    assert result["original_rel_error"] > 1e-2  # the original itself is far from exact here


def test_float64_reference_still_catches_a_wrong_program():
    program = _program()
    wrong = copy.deepcopy(program)
    wrong["eqns"][-1]["op"] = "sub"
    result = validate(program, wrong)
    assert result["criterion"] == "float64_reference" and result["status"] == "failed"
