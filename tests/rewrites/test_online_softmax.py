"""ONLINE_SOFTMAX: softmax(S) @ V over keys split in two equals the parts' outputs under a shared
max, summed and divided by the parts' summed exponentials: sound in float64 for any batch axes and
split, proven by the rule alone (with the softmax recognized), only in real mode; a wrong rescale
is neither proven nor numerically equal."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (check_rule_numerics, goal_program, normwise_error, optimized_matches, random_args,
                          saturate_program, seeds)

from rewrites.idioms import IDIOMS
from rewrites.layout import LAYOUT
from rewrites.online_softmax import ONLINE_SOFTMAX

RULE = "softmax-dot-of-concat"
# The softmax a model writes is recognized first (LAYOUT drops the stop_gradient JAX puts on its max).
FAMILIES = [LAYOUT, IDIOMS, ONLINE_SOFTMAX]
ONLY = [RULE, "softmax-idiom", "copy-identity"]


def attention_over_parts(s1, s2, v1, v2):
    return jax.nn.softmax(jnp.concatenate([s1, s2], -1), axis=-1) @ jnp.concatenate([v1, v2], -2)


def _spread(row, like):
    return lax.broadcast_in_dim(row, like.shape, tuple(range(like.ndim - 1)))


def combined_parts(s1, s2, v1, v2, rescale_second: bool = True):
    """Each part's exponentials under the shared max, outputs and sums added, then normalized.
    `rescale_second=False` is the classic bug: the second part keeps its own max."""
    m = jnp.maximum(jnp.max(s1, -1), jnp.max(s2, -1))
    p1 = jnp.exp(s1 - _spread(m, s1))
    p2 = jnp.exp(s2 - _spread(m if rescale_second else jnp.max(s2, -1), s2))
    num = p1 @ v1 + p2 @ v2
    return num / _spread(jnp.sum(p1, -1) + jnp.sum(p2, -1), num)


@st.composite
def split_attention(draw):
    """Shapes of (s1, s2, v1, v2): 0-2 batch axes, q rows, keys split k1 + k2, d columns. Batch
    axes of size 1 are left out: jnp.matmul squeezes them, so the product is another pattern."""
    batch = draw(st.lists(st.integers(2, 3), max_size=2))
    q, k1, k2, d = (draw(st.integers(1, 5)) for _ in range(4))
    return [(*batch, q, k1), (*batch, q, k2), (*batch, k1, d), (*batch, k2, d)]


def test_every_rule_has_a_case():
    assert ONLINE_SOFTMAX.names == [RULE]


@settings(max_examples=12, deadline=None)
@given(split_attention(), seeds)
def test_softmax_over_two_key_parts_is_their_rescaled_sum(arg_shapes, seed):
    check_rule_numerics(attention_over_parts, combined_parts, random_args(seed, arg_shapes, np.float64), 1e-10)
    goal = goal_program(attention_over_parts, combined_parts, random_args(seed, arg_shapes))
    assert not saturate_program(goal, []).same_class(0, 1), "vacuous goal"
    result = saturate_program(goal, FAMILIES, "real", only=ONLY)
    assert result.report.rules_fired.get(RULE, 0) > 0
    assert result.same_class(0, 1)


def test_the_identity_is_real_arithmetic_only():
    args = random_args(1, [(2, 3, 4), (2, 3, 5), (2, 4, 6), (2, 5, 6)])
    goal = goal_program(attention_over_parts, combined_parts, args)
    result = saturate_program(goal, FAMILIES, "exact", only=ONLY)
    assert RULE not in result.report.rules_fired
    assert not result.same_class(0, 1)


def test_a_part_left_under_its_own_max_is_not_proven_and_differs():
    def unrescaled(*a):
        return combined_parts(*a, rescale_second=False)

    args = random_args(2, [(2, 3, 4), (2, 3, 5), (2, 4, 6), (2, 5, 6)])
    with jax.enable_x64(True):
        args64 = [np.asarray(a, np.float64) for a in args]
        assert normwise_error(attention_over_parts(*args64), unrescaled(*args64)) > 1e-3
    goal = goal_program(attention_over_parts, unrescaled, args)
    assert not saturate_program(goal, FAMILIES, "real", only=ONLY).same_class(0, 1)


def test_keys_split_differently_from_values_are_not_combined():
    """Scores split 4 + 5 against values split 5 + 4: the parts do not pair up, so no rewrite."""
    args = random_args(3, [(3, 4), (3, 5), (5, 2), (4, 2)])
    result = saturate_program(goal_program(attention_over_parts, attention_over_parts, args), FAMILIES, "real",
                              only=ONLY)
    assert RULE not in result.report.rules_fired


@pytest.mark.slow
def test_the_pipeline_result_over_key_parts_validates_in_real_mode():
    args = random_args(4, [(2, 8, 16), (2, 8, 16), (2, 16, 8), (2, 16, 8)])
    response = optimized_matches(attention_over_parts, args, "real")
    assert RULE in response["report"]["rewrites"]
