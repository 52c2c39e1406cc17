"""Translation validation catches a wrong program and tolerates only what the dtype allows."""
from __future__ import annotations

import copy
import json

import jax.numpy as jnp
import numpy as np

from lowering.validate import output_error, validate
from service.capture import capture


def _program():
    x = np.ones((4, 8), np.float32)
    return capture(lambda a, b: jnp.tanh(a) + b, x, x)


def test_identical_programs_pass_with_zero_error_without_running():
    program = _program()
    result = validate(program, copy.deepcopy(program), "exact")
    assert result == {**result, "status": "passed", "max_rel_error": 0.0, "criterion": "identical", "trials": 0}


def test_renamed_and_reordered_programs_are_identical():
    program = _program()
    renamed = json.loads(json.dumps(program).replace('"v', '"renamed_v'))
    renamed["eqns"][0]["params"] = {**renamed["eqns"][0]["params"], "unused_default": None}
    assert validate(program, renamed)["criterion"] == "identical"


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


def _stack(merged: bool, layers: int = 3, order=(0, 1, 2), last_order=None):
    """`layers` blocks, each three projections of one input (merged into one matmul when asked)
    followed by the same downstream work: the shape of the optimizer's same-input merges."""
    def fn(x, *ws):
        for layer in range(layers):
            wq, wk, wv = ws[3 * layer:3 * layer + 3]
            if merged:
                both = x @ jnp.concatenate([wq, wk, wv], axis=1)
                parts = [both[:, 16 * i:16 * (i + 1)] for i in range(3)]
                q, k, v = (parts[i] for i in (last_order if last_order and layer == layers - 1 else order))
            else:
                q, k, v = x @ wq, x @ wk, x @ wv
            x = jnp.tanh(q * k + v) @ ws[3 * layer]
        return x

    rng = np.random.default_rng(0)
    args = [rng.normal(size=(8, 16)).astype(np.float32)] + \
        [rng.normal(size=(16, 16)).astype(np.float32) for _ in range(3 * layers)]
    return capture(fn, *args)


def test_only_the_rewritten_regions_run_once_per_distinct_region():
    result = validate(_stack(False), _stack(True))
    assert result["status"] == "passed" and result["criterion"] == "regions"
    assert result["regions"] == 3 and result["distinct_regions"] == 1
    assert result["region_share"] < 0.6


def test_a_region_unlike_the_ones_checked_for_the_other_layers_is_checked_too():
    # layers 1-2 are one check, run once; the last layer's swapped q and v make another
    result = validate(_stack(False), _stack(True, last_order=(2, 1, 0)))
    assert result["status"] == "failed"


def test_a_wrong_region_fails_the_program():
    result = validate(_stack(False), _stack(True, order=(2, 1, 0)))  # q and v swapped in every layer
    assert result["status"] == "failed" and result["criterion"] != "regions"


def test_regions_find_a_wrong_weight_a_whole_run_would_barely_see():
    from lowering.regions import find_regions
    program = _stack(False)
    wrong = copy.deepcopy(program)
    last = [e for e in wrong["eqns"] if e["op"] == "dot_general"][-1]
    last["in"] = [last["in"][0], wrong["inputs"][1]["name"]]  # the last layer reuses the first's weight
    plan = find_regions(program, wrong)
    assert plan is not None and plan.regions
    assert validate(program, wrong)["status"] == "failed"


def test_inputs_are_standard_normal_unless_scaled_by_fan_in():
    from lowering.validate import random_inputs
    program = _stack(False, layers=1)
    plain, scaled = random_inputs(program, 0), random_inputs(program, 0, scaled=True)
    assert np.array_equal(plain[0], scaled[0])  # x is a left operand: never scaled
    assert np.allclose(scaled[1], plain[1] / 4.0)  # a right operand contracting 16 values


def test_a_chain_that_overflows_on_standard_normal_inputs_gets_a_scaled_trial():
    def chain(transposed_at):
        def fn(*ms):
            out = ms[0]
            for k, m in enumerate(ms[1:]):
                out = out @ (m.T if k == transposed_at else m)
            return out
        return fn

    ms = [np.ones((32, 32), np.float32)] * 60  # 32^60 overflows float32
    program, wrong = capture(chain(None), *ms), capture(chain(30), *ms)
    assert validate(program, copy.deepcopy(program), "exact")["criterion"] == "identical"
    result = validate(program, wrong)
    assert result["status"] == "failed" and result["trials"] == 2  # the second trial is the scaled one
