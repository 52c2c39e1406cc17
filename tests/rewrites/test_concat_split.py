"""CONCAT_SPLIT: elementwise ops, selects, products and views that keep the joined axis whole
(broadcasts, reshapes of the axes before it: GQA's repeat) over a two-part concatenation computed
part by part are sound (bit for bit for the elementwise ones, whose elements are computed by the
same ops; within the real tolerance for products, whose accumulation order may change), each rule alone
proves its goal, and a split along a contracted axis or a misaligned other operand is not split."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rule_harness import (RuleCase, bits_equal, check_sound_and_proven, goal_program, proves_equal, random_args,
                          rule_mode, saturate_program, seeds)

from rewrites.concat_split import CONCAT_SPLIT


@st.composite
def two_parts(draw):
    """Shapes of x and y joined along `axis` (rank 1-3), and of an operand w of the joint shape."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    axis = draw(st.integers(0, len(shape) - 1))
    second = list(shape)
    second[axis] = draw(st.integers(1, 4))
    joint = list(shape)
    joint[axis] += second[axis]
    return [tuple(shape), tuple(second), tuple(joint)], {"axis": axis}


def _halves(w, x, axis):
    """w's blocks lining up with x and the part after it, along `axis`."""
    k = x.shape[axis]
    return w[(slice(None),) * axis + (slice(0, k),)], w[(slice(None),) * axis + (slice(k, None),)]


def _select_in_parts(mask, x, y, fill, axis):
    """where(mask, concat(x, y), fill) part by part, mask and fill sliced alike."""
    (m1, m2), (f1, f2) = _halves(mask, x, axis), _halves(fill, x, axis)
    return jnp.concatenate([jnp.where(m1, x, f1), jnp.where(m2, y, f2)], axis)


@st.composite
def keys_in_parts(draw):
    """q [batch, m, d] against keys [batch, n_i, d] (einsum form) or [batch, d, n_i] (matmul form)."""
    m, d, n1, n2 = (draw(st.integers(1, 4)) for _ in range(4))
    b = draw(st.integers(2, 3))
    if draw(st.booleans()):
        return [(b, m, d), (b, d, n1), (b, d, n2)], {"axis": 2, "form": "matmul"}
    return [(b, m, d), (b, n1, d), (b, n2, d)], {"axis": 1, "form": "einsum"}


@st.composite
def parts_and_view(draw, min_axis):
    """x and y joined along an axis at or after `min_axis` (rank min_axis + 1 to 4), and a place."""
    shape = draw(st.lists(st.integers(1, 3), min_size=min_axis + 1, max_size=4))
    axis = draw(st.integers(min_axis, len(shape) - 1))
    second = list(shape)
    second[axis] = draw(st.integers(1, 3))
    return [tuple(shape), tuple(second)], {"axis": axis, "new": draw(st.integers(0, len(shape))),
                                           "copies": draw(st.integers(1, 3))}


def _broadcast(v, new, copies):
    """v with a new axis of `copies` at `new` (a broadcast_in_dim, as jnp.repeat's first step)."""
    shape = list(v.shape)
    shape.insert(new, copies)
    return lax.broadcast_in_dim(v, shape, [d if d < new else d + 1 for d in range(v.ndim)])


def _merge_leading(v):
    return v.reshape((v.shape[0] * v.shape[1], *v.shape[2:]))


def _scores(q, k, form):
    return q @ k if form == "matmul" else jnp.einsum("bmd,bnd->bmn", q, k)


CASES: dict[str, RuleCase] = {
    "unary-of-concat": RuleCase(
        lambda x, y, w, axis: jnp.tanh(jnp.concatenate([x, y], axis)),
        lambda x, y, w, axis: jnp.concatenate([jnp.tanh(x), jnp.tanh(y)], axis), two_parts()),
    "binary-of-concat": RuleCase(
        lambda x, y, w, axis: (jnp.concatenate([x, y], axis) + w) * 0.125,
        lambda x, y, w, axis: jnp.concatenate([(x + _halves(w, x, axis)[0]) * 0.125,
                                               (y + _halves(w, x, axis)[1]) * 0.125], axis), two_parts()),
    "select-of-concat": RuleCase(
        lambda x, y, w, axis: jnp.where(w > 0, jnp.concatenate([x, y], axis), -jnp.inf),
        lambda x, y, w, axis: _select_in_parts(w > 0, x, y, jnp.full(w.shape, -jnp.inf), axis), two_parts()),
    "broadcast-of-concat": RuleCase(
        lambda x, y, axis, new, copies: _broadcast(jnp.concatenate([x, y], axis), new, copies),
        lambda x, y, axis, new, copies: jnp.concatenate([_broadcast(x, new, copies), _broadcast(y, new, copies)],
                                                        axis + (axis >= new)), parts_and_view(0)),
    "reshape-of-concat": RuleCase(
        lambda x, y, axis, new, copies: _merge_leading(jnp.concatenate([x, y], axis)),
        lambda x, y, axis, new, copies: jnp.concatenate([_merge_leading(x), _merge_leading(y)], axis - 1),
        parts_and_view(2)),
    "dot-of-concat": RuleCase(
        lambda q, k1, k2, axis, form: _scores(q, jnp.concatenate([k1, k2], axis), form),
        lambda q, k1, k2, axis, form: jnp.concatenate([_scores(q, k1, form), _scores(q, k2, form)], -1),
        keys_in_parts()),
}

def test_every_rule_has_a_case():
    assert set(CASES) == set(CONCAT_SPLIT.names)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=8, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_and_proves_its_goal(name, data, seed):
    case = CASES[name]
    arg_shapes, static = data.draw(case.draw)
    lhs, rhs, _ = case.bind(static)
    args = random_args(seed, arg_shapes)
    if rule_mode(CONCAT_SPLIT, name) == "exact":
        assert bits_equal(lhs(*args), rhs(*args))
    check_sound_and_proven(CONCAT_SPLIT, name, case, data, seed)


def test_a_product_contracting_the_joined_axis_is_not_split():
    """q @ concat(k1; k2) along the contracted axis is a sum over both parts, not a concatenation."""
    args = random_args(0, [(2, 3, 5), (2, 2, 4), (2, 3, 4)])
    goal = goal_program(lambda q, k1, k2: q @ jnp.concatenate([k1, k2], 1), lambda q, k1, k2: q, args)
    result = saturate_program(goal, [CONCAT_SPLIT], "real")
    assert "dot-of-concat" not in result.report.rules_fired


def test_a_merged_weight_product_is_left_merged():
    """x @ concat(W1, W2) (what the same-input merge builds) is not split back: unbatched."""
    args = random_args(0, [(3, 4), (4, 2), (4, 5)])
    goal = goal_program(lambda x, w1, w2: x @ jnp.concatenate([w1, w2], 1), lambda x, w1, w2: x, args)
    assert "dot-of-concat" not in saturate_program(goal, [CONCAT_SPLIT], "real").report.rules_fired


def test_an_operand_of_another_shape_is_not_sliced():
    """A bias broadcast along the joined axis implicitly (size 1) is not the concat's shape: kept whole."""
    args = random_args(1, [(3, 2), (3, 4), (3, 1)])
    goal = goal_program(lambda x, y, b: jnp.concatenate([x, y], 1) + b, lambda x, y, b: x, args)
    result = saturate_program(goal, [CONCAT_SPLIT], "exact")
    assert np.asarray(result.program["outputs"]).size == 2
    assert not any(n.op == "slice" for c in result.view.classes.values() for n in c.nodes)


def test_a_reshape_that_splits_the_joined_axis_is_not_split():
    """concat(x, y) of 3 + 3 rows reshaped to 2 x 3: a row of the result mixes x and y."""
    args = random_args(2, [(2, 3, 4), (2, 3, 4)])
    goal = goal_program(lambda x, y: jnp.concatenate([x, y], 1).reshape(2, 2, 3, 4), lambda x, y: x, args)
    assert "reshape-of-concat" not in saturate_program(goal, [CONCAT_SPLIT], "exact").report.rules_fired


def test_grouped_keys_repeated_over_heads_keep_their_split():
    """jnp.repeat of K = concat(cache, new) over the heads (GQA) is the repeat of each part, joined."""
    args = random_args(3, [(1, 2, 5, 4), (1, 2, 3, 4)])
    assert proves_equal(lambda c, k: jnp.repeat(jnp.concatenate([c, k], 2), 2, axis=1),
                        lambda c, k: jnp.concatenate([jnp.repeat(c, 2, axis=1), jnp.repeat(k, 2, axis=1)], 2),
                        args, [CONCAT_SPLIT], "exact")
