"""Translation validation catches a wrong program, tolerates only what the dtype allows, and says
`inconclusive` where it cannot tell."""
from __future__ import annotations

import copy
import json
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from wire_examples import projections, two_regions

from validation.compare import bit_identical, output_error
from validation.inputs import InputDraws, positive_inputs, random_inputs
from validation.region_check import CheckMemory
from validation.validate import validate, validate_whole
from wire.capture import capture


def _program():
    x = np.ones((4, 8), np.float32)
    return capture(lambda a, b: jnp.tanh(a) + b, x, x)


def test_identical_programs_are_identical_without_running():
    program = _program()
    result = validate(program, copy.deepcopy(program), "exact")
    assert result == {**result, "status": "identical", "max_rel_error": 0.0, "criterion": "identical", "trials": 0}


def test_renamed_and_reordered_programs_are_identical():
    program = _program()
    renamed = json.loads(json.dumps(program).replace('"v', '"renamed_v'))
    renamed["eqns"][0]["params"] = {**renamed["eqns"][0]["params"], "unused_default": None}
    assert validate(program, renamed)["status"] == "identical"


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
    finite = np.array([1.0, 2.0])
    assert output_error(finite, np.array([1.0, np.inf])) == float("inf")  # an inf the reference lacks
    assert output_error(finite, np.array([np.nan, 2.0])) == float("inf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matching infs are compared by position, without numpy's warnings
        assert output_error(np.array([np.inf, 2.0]), np.array([np.inf, 2.0])) == 0.0
    with np.errstate(over="ignore"):  # finite values whose difference overflows
        assert output_error(np.array([1e308]), np.array([-1e308])) == float("inf")


def test_exact_mode_sees_the_sign_of_zero():
    assert bit_identical(np.array([0.0, np.nan]), np.array([0.0, np.nan]))
    assert not bit_identical(np.array([0.0]), np.array([-0.0]))
    assert output_error(np.array([0.0]), np.array([-0.0])) == 0.0  # real mode: equal numbers


def _logistic(steps: int, expanded: bool):
    def fn(x):
        for _ in range(steps):
            x = 3.99 * x - 3.99 * x * x if expanded else 3.99 * x * (1.0 - x)
        return x
    return fn


def test_a_chaotic_original_is_inconclusive_not_passed():
    # 40 steps of the chaotic logistic map: the original's float64 outputs move by O(1) when its
    # inputs move by 1e-12, on every draw and every contraction: no comparison can tell
    x = np.full((64,), 0.3, np.float32)
    result = validate(capture(_logistic(40, False), x), capture(_logistic(40, True), x))
    assert result["status"] == "inconclusive" and result["trials"] == 0
    assert "could tell" in result["reason"] and all(not d["can_tell"] for d in result["draws"])


def test_the_same_rewrite_passes_where_the_original_is_stable():
    x = np.full((64,), 0.3, np.float32)
    result = validate(capture(_logistic(5, False), x), capture(_logistic(5, True), x))
    assert result["status"] == "passed" and result["criterion"] == "float64" and result["trials"] == 2
    assert result["max_rel_error"] < 1e-9  # evaluated in float64, the two agree far below float32's rounding


def test_a_later_candidates_whole_check_reuses_the_originals_runs_and_only_for_that_original():
    x = np.full((64,), 0.3, np.float32)
    five, six, draws = capture(_logistic(5, False), x), capture(_logistic(6, False), x), InputDraws()
    assert validate_whole(five, capture(_logistic(5, True), x), draws=draws)["status"] == "passed"
    assert len(draws.outputs) == 2  # the original's outputs on each of the two draws, and nudged
    assert validate_whole(five, capture(_logistic(6, True), x), draws=draws)["status"] == "failed"
    assert len(draws.outputs) == 2  # the original was not run again
    # another original on the same draws: its own runs, so five steps do not pass for six
    assert validate_whole(six, capture(_logistic(5, True), x), draws=draws)["status"] == "failed"
    assert validate_whole(six, capture(_logistic(6, True), x), draws=draws)["status"] == "passed"
    assert len(draws.outputs) == 4


def _scaled_after_chaos(scale):
    """40 chaotic logistic steps, then one step scaling by `scale`."""
    return lambda x: scale(_logistic(40, False)(x))


def test_a_rewritten_region_behind_a_chaotic_prefix_is_judged_on_its_own_sensitivity():
    # only the last step is rewritten (x/4 -> (x*0.5)*0.5): the values the chaotic map feeds it are
    # the program's own, and the region is stable under a nudge of them, so its check can tell
    x = np.full((64,), 0.3, np.float32)
    original = capture(_scaled_after_chaos(lambda y: y / 4.0), x)
    result = validate(original, capture(_scaled_after_chaos(lambda y: (y * 0.5) * 0.5), x))
    assert result["status"] == "passed" and result["criterion"] == "regions" and result["trials"] == 2
    # a wrong last step fails its region; the whole programs cannot tell, so it is not passed either
    assert validate(original, capture(_scaled_after_chaos(lambda y: y * 0.3), x))["status"] == "inconclusive"


def _rnn(negated: bool):
    def fn(x, w, u):  # a recurrent gain of 8: chaotic at standard-normal weights
        h = jnp.zeros((x.shape[1], w.shape[1]), x.dtype)
        for t in range(x.shape[0]):
            h = jnp.tanh(0.1 * x[t] @ w + (-h if negated else h) @ (8.0 / np.sqrt(32) * u))
        return h
    return fn


def test_a_wrong_recurrence_fails_even_where_the_original_is_chaotic():
    # the standard-normal draws cannot tell (the original itself moves by O(1)); contracted ones are
    # stable, and there the negated state is plainly different
    args = (np.ones((64, 4, 16), np.float32), np.ones((16, 32), np.float32), np.ones((32, 32), np.float32))
    result = validate(capture(_rnn(False), *args), capture(_rnn(True), *args))
    assert result["status"] == "failed"
    assert not result["draws"][0]["can_tell"] and result["draws"][-1]["can_tell"]
    assert result["draws"][-1]["contraction"] < 1


def test_a_whole_run_catches_a_wrong_program_in_float64():
    program = _program()
    wrong = copy.deepcopy(program)
    wrong["eqns"][-1]["op"] = "sub"
    result = validate_whole(program, wrong)
    assert result["criterion"] == "float64" and result["status"] == "failed"
    assert "output 0 differs" in result["reason"]


def test_complex_outputs_compare_both_parts():
    z = np.ones((4,), np.complex64)
    original = capture(lambda a, b: a * b + a, z, z)
    assert validate(original, capture(lambda a, b: a * jnp.conj(b) + a, z, z))["status"] == "failed"
    assert validate(original, capture(lambda a, b: a * (b + 1), z, z))["status"] == "passed"
    assert output_error(np.array([1 + 1j]), np.array([1 - 1j])) > 1.0


def test_integer_outputs_compare_exactly():
    x = np.ones((6, 5), np.float32)
    original = capture(lambda x: jnp.argmax(x * 2.0, axis=1), x)
    assert validate(original, capture(lambda x: jnp.argmax(x + x, axis=1), x))["status"] == "passed"
    assert validate(original, capture(lambda x: jnp.argmin(x * 2.0, axis=1), x))["status"] == "failed"


def test_draws_that_overflow_everywhere_tell_nothing_and_contracted_ones_decide():
    x = np.ones((64,), np.float32)
    original = capture(lambda x: jnp.exp(jnp.sum(x * x) * 1000.0), x)  # inf on standard-normal draws
    result = validate(original, capture(lambda x: jnp.exp(jnp.sum(x * x) * 1000.0) * 2.0, x))
    assert result["status"] == "failed"
    assert [d["can_tell"] for d in result["draws"]][:2] == [False, False] and result["draws"][-1]["contraction"] < 1


def _stack(merged: bool, layers: int = 3, order=(0, 1, 2), last_order=None, merged_from: int = 0):
    """`layers` blocks, each three projections of one input (merged into one matmul when asked,
    from layer `merged_from` on, at the highest precision: a region to value numbering) followed by
    the same downstream work: the shape of the optimizer's same-input merges."""
    def fn(x, *ws):
        for layer in range(layers):
            wq, wk, wv = ws[3 * layer:3 * layer + 3]
            if merged and layer >= merged_from:
                both = jnp.matmul(x, jnp.concatenate([wq, wk, wv], axis=1), precision="highest")
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


def test_only_the_rewritten_regions_run_each_on_its_own_values():
    result = validate(_stack(False), _stack(True))
    assert result["status"] == "passed" and result["criterion"] == "regions"
    assert result["regions"] == 3 and result["distinct_regions"] == 3
    assert result["region_share"] < 0.6


def test_alike_regions_fed_other_values_are_checked_apart():
    # sqrt(v*v) -> v holds where v >= 0 only: the first place feeds it |a|, the second -|a|
    a = np.linspace(-2, 2, 8).astype(np.float32)

    def fn(rewritten: bool):
        def f(a):
            u = jnp.abs(a)
            return (u * 1.0, -u * 1.0) if rewritten else (jnp.sqrt(u * u), jnp.sqrt(-u * -u))
        return f
    assert validate(capture(fn(False), a), capture(fn(True), a))["status"] == "failed"


def test_a_region_unlike_the_ones_checked_for_the_other_layers_is_checked_too():
    # layers 1-2 are one check, run once; the last layer's swapped q and v make another
    result = validate(_stack(False), _stack(True, last_order=(2, 1, 0)))
    assert result["status"] == "failed"


def test_a_wrong_region_fails_the_program():
    result = validate(_stack(False), _stack(True, order=(2, 1, 0)))  # q and v swapped in every layer
    assert result["status"] == "failed"


def test_a_failed_region_the_whole_run_could_not_see_is_inconclusive():
    # y's doubling shows in its region, but y reaches the output scaled by 1e-20: the whole programs
    # agree, and a wrong value there would not show either
    x = np.ones((4, 8), np.float32)
    original = capture(lambda a, b: jnp.sin(jnp.cos(a)) + 1e-20 * b, x, x)
    result = validate(original, capture(lambda a, b: jnp.sin(jnp.cos(a)) + 1e-20 * (b * 2.0), x, x))
    assert result["status"] == "inconclusive" and result["criterion"] == "regions"
    assert "cannot tell" in result["reason"]


def test_a_failed_region_is_overruled_where_a_change_there_would_have_shown():
    # value numbering pairs the candidate's tanh with the original's doubled tanh here (a wrong
    # guess): the region disagrees, but a change that size there moves the outputs, and the whole
    # programs agree
    x = np.ones((4, 8), np.float32)
    original = capture(lambda a, b: jnp.sin(jnp.cos(jnp.tanh(a) * 2.0 - b)), x, x)
    result = validate(original, capture(lambda a, b: jnp.sin(jnp.cos(jnp.tanh(a) - (b - jnp.tanh(a)))), x, x))
    assert result["status"] == "passed" and "pairing was wrong" in result["reason"]


def test_a_region_check_that_passed_on_the_same_draws_is_not_run_again():
    # the last layer alone merged is the check the first candidate ran there, on the same values
    original, memory = _stack(False), CheckMemory.for_mode("real")
    assert validate(original, _stack(True), memory=memory)["status"] == "passed" and len(memory.passed) == 3
    again = validate(original, _stack(True, merged_from=2), memory=memory)
    assert again["status"] == "passed" and again["reused_regions"] == 1 and again["draws"] == []
    assert "reused_values" not in again


def test_a_candidate_computing_what_a_passed_check_showed_runs_nothing():
    original, memory = _stack(False), CheckMemory.for_mode("real")
    validate(original, _stack(True), memory=memory)
    again = validate(original, _stack(True), memory=memory)
    assert again["status"] == "passed" and again["reused_values"] == 3 and again["draws"] == []


def test_a_new_region_beside_reused_ones_is_checked_and_both_are_reported():
    original, memory = two_regions(False, False), CheckMemory.for_mode("real")
    validate(original, two_regions(True, False), memory=memory)
    result = validate(original, two_regions(True, True), memory=memory)
    assert result["status"] == "passed" and result["distinct_regions"] == 1 and result["reused_values"] == 1
    assert len(memory.passed) == 2 and [d["can_tell"] for d in result["draws"]] == [True, True]


def test_reused_region_checks_never_pass_a_wrong_new_region():
    original, memory = _stack(False), CheckMemory.for_mode("real")
    validate(original, _stack(True), memory=memory)
    assert validate(original, _stack(True, last_order=(2, 1, 0)), memory=memory)["status"] == "failed"
    assert len(memory.passed) == 3


def test_regions_find_a_wrong_weight_a_whole_run_would_barely_see():
    from validation.regions import find_regions
    program = _stack(False)
    wrong = copy.deepcopy(program)
    last = [e for e in wrong["eqns"] if e["op"] == "dot_general"][-1]
    last["in"] = [last["in"][0], wrong["inputs"][1]["name"]]  # the last layer reuses the first's weight
    plan = find_regions(program, wrong)
    assert plan is not None and plan.regions
    assert validate(program, wrong)["status"] == "failed"


def test_inputs_are_standard_normal_unless_scaled_by_fan_in():
    program = _stack(False, layers=1)
    plain, scaled = random_inputs(program, 0), random_inputs(program, 0, scaled=True)
    assert np.array_equal(plain[0], scaled[0])  # x is a left operand: never scaled
    assert np.allclose(scaled[1], plain[1] / 4.0)  # a right operand contracting 16 values


def test_drawing_ahead_stops_once_a_check_starts_and_the_check_draws_the_same_values():
    program, started = _stack(False, layers=1), threading.Event()
    ahead = InputDraws()
    ahead.fill(program)
    assert len(ahead.arrays) == 2 * 2 * len(program["inputs"])  # a normal and a direction per input and seed
    started.set()
    stopped = InputDraws()
    stopped.fill(program, until=started)
    assert not stopped.arrays
    for seed in (0, 1):  # what a check draws itself equals what was drawn ahead
        assert all(np.array_equal(a, b) for a, b in zip(random_inputs(program, seed, draws=stopped),
                                                         random_inputs(program, seed, draws=ahead)))


def test_an_output_with_no_finite_value_beside_others_is_compared_by_its_positions():
    # the mask is -inf on every draw (x never exceeds 100): the tanh output still tells
    def program(rewritten: bool, wrong: bool = False):
        def fn(x):
            scaled = jnp.tanh(x) + jnp.tanh(x) if rewritten else jnp.tanh(x) * 2.0
            return scaled + (1.0 if wrong else 0.0), jnp.where(x > 100.0, x, -jnp.inf)
        return capture(fn, np.ones((4, 8), np.float32))

    result = validate_whole(program(False), program(True))
    assert result["status"] == "passed" and "outputs [1]" in result["reason"]
    assert validate_whole(program(False), program(True, wrong=True))["status"] == "failed"


def _batch_norm(folded: bool, wrong: bool = False):
    """Inference batch norm between two matmuls: as written, or with its scale folded into the
    first weight (a NaN from one channel's variance spreads to every output through the second)."""
    def fn(x, w, mean, var, gamma, beta):
        scale = gamma * (jnp.sqrt(var + 1e-5) if wrong else jax.lax.rsqrt(var + 1e-5))
        if folded:
            return (x @ (w * scale) + (beta - mean * scale)) @ w
        return ((x @ w - mean) * scale + beta) @ w
    rng = np.random.default_rng(0)
    vec = lambda: rng.normal(size=(16,)).astype(np.float32)
    return capture(fn, rng.normal(size=(8, 16)).astype(np.float32), rng.normal(size=(16, 16)).astype(np.float32),
                   vec(), np.abs(vec()), vec(), vec())


def test_a_variance_feeding_rsqrt_is_drawn_positive_and_others_are_not():
    program = _batch_norm(False)
    names = [s["name"] for s in program["inputs"]]
    assert positive_inputs(program) == {names[3]}
    drawn = random_inputs(program, 0)
    assert (drawn[3] > 0).all() and (drawn[2] < 0).any() and (drawn[4] < 0).any()


def test_a_sign_flip_before_rsqrt_keeps_the_input_normal():
    x = np.ones((16,), np.float32)
    assert positive_inputs(capture(lambda v: jax.lax.rsqrt(-v + 1.0), x)) == frozenset()


def test_a_batch_norm_folded_into_its_weight_passes_and_a_wrong_fold_fails():
    original = _batch_norm(False)
    assert validate(original, _batch_norm(True))["status"] == "passed"  # var drawn normal: inconclusive
    assert validate(original, _batch_norm(True, wrong=True))["status"] == "failed"


def _as_written(q, k, v):
    return q * k + v


def test_a_later_candidate_starts_from_the_values_an_earlier_check_showed():
    # the first candidate merges the projections; the second regroups what follows them: its check
    # runs only from the merged matmul's slices on, as an unchanged value would be
    original, memory = projections(False, _as_written), CheckMemory.for_mode("real")
    first = validate(original, projections(True, _as_written), memory=memory)
    assert first["status"] == "passed" and len(first["roots"]) == 3
    second = validate(original, projections(True, lambda q, k, v: q * k - (-v)), memory=memory)
    assert second["status"] == "passed" and second["reused_values"] == 3 and len(second["roots"]) == 1
    assert second["trials"] == first["trials"] and second["max_rel_error"] >= first["max_rel_error"]


def test_a_wrong_candidate_fails_from_values_an_earlier_check_showed():
    original, memory = projections(False, _as_written), CheckMemory.for_mode("real")
    validate(original, projections(True, _as_written), memory=memory)
    wrong = validate(original, projections(True, lambda q, k, v: q * k - v), memory=memory)
    assert wrong["status"] == "failed"


def test_values_of_a_failed_check_are_never_taken_as_shown():
    original, memory = projections(False, _as_written), CheckMemory.for_mode("real")
    assert validate(original, projections(True, _as_written, swapped=True), memory=memory)["status"] == "failed"
    assert not memory.verified
    later = validate(original, projections(True, lambda q, k, v: q * k - (-v), swapped=True), memory=memory)
    assert later["status"] == "failed"


def test_a_check_that_convolves_in_groups_compiles_optimized_and_evaluates_the_convolution_in_float64():
    from validation.widen import (CHECK_COMPILER_OPTIONS, GROUPED_CONVOLUTION_CHECK_OPTIONS, Widened,
                                  check_compiler_options)

    x, w = np.random.default_rng(0).standard_normal((2, 3, 2, 16)).astype(np.float32), np.ones((4, 1, 3), np.float32)

    def convolved_steps(xs, kernel, groups):  # the convolution sits in a loop body, a nested program
        conv = lambda x: jax.lax.conv_general_dilated(x, kernel, (1,), "SAME", feature_group_count=groups)
        return jax.lax.scan(lambda carry, x: (carry, conv(x)), 0.0, xs)[1]

    grouped = capture(lambda xs, kernel: convolved_steps(xs, kernel, 2), x, w)
    ungrouped = capture(lambda xs, kernel: convolved_steps(xs, kernel, 1), x, np.ones((4, 2, 3), np.float32))
    assert check_compiler_options([ungrouped]) == CHECK_COMPILER_OPTIONS
    assert check_compiler_options([ungrouped, grouped]) == GROUPED_CONVOLUTION_CHECK_OPTIONS != CHECK_COMPILER_OPTIONS
    wide = x.astype(np.float64)
    rows = np.apply_along_axis(np.convolve, -1, wide, np.ones(3), "same")  # steps x batch x channel x width
    expected = np.repeat(rows, 2, axis=2)  # each group's two output channels convolve its one input channel
    np.testing.assert_allclose(Widened(grouped)([wide, w.astype(np.float64)])[0], expected, rtol=1e-12)
