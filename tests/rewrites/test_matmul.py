"""MATMUL: every rule is sound in float64, fires on its own with well-typed results, stays off in
exact mode; goal tests for chains and transposes, negative tests for unsound regroupings."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (ANALYSIS_RULES, VALIDATED, RuleCase, check_real_only, check_sound_and_proven, dims,
                          ill_typed_nodes, normwise_error, optimized_matches, proves_equal, random_args, rule_mode,
                          saturate_fn, seeds)

from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from service.optimizer.pipeline import optimize
from wire.capture import capture

chain = st.tuples(dims(), dims(), dims(), dims()).map(lambda d: ([d[:2], d[1:3], d[2:]], {}))
pair = st.tuples(dims(), dims(), dims()).map(lambda d: ([d[:2], d[1:]], {}))
# a[b, m, k], b[b, k, n], c[b, n, p]
batched_chain = st.tuples(dims(1, 4), dims(), dims(), dims(), dims()).map(
    lambda d: ([(d[0], d[1], d[2]), (d[0], d[2], d[3]), (d[0], d[3], d[4])], {}))
# a[k, m] (used transposed), b[k, n]; a[m, k], b[n, k] (b used transposed)
lhs_transposed = pair.map(lambda c: ([c[0][0][::-1], c[0][1]], {}))
rhs_transposed = pair.map(lambda c: ([c[0][0], c[0][1][::-1]], {}))
# x[m, k], w[k, n] and a scalar s
scaled = pair.map(lambda c: ([*c[0], ()], {}))
# x[m, k], w[k, n] and per-column scales v[n]
column_scaled = pair.map(lambda c: ([*c[0], (c[0][1][1],)], {}))
# x[m, k], w1[k, n], w2[k, n]
two_weights = pair.map(lambda c: ([*c[0], c[0][1]], {}))
# x[m, k1], w1[k1, n], h[m, k2], w2[k2, n]
two_products = st.tuples(dims(), dims(), dims(), dims()).map(
    lambda d: ([(d[0], d[1]), (d[1], d[3]), (d[0], d[2]), (d[2], d[3])], {}))


def broadcast(x, shape, dims):
    return lax.broadcast_in_dim_p.bind(x, shape=tuple(shape), broadcast_dimensions=tuple(dims), sharding=None)


def bmm(a, b):
    return lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))))


def contract(a, b, i, j):
    """a dot_general contracting a's dim i with b's dim j, with the params jnp's `@` gives it."""
    return lax.dot_general(a, b, (((i,), (j,)), ((), ())), preferred_element_type=a.dtype)


def columns(v, like):
    """v[n] broadcast along the rows of `like` [*, n] (a per-column scale)."""
    return broadcast(v, like.shape, (1,))


CASES: dict[str, RuleCase] = {
    "matmul-assoc-right": RuleCase(lambda a, b, c: (a @ b) @ c, lambda a, b, c: a @ (b @ c), chain),
    "matmul-assoc-left": RuleCase(lambda a, b, c: a @ (b @ c), lambda a, b, c: (a @ b) @ c, chain),
    "transpose-of-matmul": RuleCase(lambda a, b: (a @ b).T, lambda a, b: b.T @ a.T, pair),
    "batched-matmul-assoc": RuleCase(lambda a, b, c: bmm(bmm(a, b), c), lambda a, b, c: bmm(a, bmm(b, c)),
                                     batched_chain),
    "fold-transpose-lhs": RuleCase(lambda a, b: a.T @ b, lambda a, b: contract(a, b, 0, 0), lhs_transposed),
    "fold-transpose-rhs": RuleCase(lambda a, b: a @ b.T, lambda a, b: contract(a, b, 1, 1), rhs_transposed),
    "scale-into-matmul": RuleCase(lambda x, w, s: (x @ w) * s, lambda x, w, s: x @ (w * s), scaled),
    "scale-out-of-matmul": RuleCase(lambda x, w, s: x @ (w * s), lambda x, w, s: (x @ w) * s, scaled),
    "column-scale-into-matmul": RuleCase(lambda x, w, v: (x @ w) * v,  # jnp: broadcast v to [1, n]
                                         lambda x, w, v: x @ (w * columns(v, w)), column_scaled),
    "factor-matmul-add": RuleCase(lambda x, w1, w2: x @ w1 + x @ w2, lambda x, w1, w2: x @ (w1 + w2), two_weights),
    "expand-matmul-add": RuleCase(lambda x, w1, w2: x @ (w1 + w2), lambda x, w1, w2: x @ w1 + x @ w2, two_weights),
    "accumulate-matmuls": RuleCase(lambda x, w1, h, w2: x @ w1 + h @ w2,
                                   lambda x, w1, h, w2: jnp.concatenate([x, h], 1) @ jnp.concatenate([w1, w2], 0),
                                   two_products),
}


def test_every_matmul_rule_has_a_case():
    assert set(CASES) == set(MATMUL.names) - ANALYSIS_RULES
    assert all(rule_mode(MATMUL, n) == "real" for n in MATMUL.names)  # all reorder float sums


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(MATMUL, name, CASES[name], data, seed)


@pytest.mark.slow
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
    assert response["validation"]["status"] in VALIDATED, response["report"]["notes"]


def test_pipeline_survives_chain_with_rank3_middle_factor():
    a, b, c = random_args(5, [(2, 3), (3, 4, 6), (4, 5)])
    response = optimize(capture(lambda a, b, c: dot(dot(a, b), c), a, b, c))
    assert response["validation"]["status"] in VALIDATED


def test_pipeline_survives_transpose_of_rank3_by_vector_dot():
    a, b = random_args(6, [(4, 3, 5), (3,)])
    response = optimize(capture(lambda a, b: dot(a, b).T, a, b))
    assert response["validation"]["status"] in VALIDATED


def test_rank3_regrouping_really_changes_the_value():
    # Keeps the rank tests above honest: the unsound goal is unsound, not a test-writing mistake.
    a, b, c = random_args(3, [(2, 3, 4), (3, 4), (4, 5)], np.float64)
    with jax.enable_x64(True):
        assert normwise_error(dot(dot(a, b), c), dot(a, dot(b, c))) > 0.1


# --- Batched chains, folded transposes, scales and sums of matmuls -----------------------------

BA, BB, BC = random_args(7, [(2, 3, 4), (2, 4, 5), (2, 5, 3)])


@pytest.mark.parametrize("left_first", [True, False])
def test_batched_chain_regroups_both_ways(left_first):
    def chains(a, b, c):
        left, right = bmm(bmm(a, b), c), bmm(a, bmm(b, c))
        return (left, right) if left_first else (right, left)
    result = saturate_fn(chains, [BA, BB, BC], [MATMUL], only=["batched-matmul-assoc"])
    assert result.same_class(0, 1) and not ill_typed_nodes(result)


def test_scale_into_matmul_takes_literal_and_computed_scalars():
    x, w, v = random_args(8, [(3, 4), (4, 5), (6,)])
    assert proves_equal(lambda x, w, v: (x @ w) * 2.5, lambda x, w, v: x @ (w * 2.5), [x, w, v], [MATMUL],
                        only=["scale-into-matmul"])
    assert proves_equal(lambda x, w, v: (x @ w) * v.sum(), lambda x, w, v: x @ (w * v.sum()), [x, w, v],
                        [MATMUL], only=["scale-into-matmul"])


SQ4 = random_args(9, [(4, 4), (4, 4), (4, 4), (4,)])


def test_scale_into_matmul_does_not_fire_for_a_matrix_scale():
    x, w, s, _ = SQ4
    result = saturate_fn(lambda x, w, s: ((x @ w) * s, x @ (w * s)), [x, w, s], [MATMUL])
    assert not result.same_class(0, 1)  # an elementwise matrix scale does not commute with @
    assert not {"scale-into-matmul", "scale-out-of-matmul"} & set(result.report.rules_fired)
    assert not ill_typed_nodes(result)


def test_column_scale_into_matmul_does_not_fire_for_a_row_scale():
    x, w, _, u = SQ4
    rows = lambda u, like: broadcast(u, like.shape, (0,))
    result = saturate_fn(lambda x, w, u: ((x @ w) * rows(u, x @ w), x @ (w * rows(u, w)), x @ (w * columns(u, w))),
                         [x, w, u], [MATMUL])
    assert not result.same_class(0, 1) and result.view.roots[0] != result.view.roots[2]
    assert "column-scale-into-matmul" not in result.report.rules_fired
    assert not ill_typed_nodes(result)


def test_factor_matmul_add_needs_a_shared_left_operand():
    x1, x2, w1, w2 = SQ4[0], SQ4[1], SQ4[2], SQ4[0]
    result = saturate_fn(lambda x1, x2, w1, w2: (x1 @ w1 + x2 @ w2, x1 @ (w1 + w2), x2 @ (w1 + w2)),
                         [x1, x2, w1, w2], [MATMUL])
    assert len({result.view.roots[k] for k in range(3)}) == 3
    alone = saturate_fn(lambda x1, x2, w1, w2: x1 @ w1 + x2 @ w2, [x1, x2, w1, w2], [MATMUL],
                        only=["factor-matmul-add"])
    assert "factor-matmul-add" not in alone.report.rules_fired


def test_accumulated_products_keep_each_input_with_its_own_weight():
    x, h, w1, w2 = random_args(14, [(3, 4), (3, 4), (4, 5), (4, 5)])
    assert not proves_equal(lambda x, h, w1, w2: x @ w1 + h @ w2,
                            lambda x, h, w1, w2: jnp.concatenate([x, h], 1) @ jnp.concatenate([w2, w1], 0),
                            [x, h, w1, w2], [MATMUL])


def test_products_a_broadcasting_add_sums_are_not_accumulated():
    # x@w1 is [1, 5], h@w2 [3, 5]: the add broadcasts the row, and no concatenation of x and h exists
    x, h, w1, w2 = random_args(15, [(1, 4), (3, 4), (4, 5), (4, 5)])
    result = saturate_fn(lambda x, h, w1, w2: x @ w1 + h @ w2, [x, h, w1, w2], [MATMUL], only=["accumulate-matmuls"])
    assert "accumulate-matmuls" not in result.report.rules_fired and not ill_typed_nodes(result)


def test_folded_transposes_contract_the_right_dims():
    a, b = SQ4[:2]
    assert not proves_equal(lambda a, b: a.T @ b, lambda a, b: contract(a, b, 1, 0), [a, b], [MATMUL, LAYOUT])
    assert not proves_equal(lambda a, b: a.T @ b, lambda a, b: contract(a, b, 1, 1), [a, b], [MATMUL, LAYOUT])
    assert not proves_equal(lambda a, b: a @ b.T, lambda a, b: contract(a, b, 0, 0), [a, b], [MATMUL, LAYOUT])


def test_batched_regrouping_does_not_permute_factors():
    a, b, c = random_args(10, [(2, 3, 3)] * 3)
    assert not proves_equal(lambda a, b, c: bmm(bmm(a, b), c), lambda a, b, c: bmm(a, bmm(c, b)), [a, b, c],
                            [MATMUL, LAYOUT])


# --- Mixed precision: bfloat16 operands, float32 products (preferred_element_type) ---------------

BF16 = jnp.bfloat16


def f32_matmul(a, b):
    return jnp.matmul(a, b, preferred_element_type=jnp.float32)


MIXED = [a.astype(BF16) for a in random_args(11, [(3, 4), (4, 5)])]


def test_scale_into_matmul_keeps_dtypes_of_a_mixed_precision_matmul():
    x, w = MIXED
    result = saturate_fn(lambda x, w, s: f32_matmul(x, w) * s, [x, w, np.float32(2.0)], [MATMUL],
                         only=["scale-into-matmul"])
    assert not ill_typed_nodes(result)


def test_scale_out_of_matmul_keeps_dtypes_of_a_mixed_precision_matmul():
    x, w = MIXED
    result = saturate_fn(lambda x, w, s: f32_matmul(x, w * s), [x, w, np.asarray(2.0, BF16)], [MATMUL],
                         only=["scale-out-of-matmul"])
    assert not ill_typed_nodes(result)


def test_column_scale_into_matmul_keeps_dtypes_of_a_mixed_precision_matmul():
    x, w = MIXED
    v = random_args(12, [(5,)])[0]
    result = saturate_fn(lambda x, w, v: f32_matmul(x, w) * v, [x, w, v], [MATMUL],
                         only=["column-scale-into-matmul"])
    assert not ill_typed_nodes(result)


def test_factor_matmul_add_keeps_dtypes_of_mixed_weight_dtypes():
    x, w1 = MIXED
    w2 = random_args(13, [(4, 5)])[0]
    result = saturate_fn(lambda x, w1, w2: f32_matmul(x, w1) + f32_matmul(x, w2), [x, w1, w2], [MATMUL],
                         only=["factor-matmul-add"])
    assert not ill_typed_nodes(result)


def test_pipeline_survives_sum_of_matmuls_with_mixed_weight_dtypes():
    x, w1 = MIXED
    w2 = random_args(13, [(4, 5)])[0]
    response = optimize(capture(lambda x, w1, w2: f32_matmul(x, w1) + f32_matmul(x, w2), x, w1, w2))
    assert response["validation"]["status"] in VALIDATED


# --- Implicit size-1 broadcasting: mul broadcasts a size-1 axis of the matmul against the scale ---

def test_column_scale_into_matmul_keeps_shapes_when_the_matmul_has_one_column():
    x, w, v = random_args(14, [(3, 4), (4, 1), (5,)])
    result = saturate_fn(lambda x, w, v: (x @ w) * v, [x, w, v], [MATMUL], only=["column-scale-into-matmul"])
    assert not ill_typed_nodes(result)


def test_column_scale_into_matmul_keeps_shapes_when_the_matmul_has_one_row():
    x, w, v = random_args(15, [(1, 4), (4, 5), (5,)])
    result = saturate_fn(lambda x, w, v: lax.mul(x @ w, broadcast(v, (3, 5), (1,))), [x, w, v], [MATMUL],
                         only=["column-scale-into-matmul"])
    assert not ill_typed_nodes(result)
