"""MERGE: matmuls sharing their left operand become one matmul on concatenated weights plus
slices, and matmuls sharing their weight one matmul on stacked inputs; sound in float64, ordered
(each pair once), bounded (QKV merges three ways), well typed, and never applied to matmuls that
do not share an operand."""
from __future__ import annotations

import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (ANALYSIS_RULES, VALIDATED, RuleCase, check_real_only, check_sound_and_proven, dims,
                          ill_typed_nodes, nodes, optimized_matches, proves_equal, random_args, saturate_fn, seeds,
                          var_leaves)

from rewrites.merge import MERGE
from rewrites.schedule import Budget
from service.optimizer.pipeline import optimize
from wire.capture import capture


def cat(*ws):
    return jnp.concatenate(ws, axis=1)


@st.composite
def shared_input(draw):
    """x[lead..., k] (rank 2 or 3), w1[k, n1], w2[k, n2]."""
    lead = draw(st.lists(dims(), min_size=1, max_size=2))
    k, n1, n2 = draw(dims()), draw(dims()), draw(dims())
    return [(*lead, k), (k, n1), (k, n2)], {}


def stack(*xs):
    return jnp.concatenate(xs, axis=0)


def rows(y, lo, hi):
    return lax.slice(y, (lo, 0), (hi, y.shape[1]))


@st.composite
def shared_weight(draw):
    """x1[m1, k], x2[m2, k], w[k, n]."""
    m1, m2, k, n = draw(dims()), draw(dims()), draw(dims()), draw(dims())
    return [(m1, k), (m2, k), (k, n)], {}


def conv(x, k):
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


@st.composite
def shared_conv_input(draw):
    """x[n, h, w, c], k1[kh, kw, c, f1], k2[kh, kw, c, f2]."""
    n, h, w, c = (draw(st.integers(1, 5)) for _ in range(4))
    kh, kw, f1, f2 = (draw(st.integers(1, 3)) for _ in range(4))
    return [(n, h, w, c), (kh, kw, c, f1), (kh, kw, c, f2)], {}


CASES: dict[str, RuleCase] = {
    "same-input-matmul-merge": RuleCase(
        lambda x, w1, w2: x @ w1,
        lambda x, w1, w2: (x @ cat(w1, w2))[..., :w1.shape[1]],
        shared_input(),
        context=lambda x, w1, w2: (x @ w2,)),
    "same-weight-matmul-merge": RuleCase(
        lambda x1, x2, w: x1 @ w,
        lambda x1, x2, w: rows(stack(x1, x2) @ w, 0, x1.shape[0]),
        shared_weight(),
        context=lambda x1, x2, w: (x2 @ w,)),
    "same-input-conv-merge": RuleCase(
        lambda x, k1, k2: conv(x, k1),
        lambda x, k1, k2: conv(x, jnp.concatenate([k1, k2], axis=3))[..., :k1.shape[3]],
        shared_conv_input(),
        context=lambda x, k1, k2: (conv(x, k2),)),
}


def test_every_merge_rule_has_a_case():
    assert set(CASES) == set(MERGE.names) - ANALYSIS_RULES


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(MERGE, name, CASES[name], data, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_real_rule_fires_in_real_mode_only(name, data, seed):
    check_real_only(MERGE, name, CASES[name], data, seed)


# --- Goals ---------------------------------------------------------------------------------------

def _two(rank):
    lead = (3,) if rank == 2 else (2, 3)
    return random_args(rank, [(*lead, 5), (5, 4), (5, 6)])


@pytest.mark.parametrize("rank", [2, 3])
def test_two_matmuls_sharing_x_gain_a_merged_matmul_on_concatenated_weights(rank):
    x, w1, w2 = args = _two(rank)
    result = saturate_fn(lambda x, w1, w2: (x @ w1, x @ w2), args, [MERGE])
    view = result.view
    merged = [d for d in nodes(view, "dot") if var_leaves(view, d.children[1]) == {1, 2}]
    assert len(merged) == 1  # one orientation only: the ordering guard
    assert view.classes[merged[0].eclass].shape == (*x.shape[:-1], 10)
    slices = {n.eclass: n for n in nodes(view, "slice") if n.children == (merged[0].eclass,)}
    assert set(slices) == set(view.roots)  # each output is a slice of the merged matmul
    assert not ill_typed_nodes(result)


def proven_pairs(fn, args, pairs, budget=None):
    """Saturate `fn`'s program with MERGE; which (i, j) output pairs are one class. Merges follow
    program order, so goals are extra outputs after the matmuls (a goal traced first would be
    numbered first)."""
    result = saturate_fn(fn, args, [MERGE], budget=budget)
    assert not ill_typed_nodes(result)
    return [result.same_class(i, j) for i, j in pairs]


@pytest.mark.parametrize("rank", [2, 3])
def test_each_output_is_proven_a_slice_of_the_merged_matmul(rank):
    args = _two(rank)
    goals = lambda x, w1, w2: (x @ w1, x @ w2, (x @ cat(w1, w2))[..., :4], (x @ cat(w1, w2))[..., 4:])
    assert proven_pairs(goals, args, [(0, 2), (1, 3)]) == [True, True]


QKV_ARGS = random_args(7, [(4, 8), (8, 3), (8, 5), (8, 2)])


def qkv(x, q, k, v):
    return x @ q, x @ k, x @ v


def three_way(result):
    return [d for d in nodes(result.view, "dot") if var_leaves(result.view, d.children[1]) == {1, 2, 3}]


def test_qkv_gains_a_three_way_merge_under_the_default_budget():
    assert three_way(saturate_fn(qkv, QKV_ARGS, [MERGE], budget=Budget()))


def test_qkv_three_way_merge_is_well_typed_and_proven_given_a_round_for_it():
    budget = Budget(merge_rounds=3)
    result = saturate_fn(qkv, QKV_ARGS, [MERGE], budget=budget)
    merged = three_way(result)
    assert merged and all(result.view.classes[d.eclass].shape == (4, 10) for d in merged)
    assert not ill_typed_nodes(result)
    merged = lambda x, q, k, v: x @ cat(cat(q, k), v)  # groups grow left to right, one matmul a round
    goals = lambda x, q, k, v: (*qkv(x, q, k, v), x @ cat(q, k), merged(x, q, k, v)[:, :8], x @ cat(k, v),
                                merged(x, q, k, v)[:, 8:])
    assert proven_pairs(goals, QKV_ARGS, [(3, 4), (2, 6)], budget) == [True, True]


def test_merges_are_bounded_by_merge_rounds():
    def widest(rounds):
        result = saturate_fn(qkv, QKV_ARGS, [MERGE], budget=Budget(merge_rounds=rounds))
        return max((len(var_leaves(result.view, d.children[1]) or ()) for d in nodes(result.view, "dot")))
    assert widest(0) == 1  # no merge at all
    assert widest(3) == 3
    assert widest(2) <= widest(3)


def test_pipeline_merge_of_weights_computes_the_same_outputs():
    args = random_args(8, [(16, 32), (32, 24), (32, 40)])
    response = optimized_matches(lambda x, w1, w2: (x @ w1, x @ w2), args, "real")
    assert "same-input-matmul-merge" in response["report"]["rewrites"]


# --- Negative goals ------------------------------------------------------------------------------

def test_matmuls_with_different_inputs_are_not_merged():
    args = random_args(9, [(3, 5), (3, 5), (5, 4), (5, 4)])
    result = saturate_fn(lambda x1, x2, w1, w2: (x1 @ w1, x2 @ w2), args, [MERGE])
    assert not nodes(result.view, "concat") and "same-input-matmul-merge" not in result.report.rules_fired


def test_matmuls_sharing_only_the_weight_are_not_merged_on_the_weight():
    # (Stacking their inputs is same-weight-matmul-merge's job: only row stacks appear.)
    args = random_args(9, [(3, 5), (3, 5), (5, 4)])
    result = saturate_fn(lambda x1, x2, w: (x1 @ w, x2 @ w), args, [MERGE])
    assert "same-input-matmul-merge" not in result.report.rules_fired
    assert [n.attrs for n in nodes(result.view, "concat")] == [(0,)]


def test_slice_of_the_wrong_orientation_is_not_proven():
    args = random_args(10, [(3, 5), (5, 4), (5, 4)])
    assert not proves_equal(lambda x, w1, w2: x @ w1, lambda x, w1, w2: (x @ cat(w2, w1))[:, :4],
                            args, [MERGE], context_fn=lambda x, w1, w2: (x @ w2,))


def test_no_merge_in_exact_mode():
    args = _two(2)
    result = saturate_fn(lambda x, w1, w2: (x @ w1, x @ w2), args, [MERGE], "exact")
    assert not nodes(result.view, "concat")


def test_merge_of_rank3_weights_stays_well_typed():
    args = random_args(11, [(2, 3), (3, 4, 5), (3, 6, 5)])
    dn = (((1,), (0,)), ((), ()))
    result = saturate_fn(lambda x, w1, w2: (lax.dot_general(x, w1, dn), lax.dot_general(x, w2, dn)),
                         args, [MERGE])
    assert not ill_typed_nodes(result)


# --- Matmuls sharing their weight: one matmul on stacked inputs ---------------------------------

STACK_ARGS = random_args(12, [(3, 5), (2, 5), (4, 5), (5, 6)])


def test_two_matmuls_sharing_w_gain_a_matmul_on_stacked_inputs():
    x1, x2, _, w = STACK_ARGS
    result = saturate_fn(lambda x1, x2, w: (x1 @ w, x2 @ w), [x1, x2, w], [MERGE])
    view = result.view
    merged = [d for d in nodes(view, "dot") if var_leaves(view, d.children[0]) == {0, 1}]
    assert len(merged) == 1  # one orientation only: the ordering guard
    assert view.classes[merged[0].eclass].shape == (5, 6)
    slices = {n.eclass for n in nodes(view, "slice") if n.children == (merged[0].eclass,)}
    assert slices == set(view.roots)
    assert not ill_typed_nodes(result)


def test_each_output_is_proven_a_row_slice_of_the_stacked_matmul():
    x1, x2, _, w = STACK_ARGS
    goals = lambda x1, x2, w: (x1 @ w, x2 @ w, rows(stack(x1, x2) @ w, 0, 3), rows(stack(x1, x2) @ w, 3, 5),
                               rows(stack(x2, x1) @ w, 0, 3), rows(stack(x1, x2) @ w, 2, 5))
    # The last two are unsound: the wrong stacking order, and rows straddling both inputs.
    assert proven_pairs(goals, [x1, x2, w], [(0, 2), (1, 3), (0, 4), (1, 5)]) == [True, True, False, False]


def test_three_matmuls_sharing_w_stack_left_to_right_and_stay_well_typed():
    goals = lambda a, b, c, w: (a @ w, b @ w, c @ w, rows(stack(stack(a, b), c) @ w, 5, 9))
    assert proven_pairs(goals, STACK_ARGS, [(2, 3)]) == [True]
    result = saturate_fn(lambda a, b, c, w: (a @ w, b @ w, c @ w), STACK_ARGS, [MERGE])
    assert {0, 1, 2} in [var_leaves(result.view, n.eclass) for n in nodes(result.view, "concat")]


def test_matmuls_with_different_weights_are_not_stacked():
    x1, x2, _, w1 = STACK_ARGS
    w2 = random_args(13, [(5, 6)])[0]
    result = saturate_fn(lambda x1, x2, w1, w2: (x1 @ w1, x2 @ w2, rows(stack(x1, x2) @ w1, 3, 5)),
                         [x1, x2, w1, w2], [MERGE])
    assert "same-weight-matmul-merge" not in result.report.rules_fired
    assert not result.same_class(1, 2)


def test_recurrent_matmuls_sharing_w_are_not_stacked():
    # h2 = tanh(h1 @ W) depends on h1 = x @ W: a stack of x and tanh(h1) would be a cycle.
    x, _, _, w = random_args(14, [(3, 5), (1, 1), (1, 1), (5, 5)])
    rnn = lambda x, w: jnp.tanh(jnp.tanh(x @ w) @ w)
    result = saturate_fn(rnn, [x, w], [MERGE])
    assert "same-weight-matmul-merge" not in result.report.rules_fired
    optimized_matches(rnn, [x, w], "real")


def test_no_stacking_in_exact_mode():
    x1, x2, _, w = STACK_ARGS
    result = saturate_fn(lambda x1, x2, w: (x1 @ w, x2 @ w), [x1, x2, w], [MERGE], "exact")
    assert not nodes(result.view, "concat")


def test_pipeline_stack_of_inputs_computes_the_same_outputs():
    args = random_args(15, [(8, 32), (8, 32), (8, 32), (32, 24)])
    response = optimized_matches(lambda a, b, c, w: (a @ w, b @ w, c @ w), args, "real")
    assert "same-weight-matmul-merge" in response["report"]["rewrites"]


# --- Mixed operand dtypes: bfloat16 and float32 operands, float32 products ----------------------

def f32_matmul(a, b):
    return jnp.matmul(a, b, preferred_element_type=jnp.float32)


BF16_X1 = STACK_ARGS[0].astype(jnp.bfloat16)


def test_same_weight_merge_keeps_dtypes_of_mixed_inputs():
    _, x2, _, w = STACK_ARGS
    result = saturate_fn(lambda x1, x2, w: (f32_matmul(x1, w), f32_matmul(x2, w)), [BF16_X1, x2, w], [MERGE])
    assert not ill_typed_nodes(result)


def test_pipeline_survives_matmuls_sharing_w_with_mixed_input_dtypes():
    _, x2, _, w = STACK_ARGS
    response = optimize(capture(lambda x1, x2, w: (f32_matmul(x1, w), f32_matmul(x2, w)), BF16_X1, x2, w))
    assert response["validation"]["status"] in VALIDATED


def test_same_input_merge_keeps_dtypes_of_mixed_weights():
    x, w1, w2 = _two(2)
    result = saturate_fn(lambda x, w1, w2: (f32_matmul(x, w1), f32_matmul(x, w2)),
                         [x, w1.astype(jnp.bfloat16), w2], [MERGE])
    assert not ill_typed_nodes(result)


def test_grouped_convolutions_are_not_merged():
    # With feature groups each output group reads its own input channels: concatenating kernels
    # along output features would change which channels each group sees.
    x, k1, k2 = random_args(11, [(1, 4, 4, 4), (3, 3, 2, 4), (3, 3, 2, 4)])
    grouped = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME", feature_group_count=2,
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))
    result = saturate_fn(lambda x, k1, k2: (grouped(x, k1), grouped(x, k2)), [x, k1, k2], [MERGE])
    assert "same-input-conv-merge" not in result.report.rules_fired


def test_kernels_of_other_sizes_under_the_same_params_are_not_merged():
    # Unpadded 3x3 and 5x5 convolutions share their params but not their output's spatial size:
    # concatenating their kernels is not a convolution of either.
    x, k1, k2 = random_args(12, [(1, 8, 8, 4), (3, 3, 4, 5), (5, 5, 4, 6)])
    valid = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    result = saturate_fn(lambda x, k1, k2: (valid(x, k1), valid(x, k2)), [x, k1, k2], [MERGE])
    assert "same-input-conv-merge" not in result.report.rules_fired
    assert not ill_typed_nodes(result)


def test_a_merged_conv_is_typed_by_the_shape_analysis_in_any_layout():
    # Output features first (NCHW / OIHW), strided: the merged conv's class takes its shape from
    # the convs it joins, with the output features summed.
    x, k1, k2 = random_args(13, [(2, 3, 9, 7), (4, 3, 3, 2), (5, 3, 3, 2)])
    strided = lambda x, k: lax.conv_general_dilated(x, k, (2, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    result = saturate_fn(lambda x, k1, k2: (strided(x, k1), strided(x, k2)), [x, k1, k2], [MERGE])
    assert result.report.rules_fired.get("same-input-conv-merge") == 1
    merged = [c for c in nodes(result.view, "conv") if var_leaves(result.view, c.children[1]) == {1, 2}]
    assert [result.view.classes[c.eclass].shape for c in merged] == [strided(x, jnp.concatenate([k1, k2])).shape]
    assert not ill_typed_nodes(result)
