"""ALGEBRA: every rule is sound in float64, fires on its own, keeps float32 bits in exact mode
(exact rules) or stays off in exact mode (real rules); goal and negative tests."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (ANALYSIS_RULES, RuleCase, check_exact_keeps_bits, check_real_only, check_sound_and_proven,
                          one_shape, optimized_matches, proves_equal, random_args, rule_mode, seeds)

from rewrites.algebra import ALGEBRA
from service.optimizer.pipeline import optimize
from wire.capture import capture


def _sided(draw_shape=one_shape(0, 4)):
    """Unary draw plus which side the literal sits on (both patterns of a commutative unit)."""
    return st.tuples(draw_shape, st.sampled_from(["right", "left"])).map(
        lambda t: (t[0][0], {"side": t[1]}))


def _same(n: int):
    """n operands of one shape (the guard of the associativity and distributivity rules)."""
    return one_shape(0, 4).map(lambda d: (d[0] * n, {}))


def _fold(op: str, a: float, b: float, want: float) -> RuleCase:
    """`a op b` on two literals, which tracing would compute eagerly, so the goal program is
    written by hand: outputs (the equation's result, the literal `want`)."""
    lit = lambda v: {"lit": v, "dtype": "float32"}

    def program(arg_shapes, static):
        return {"format": "optu.jaxpr/v1", "inputs": [], "consts": [],
                "eqns": [{"op": op, "in": [lit(a), lit(b)], "params": {},
                          "out": [{"name": "t", "shape": [], "dtype": "float32"}]}],
                "outputs": ["t", lit(want)]}
    return RuleCase(lambda: getattr(lax, op)(np.float64(a), np.float64(b)), lambda: np.float64(want),
                    st.just(([], {})), program=program)


CASES: dict[str, RuleCase] = {
    "mul-one": RuleCase(lambda x, side: x * 1.0 if side == "right" else 1.0 * x,
                        lambda x, side: x, _sided()),
    "div-one": RuleCase(lambda x: x / 1.0, lambda x: x, one_shape(0, 4)),
    "sub-zero": RuleCase(lambda x: x - 0.0, lambda x: x, one_shape(0, 4)),
    "add-zero": RuleCase(lambda x, side: x + 0.0 if side == "right" else 0.0 + x,
                         lambda x, side: x, _sided()),
    "neg-neg": RuleCase(lambda x: -(-x), lambda x: x, one_shape(0, 4)),
    "pow-one": RuleCase(lambda x: lax.integer_pow(x, 1), lambda x: x, one_shape(0, 4)),
    "log-exp": RuleCase(lambda x: jnp.log(jnp.exp(x)), lambda x: x, one_shape(0, 4)),
    # exp(x) is the operand known positive (positive-exp), so exp(log(exp x)) -> exp x.
    "exp-log": RuleCase(lambda x: jnp.exp(jnp.log(jnp.exp(x))), lambda x: jnp.exp(x), one_shape(0, 4)),
    "add-comm": RuleCase(lambda a, b: a + b, lambda a, b: b + a, _same(2)),
    "mul-comm": RuleCase(lambda a, b: a * b, lambda a, b: b * a, _same(2)),
    "add-assoc": RuleCase(lambda a, b, c: (a + b) + c, lambda a, b, c: a + (b + c), _same(3)),
    "mul-assoc": RuleCase(lambda a, b, c: (a * b) * c, lambda a, b, c: a * (b * c), _same(3)),
    "factor-mul-add": RuleCase(lambda a, b, c: a * b + a * c, lambda a, b, c: a * (b + c), _same(3)),
    "expand-mul-add": RuleCase(lambda a, b, c: a * (b + c), lambda a, b, c: a * b + a * c, _same(3)),
    "fold-add": _fold("add", 2.0, 3.0, 5.0),
    "fold-sub": _fold("sub", 7.0, 2.5, 4.5),
    "fold-mul": _fold("mul", 1.5, -4.0, -6.0),
    "fold-div": _fold("div", 1.0, 8.0, 0.125),
    "fold-pow": _fold("pow", 4.0, 0.5, 2.0),
    "div-by-constant": RuleCase(lambda x: x / 4.0, lambda x: x * 0.25, one_shape(0, 4)),
    "neg-mul": RuleCase(lambda a, b: (-a) * b, lambda a, b: -(a * b), _same(2)),
    "sub-to-add-neg": RuleCase(lambda a, b: a - b, lambda a, b: a + (-b), _same(2)),
    "pow-two": RuleCase(lambda x: lax.integer_pow(x, 2), lambda x: x * x, one_shape(0, 4)),
    "square-to-mul": RuleCase(lambda x: lax.square(x), lambda x: x * x, one_shape(0, 4)),
    # |x| + 1 keeps the root real; the rule rewrites the rsqrt of it.
    "rsqrt-to-div-sqrt": RuleCase(lambda x: lax.rsqrt(jnp.abs(x) + 1.0), lambda x: 1.0 / jnp.sqrt(jnp.abs(x) + 1.0),
                                  one_shape(0, 4)),
    "sqrt-of-square": RuleCase(lambda x: jnp.sqrt(x * x), lambda x: jnp.abs(x), one_shape(0, 4)),
    "select-same": RuleCase(lambda x: lax.select(x > 0, x, x), lambda x: x, one_shape(0, 4)),
}
EXACT = sorted(n for n in CASES if rule_mode(ALGEBRA, n) == "exact")
REAL = sorted(n for n in CASES if rule_mode(ALGEBRA, n) == "real")


def test_every_algebra_rule_has_a_case():
    assert set(CASES) == set(ALGEBRA.names) - ANALYSIS_RULES
    assert ANALYSIS_RULES & set(ALGEBRA.names) == {"positive-exp", "literal-value-of-folded", "literal-as-value"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(ALGEBRA, name, CASES[name], data, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXACT)
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_exact_rule_keeps_float32_bits_through_the_pipeline(name, data, seed):
    response, rhs_size = check_exact_keeps_bits(name, CASES[name], data, seed)
    assert len(response["program"]["eqns"]) <= rhs_size


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_real_rule_fires_in_real_mode_only(name, data, seed):
    real, rhs_size = check_real_only(ALGEBRA, name, CASES[name], data, seed)
    assert len(real["program"]["eqns"]) <= rhs_size


# --- Goals ---------------------------------------------------------------------------------------

X = random_args(0, [(3, 4)])


def test_exp_log_exp_becomes_exp():
    assert proves_equal(lambda x: jnp.exp(jnp.log(jnp.exp(x))), jnp.exp, X, [ALGEBRA])


def test_times_one_plus_zero_becomes_x_in_real_mode():
    assert proves_equal(lambda x: x * 1.0 + 0.0, lambda x: x, X, [ALGEBRA])


def test_chain_of_exact_units_becomes_x_in_exact_mode():
    goal = lambda x: -(-(lax.integer_pow((x * 1.0) / 1.0 - 0.0, 1)))
    assert proves_equal(goal, lambda x: x, X, [ALGEBRA], "exact")
    response = optimized_matches(goal, X, "exact")
    assert response["program"]["eqns"] == []


def test_units_apply_to_integer_arrays():
    ints = [np.arange(12, dtype=np.int32).reshape(3, 4)]
    assert proves_equal(lambda i: lax.div(i * 1, np.int32(1)) - 0, lambda i: i, ints, [ALGEBRA], "exact")


def test_folds_are_exact_where_ieee_fixes_the_primitive():
    assert {n: rule_mode(ALGEBRA, n) for n in CASES if n.startswith("fold-")} == {
        "fold-add": "exact", "fold-sub": "exact", "fold-mul": "exact", "fold-div": "exact", "fold-pow": "real"}


def test_a_division_by_a_zero_literal_is_not_folded():
    program = _fold("div", 1.0, 0.0, 0.0).program([], {})
    program["outputs"] = ["t"]
    response = optimize(program)
    assert [e["op"] for e in response["program"]["eqns"]] == ["div"]


# --- Negative goals ------------------------------------------------------------------------------

def test_exp_log_of_unknown_sign_is_not_proven():
    assert not proves_equal(lambda x: jnp.exp(jnp.log(x)), lambda x: x, X, [ALGEBRA])


def test_add_zero_is_not_proven_in_exact_mode():
    assert not proves_equal(lambda x: x + 0.0, lambda x: x, X, [ALGEBRA], "exact")
    response = optimize(capture(lambda x: x + 0.0, *X), options={"fp_mode": "exact"})
    assert "add-zero" not in response["report"]["rewrites"]
    assert [e["op"] for e in response["program"]["eqns"]] == ["add"]


def test_log_exp_is_not_proven_in_exact_mode():
    assert not proves_equal(lambda x: jnp.log(jnp.exp(x)), lambda x: x, X, [ALGEBRA], "exact")


def test_non_unit_literals_are_not_units():
    for lhs in (lambda x: x * 2.0, lambda x: x / -1.0, lambda x: x - 1.0, lambda x: x + 1.0,
                lambda x: lax.integer_pow(x, 2), lambda x: -x):
        assert not proves_equal(lhs, lambda x: x, X, [ALGEBRA])


def test_zero_minus_x_is_not_x():
    assert not proves_equal(lambda x: 0.0 - x, lambda x: x, X, [ALGEBRA])


def test_sub_negative_zero_is_not_x_in_exact_mode():
    minus_neg_zero = lambda x: x - (-0.0)
    assert not proves_equal(minus_neg_zero, lambda x: x, X, [ALGEBRA], "exact")
