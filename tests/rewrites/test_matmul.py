"""MATMUL: every rule is sound in float64, fires on its own with well-typed results, stays off in
exact mode; goal tests for chains and transposes, negative tests for unsound regroupings."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (
    ANALYSIS_RULES,
    RuleCase,
    check_real_only,
    check_sound_and_proven,
    dims,
    ill_typed_nodes,
    normwise_error,
    optimized_matches,
    proves_equal,
    random_args,
    rule_mode,
    saturate_fn,
    seeds,
)

from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from service.capture import capture
from service.pipeline import optimize

chain = st.tuples(dims(), dims(), dims(), dims()).map(lambda d: ([d[:2], d[1:3], d[2:]], {}))
pair = st.tuples(dims(), dims(), dims()).map(lambda d: ([d[:2], d[1:]], {}))

CASES: dict[str, RuleCase] = {
    "matmul-assoc-right": RuleCase(lambda a, b, c: (a @ b) @ c, lambda a, b, c: a @ (b @ c), chain),
    "matmul-assoc-left": RuleCase(lambda a, b, c: a @ (b @ c), lambda a, b, c: (a @ b) @ c, chain),
    "transpose-of-matmul": RuleCase(lambda a, b: (a @ b).T, lambda a, b: b.T @ a.T, pair),
}


def test_every_matmul_rule_has_a_case():
    assert set(CASES) == set(MATMUL.names) - ANALYSIS_RULES
    assert all(rule_mode(MATMUL, n) == "real" for n in MATMUL.names)  # all reorder float sums


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(MATMUL, name, CASES[name], data, seed)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_real_rule_fires_in_real_mode_only(name, data, seed):
    check_real_only(MATMUL, name, CASES[name], data, seed)


# --- Goals ---------------------------------------------------------------------------------------

A, B, C, D = random_args(0, [(3, 5), (5, 4), (4, 6), (6, 2)])


def test_matmul_chain_regroups_both_ways():
    assert proves_equal(lambda a, b, c: (a @ b) @ c, lambda a, b, c: a @ (b @ c), [A, B, C], [MATMUL])
    four = lambda a, b, c, d: ((a @ b) @ c) @ d
    assert proves_equal(four, lambda a, b, c, d: a @ (b @ (c @ d)), [A, B, C, D], [MATMUL])
    assert proves_equal(four, lambda a, b, c, d: (a @ (b @ c)) @ d, [A, B, C, D], [MATMUL])


def test_transpose_of_matmul_swaps_and_transposes():
    assert proves_equal(lambda a, b: (a @ b).T, lambda a, b: b.T @ a.T, [A, B], [MATMUL])


def test_transpose_of_chain_is_reversed_chain_of_transposes():
    assert proves_equal(lambda a, b, c: (a @ b @ c).T, lambda a, b, c: c.T @ b.T @ a.T,
                        [A, B, C], [MATMUL, LAYOUT])


def test_all_regroupings_stay_well_typed():
    result = saturate_fn(lambda a, b, c, d: ((a @ b) @ c @ d).T, [A, B, C, D], [MATMUL, LAYOUT])
    assert result.report.stop_reason == "saturated"
    assert not ill_typed_nodes(result)


def test_pipeline_picks_a_correct_grouping_of_a_skinny_chain():
    a, b, c = random_args(1, [(64, 64), (64, 64), (64, 1)])
    response = optimized_matches(lambda a, b, c: (a @ b) @ c, [a, b, c], "real")
    assert "matmul-assoc-right" in response["report"]["rewrites"]
    first = response["program"]["eqns"][0]
    assert first["op"] == "dot_general" and first["out"][0]["shape"] == [64, 1]  # b @ c first


# --- Negative goals ------------------------------------------------------------------------------

SQ = random_args(2, [(4, 4), (4, 4), (4, 4)])


def test_matmul_does_not_commute():
    assert not proves_equal(lambda a, b: a @ b, lambda a, b: b @ a, SQ[:2], [MATMUL, LAYOUT])


def test_transpose_of_matmul_does_not_keep_the_order():
    assert not proves_equal(lambda a, b: (a @ b).T, lambda a, b: a.T @ b.T, SQ[:2], [MATMUL, LAYOUT])


def test_regrouping_does_not_permute_factors():
    assert not proves_equal(lambda a, b, c: (a @ b) @ c, lambda a, b, c: a @ (c @ b), SQ, [MATMUL, LAYOUT])


def test_no_regrouping_in_exact_mode():
    assert not proves_equal(lambda a, b, c: (a @ b) @ c, lambda a, b, c: a @ (b @ c), SQ, [MATMUL], "exact")


# --- Rank: the rules' patterns match any dot contracting lhs dim 1 with rhs dim 0 --------------

dn = (((1,), (0,)), ((), ()))
dot = lambda a, b: lax.dot_general(a, b, dn)


def test_assoc_right_does_not_regroup_a_rank3_lhs():
    args = random_args(3, [(2, 3, 4), (3, 4), (4, 5)])
    lhs, rhs = (lambda a, b, c: dot(dot(a, b), c)), (lambda a, b, c: dot(a, dot(b, c)))
    assert not proves_equal(lhs, rhs, args, [MATMUL], only=["matmul-assoc-right"])


def test_assoc_left_on_a_rank3_lhs_extracts_a_correct_program():
    a, b, c = random_args(4, [(2, 3, 4), (3, 4), (4, 5)])
    response = optimize(capture(lambda a, b, c: dot(a, dot(b, c)), a, b, c))
    assert response["validation"]["status"] == "passed", response["report"]["notes"]


def test_pipeline_survives_chain_with_rank3_middle_factor():
    a, b, c = random_args(5, [(2, 3), (3, 4, 6), (4, 5)])
    response = optimize(capture(lambda a, b, c: dot(dot(a, b), c), a, b, c))
    assert response["validation"]["status"] == "passed"


def test_pipeline_survives_transpose_of_rank3_by_vector_dot():
    a, b = random_args(6, [(4, 3, 5), (3,)])
    response = optimize(capture(lambda a, b: dot(a, b).T, a, b))
    assert response["validation"]["status"] == "passed"


def test_rank3_regrouping_really_changes_the_value():
    # Keeps the rank tests above honest: the unsound goal is unsound, not a test-writing mistake.
    a, b, c = random_args(3, [(2, 3, 4), (3, 4), (4, 5)], np.float64)
    with jax.enable_x64(True):
        assert normwise_error(dot(dot(a, b), c), dot(a, dot(b, c))) > 0.1
