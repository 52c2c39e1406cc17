"""LAYOUT: every rule is sound in float64, fires on its own and keeps float32 bits through the
exact-mode pipeline; goal tests for composed layouts and negative tests for look-alikes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (
    ANALYSIS_RULES,
    RTOL,
    RuleCase,
    check_exact_keeps_bits,
    check_rule_numerics,
    check_sound_and_proven,
    optimized_matches,
    proves_equal,
    proves_terms_equal,
    random_args,
    rule_mode,
    saturate_program,
    seeds,
    typed,
)

from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from rewrites.terms import Term, ivec

MAX_RANK = 6


# lax short-circuits identity layouts while tracing; binding the primitive keeps the equation.
def transpose(x, perm):
    return lax.transpose_p.bind(x, permutation=tuple(int(p) for p in perm))


def reshape(x, sizes):
    return lax.reshape_p.bind(x, new_sizes=tuple(int(s) for s in sizes), dimensions=None, sharding=None)


def broadcast(x, shape, dims):
    return lax.broadcast_in_dim_p.bind(x, shape=tuple(shape), broadcast_dimensions=tuple(dims), sharding=None)


def identity_perm(x):
    return tuple(range(np.ndim(x)))


# Total size stays small at rank 6: dims 1..9 below rank 4, 1..4 above.
@st.composite
def layout_shape(draw, min_rank=1, max_rank=MAX_RANK):
    rank = draw(st.integers(min_rank, max_rank))
    return tuple(draw(st.lists(st.integers(1, 9 if rank <= 3 else 4), min_size=rank, max_size=rank)))


@st.composite
def two_perms(draw):
    s = draw(layout_shape())
    p = draw(st.permutations(range(len(s))))
    q = draw(st.permutations(range(len(s))))
    return [s], {"p": tuple(p), "q": tuple(q)}


@st.composite
def two_reshapes(draw):
    s = draw(layout_shape())
    a = draw(st.permutations(s))  # same size, different factorisation
    b = draw(st.one_of(st.permutations(s), st.just([int(np.prod(s))])))
    return [s], {"a": tuple(a), "b": tuple(b)}


def identity_broadcast_goal(arg_shapes, static):
    """(broadcast_in_dim(x, shape(x), iota), x) by hand: tracing forwards such a broadcast."""
    (s,) = arg_shapes
    spec = {"shape": list(s), "dtype": "float32"}
    return {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", **spec, "role": "activation"}], "consts": [],
            "eqns": [{"op": "broadcast_in_dim", "in": ["x"], "out": [{"name": "b", **spec}],
                      "params": {"shape": list(s), "broadcast_dimensions": list(range(len(s))),
                                 "sharding": None}}],
            "outputs": ["b", "x"]}


unary = layout_shape().map(lambda s: ([s], {}))

CASES: dict[str, RuleCase] = {
    "transpose-transpose": RuleCase(
        lambda x, p, q: transpose(transpose(x, p), q),
        lambda x, p, q: transpose(x, [p[k] for k in q]), two_perms()),
    "transpose-identity": RuleCase(lambda x: transpose(x, identity_perm(x)), lambda x: x, unary),
    "broadcast-identity": RuleCase(lambda x: broadcast(x, x.shape, identity_perm(x)), lambda x: x, unary,
                                   program=identity_broadcast_goal),
    "slice-identity": RuleCase(lambda x: lax.slice(x, (0,) * x.ndim, x.shape), lambda x: x, unary),
    "reshape-reshape": RuleCase(lambda x, a, b: reshape(reshape(x, a), b),
                                lambda x, a, b: reshape(x, b), two_reshapes()),
    "reshape-identity": RuleCase(lambda x: reshape(x, x.shape), lambda x: x, unary),
}
# Rules over constructors ingest never produces: proven on hand-built terms instead.
TERM_ONLY = {"squeeze-expand-dims"}


def test_every_layout_rule_has_a_case():
    assert set(CASES) | TERM_ONLY == set(LAYOUT.names) - ANALYSIS_RULES
    assert all(rule_mode(LAYOUT, n) == "exact" for n in LAYOUT.names)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(LAYOUT, name, CASES[name], data, seed)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_exact_rule_keeps_float32_bits_through_the_pipeline(name, data, seed):
    response, rhs_size = check_exact_keeps_bits(name, CASES[name], data, seed)
    assert len(response["program"]["eqns"]) <= rhs_size


@settings(max_examples=10, deadline=None)
@given(s=layout_shape(max_rank=MAX_RANK - 1), data=st.data(), seed=seeds)
def test_squeeze_expand_dims_is_sound_and_proven_on_terms(s, data, seed):
    k = data.draw(st.integers(1, MAX_RANK - len(s)))
    out_rank = len(s) + k
    dims = sorted(data.draw(st.lists(st.integers(0, out_rank - 1), min_size=k, max_size=k, unique=True)))
    check_rule_numerics(lambda x: lax.squeeze(lax.expand_dims(x, dims), dims), lambda x: x,
                        random_args(seed, [s], np.float64), RTOL["exact"])
    expanded = list(s)
    for d in dims:
        expanded.insert(d, 1)
    x = Term.var(0)
    up = Term.expand_dims(x, ivec(dims))
    down = Term.squeeze(up, ivec(dims))
    facts = typed(x, s) + typed(up, expanded) + typed(down, s)
    assert proves_terms_equal(down, x, facts, [LAYOUT], "exact", only=["squeeze-expand-dims"])


# --- Goals ---------------------------------------------------------------------------------------

X = random_args(0, [(3, 4)])
SQUARE = random_args(1, [(4, 4)])


def test_transpose_twice_is_x():
    assert proves_equal(lambda x: x.T.T, lambda x: x, X, [LAYOUT], "exact")
    assert optimized_matches(lambda x: x.T.T, X, "exact")["program"]["eqns"] == []


def test_three_transposes_composing_to_identity_are_x():
    cube = random_args(2, [(2, 3, 4)])
    goal = lambda x: transpose(transpose(transpose(x, (1, 2, 0)), (1, 2, 0)), (1, 2, 0))
    assert proves_equal(goal, lambda x: x, cube, [LAYOUT], "exact")


def test_transpose_of_matmul_twice_is_the_matmul():
    ab = random_args(3, [(3, 5), (5, 2)])
    assert proves_equal(lambda a, b: (a @ b).T.T, lambda a, b: a @ b, ab, [LAYOUT, MATMUL], "exact")


def test_reshape_of_reshape_is_one_reshape():
    assert proves_equal(lambda x: x.reshape(2, 6).reshape(12), lambda x: x.reshape(12), X, [LAYOUT], "exact")


def test_reshape_there_and_back_is_x():
    assert proves_equal(lambda x: x.reshape(6, 2).reshape(3, 4), lambda x: x, X, [LAYOUT], "exact")


def test_broadcast_to_own_shape_and_full_slice_are_x():
    goal = identity_broadcast_goal([(3, 4)], {})
    full = {"start_indices": [0, 0], "limit_indices": [3, 4], "strides": None}
    goal["eqns"].append({"op": "slice", "in": ["b"], "params": full,
                         "out": [{"name": "s", "shape": [3, 4], "dtype": "float32"}]})
    goal["outputs"] = ["s", "x"]
    assert saturate_program(goal, [LAYOUT], "exact").same_class(0, 1)
    assert optimized_matches({**goal, "outputs": ["s"]}, X, "exact")["program"]["eqns"] == []


# --- Negative goals ------------------------------------------------------------------------------

def test_transpose_of_square_matrix_is_not_x():
    assert not proves_equal(lambda x: x.T, lambda x: x, SQUARE, [LAYOUT])


def test_transposes_compose_in_order():
    cube = random_args(2, [(3, 3, 3)])
    p, q = (1, 0, 2), (0, 2, 1)
    wrong = tuple(q[k] for k in p)  # q∘p, not p∘q
    assert wrong != tuple(p[k] for k in q)
    assert not proves_equal(lambda x: transpose(transpose(x, p), q), lambda x: transpose(x, wrong),
                            cube, [LAYOUT])


def test_reshape_does_not_commute_with_transpose():
    assert not proves_equal(lambda x: x.T.reshape(16), lambda x: x.reshape(16), SQUARE, [LAYOUT])


def test_row_and_column_broadcasts_are_not_equal():
    v = random_args(4, [(4,)])
    rows, cols = (lambda x: broadcast(x, (4, 4), (0,))), (lambda x: broadcast(x, (4, 4), (1,)))
    assert not proves_equal(rows, cols, v, [LAYOUT])


def test_shifted_slices_are_not_equal():
    v = random_args(4, [(8,)])
    assert not proves_equal(lambda x: lax.slice(x, (1,), (8,)), lambda x: lax.slice(x, (0,), (7,)),
                            v, [LAYOUT])


def test_strided_slice_is_not_the_contiguous_one():
    assert not proves_equal(lambda x: lax.slice(x, (0, 0), (4, 4), (1, 2)),
                            lambda x: lax.slice(x, (0, 0), (4, 2)), SQUARE, [LAYOUT])
