"""MERGE: matmuls sharing their left operand become one matmul on concatenated weights plus
slices; sound in float64, ordered (each pair once), bounded (QKV merges three ways), well typed,
and never applied to matmuls that do not share an input."""
from __future__ import annotations

import jax.numpy as jnp
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
    nodes,
    optimized_matches,
    proves_equal,
    random_args,
    saturate_fn,
    seeds,
    var_leaves,
)

from rewrites.merge import MERGE
from rewrites.schedule import Budget


def cat(*ws):
    return jnp.concatenate(ws, axis=1)


@st.composite
def shared_input(draw):
    """x[lead..., k] (rank 2 or 3), w1[k, n1], w2[k, n2]."""
    lead = draw(st.lists(dims(), min_size=1, max_size=2))
    k, n1, n2 = draw(dims()), draw(dims()), draw(dims())
    return [(*lead, k), (k, n1), (k, n2)], {}


CASES: dict[str, RuleCase] = {
    "same-input-matmul-merge": RuleCase(
        lambda x, w1, w2: x @ w1,
        lambda x, w1, w2: (x @ cat(w1, w2))[..., :w1.shape[1]],
        shared_input(),
        context=lambda x, w1, w2: (x @ w2,)),
}


def test_every_merge_rule_has_a_case():
    assert set(CASES) == set(MERGE.names) - ANALYSIS_RULES


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(MERGE, name, CASES[name], data, seed)


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


@pytest.mark.parametrize("rank", [2, 3])
def test_each_output_is_proven_a_slice_of_the_merged_matmul(rank):
    args = _two(rank)
    both = lambda x, w1, w2: (x @ w2,)
    assert proves_equal(lambda x, w1, w2: x @ w1, lambda x, w1, w2: (x @ cat(w1, w2))[..., :4],
                        args, [MERGE], context_fn=both)
    assert proves_equal(lambda x, w1, w2: x @ w2, lambda x, w1, w2: (x @ cat(w1, w2))[..., 4:],
                        args, [MERGE], context_fn=lambda x, w1, w2: (x @ w1,))


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
    assert proves_equal(lambda x, q, k, v: x @ cat(q, k), lambda x, q, k, v: (x @ cat(cat(q, k), v))[:, :8],
                        QKV_ARGS, [MERGE], context_fn=qkv, budget=budget)
    assert proves_equal(lambda x, q, k, v: x @ v, lambda x, q, k, v: (x @ cat(cat(q, k), v))[:, 8:],
                        QKV_ARGS, [MERGE], context_fn=qkv, budget=budget)
    assert proves_equal(lambda x, q, k, v: x @ cat(k, v), lambda x, q, k, v: (x @ cat(q, cat(k, v)))[:, 3:],
                        QKV_ARGS, [MERGE], context_fn=qkv, budget=budget)


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


def test_matmuls_sharing_only_the_weight_are_not_merged():
    args = random_args(9, [(3, 5), (3, 5), (5, 4)])
    result = saturate_fn(lambda x1, x2, w: (x1 @ w, x2 @ w), args, [MERGE])
    assert not nodes(result.view, "concat")


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
