"""LAYOUT: every rule is sound in float64, fires on its own and keeps float32 bits through the
exact-mode pipeline; goal tests for composed layouts and negative tests for look-alikes."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import (ANALYSIS_RULES, RTOL, RuleCase, check_exact_keeps_bits, check_real_only, check_rule_numerics,
                          check_sound_and_proven, ill_typed_nodes, optimized_matches, proves_equal, proves_terms_equal,
                          random_args, rule_mode, saturate_fn, saturate_program, seeds, typed)

from rewrites.algebra import ALGEBRA
from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from rewrites.registry import Family
from rewrites.terms import Term, ivec
from service.optimizer.pipeline import optimize
from wire.capture import capture

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


def convert(x, new_dtype):
    return lax.convert_element_type_p.bind(x, new_dtype=np.dtype(new_dtype), weak_type=False, sharding=None)


def identity_convert_goal(arg_shapes, static):
    """(convert_element_type(x, dtype(x)), x) by hand: tracing forwards such a convert."""
    (s,) = arg_shapes
    spec = {"shape": list(s), "dtype": "float32"}
    return {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", **spec, "role": "activation"}], "consts": [],
            "eqns": [{"op": "convert_element_type", "in": ["x"], "out": [{"name": "c", **spec}],
                      "params": {"new_dtype": {"dtype": "float32"}, "weak_type": False, "sharding": None}}],
            "outputs": ["c", "x"]}


@st.composite
def squeezable(draw):
    """x with size-1 axes inserted into a base shape, and the positions to squeeze."""
    base = draw(st.lists(st.integers(1, 6), min_size=0, max_size=3))
    k = draw(st.integers(1, 3))
    dims = sorted(draw(st.lists(st.integers(0, len(base) + k - 1), min_size=k, max_size=k, unique=True)))
    s = list(base)
    for d in dims:
        s.insert(d, 1)
    return [tuple(s)], {"dims": tuple(dims), "base": tuple(base)}


def _grow(draw, s):
    """A broadcast of shape `s`: (out shape, broadcast dims); size-1 axes may stretch."""
    out_rank = len(s) + draw(st.integers(0, 2))
    if out_rank == 0:
        return (2,), ()
    bdims = sorted(draw(st.lists(st.integers(0, out_rank - 1), min_size=len(s), max_size=len(s), unique=True)))
    out = [draw(st.integers(1, 3)) for _ in range(out_rank)]
    for k, d in enumerate(bdims):
        out[d] = s[k] if s[k] != 1 else draw(st.integers(1, 3))
    if tuple(out) == tuple(s):  # an identity broadcast: tracing forwards some; add a leading axis
        return (2, *s), tuple(range(1, len(s) + 1))
    return tuple(out), tuple(bdims)


@st.composite
def two_broadcasts(draw):
    x = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    s1, d1 = _grow(draw, x)
    s2, d2 = _grow(draw, s1)
    return [x], {"s1": s1, "d1": d1, "s2": s2, "d2": d2}


@st.composite
def two_slices(draw):
    """Unit-stride slice of a unit-stride slice, every extent nonempty."""
    s = draw(layout_shape(max_rank=3))
    a, b, lo, hi = [], [], [], []
    for n in s:
        a.append(draw(st.integers(0, n - 1)))
        b.append(draw(st.integers(a[-1] + 1, n)))
        lo.append(draw(st.integers(0, b[-1] - a[-1] - 1)))
        hi.append(draw(st.integers(lo[-1] + 1, b[-1] - a[-1])))
    return [s], {"a": tuple(a), "b": tuple(b), "lo": tuple(lo), "hi": tuple(hi)}


@st.composite
def concat_parts(draw):
    """x, y differing only along `axis`, and which part (0: x, 1: y) the slice takes back."""
    s = draw(layout_shape(max_rank=3))
    axis = draw(st.integers(0, len(s) - 1))
    t = list(s)
    t[axis] = draw(st.integers(1, 9))
    return [s, tuple(t)], {"axis": axis, "part": draw(st.integers(0, 1))}


def slice_of_concat(x, y, axis, part):
    both = jnp.concatenate([x, y], axis)
    if part == 0:
        return lax.slice(both, (0,) * x.ndim, x.shape)
    return lax.slice(both, tuple(x.shape[axis] if k == axis else 0 for k in range(x.ndim)), both.shape)


@st.composite
def three_parts(draw):
    """x, y, z differing only along `axis`."""
    s = draw(layout_shape(max_rank=3))
    axis = draw(st.integers(0, len(s) - 1))
    shapes = [tuple(draw(st.integers(1, 5)) if k == axis else n for k, n in enumerate(s)) for _ in range(3)]
    return shapes, {"axis": axis}


@st.composite
def one_perm(draw):
    """A full reduction's operand and a non-identity permutation (else transpose-identity applies)."""
    s = draw(layout_shape(min_rank=2, max_rank=4))
    p = draw(st.permutations(range(len(s))).filter(lambda p: list(p) != sorted(p)))
    return [s], {"p": tuple(p)}


@st.composite
def scalar_broadcast(draw):
    return [()], {"s": tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))}


COPIES = {"copy": jnp.copy, "stop_gradient": lax.stop_gradient}  # both trace to their own primitive

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
    "squeeze-to-reshape": RuleCase(lambda x, dims, base: lax.squeeze(x, dims),
                                   lambda x, dims, base: reshape(x, base), squeezable()),
    "convert-identity": RuleCase(lambda x: convert(x, x.dtype), lambda x: x, unary,
                                 program=identity_convert_goal),
    "broadcast-broadcast": RuleCase(
        lambda x, s1, d1, s2, d2: broadcast(broadcast(x, s1, d1), s2, d2),
        lambda x, s1, d1, s2, d2: broadcast(x, s2, [d2[k] for k in d1]), two_broadcasts()),
    "slice-slice": RuleCase(
        lambda x, a, b, lo, hi: lax.slice(lax.slice(x, a, b), lo, hi),
        lambda x, a, b, lo, hi: lax.slice(x, [i + j for i, j in zip(a, lo)], [i + j for i, j in zip(a, hi)]),
        two_slices()),
    "concat-flatten": RuleCase(lambda x, y, z, axis: jnp.concatenate([jnp.concatenate([x, y], axis), z], axis),
                               lambda x, y, z, axis: jnp.concatenate([x, y, z], axis), three_parts()),
    "slice-of-concat": RuleCase(slice_of_concat, lambda x, y, axis, part: (x, y)[part], concat_parts()),
    "reduce-sum-of-transpose": RuleCase(lambda x, p: jnp.sum(transpose(x, p)), lambda x, p: jnp.sum(x),
                                        one_perm()),
    "reduce-max-of-transpose": RuleCase(lambda x, p: jnp.max(transpose(x, p)), lambda x, p: jnp.max(x),
                                        one_perm()),
    "reduce-min-of-transpose": RuleCase(lambda x, p: jnp.min(transpose(x, p)), lambda x, p: jnp.min(x),
                                        one_perm()),
    "reduce-sum-of-broadcast": RuleCase(lambda x, s: jnp.sum(broadcast(x, s, ())),
                                        lambda x, s: x * float(np.prod(s)), scalar_broadcast()),
    "copy-identity": RuleCase(lambda x, op: COPIES[op](x), lambda x, op: x,
                              layout_shape().flatmap(lambda s: st.sampled_from(sorted(COPIES)).map(
                                  lambda op: ([s], {"op": op})))),
}
# A sum regrouped or replaced by a product; a max/min over another order may propagate another nan.
REAL_RULES = {"reduce-sum-of-transpose", "reduce-sum-of-broadcast", "reduce-max-of-transpose",
              "reduce-min-of-transpose"}
# The rhs of reduce-sum-of-broadcast is a computed literal (flit); the captured rhs has an ingested
# one (lit). The algebra family's analyses identify them: the goal runs with those analyses too.
LAYOUT_WITH_LITERALS = Family("layout+literal-analyses")
LAYOUT_WITH_LITERALS.rules.extend([*LAYOUT.rules, *(r for r in ALGEBRA.rules if r.name in ANALYSIS_RULES)])
GOAL_FAMILY = {"reduce-sum-of-broadcast": LAYOUT_WITH_LITERALS}
# float32 only: the real-mode pipeline check (which captures in float64) has its own test below.
OWN_REAL_TEST = {"reduce-sum-of-broadcast"}
# Rules over constructors ingest never produces: proven on hand-built terms instead.
TERM_ONLY = {"squeeze-expand-dims"}


def test_every_layout_rule_has_a_case():
    assert set(CASES) | TERM_ONLY == set(LAYOUT.names) - ANALYSIS_RULES
    assert {n for n in LAYOUT.names if rule_mode(LAYOUT, n) == "real"} == REAL_RULES


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=seeds)
def test_rule_is_sound_in_float64_and_proves_its_goal(name, data, seed):
    check_sound_and_proven(GOAL_FAMILY.get(name, LAYOUT), name, CASES[name], data, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CASES) - REAL_RULES))
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_exact_rule_keeps_float32_bits_through_the_pipeline(name, data, seed):
    response, rhs_size = check_exact_keeps_bits(name, CASES[name], data, seed)
    assert len(response["program"]["eqns"]) <= rhs_size


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL_RULES - OWN_REAL_TEST))
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_real_rule_fires_in_real_mode_only(name, data, seed):
    check_real_only(LAYOUT, name, CASES[name], data, seed)


@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_reduce_sum_of_broadcast_fires_in_real_mode_only_on_float32(data, seed):
    name, case = "reduce-sum-of-broadcast", CASES["reduce-sum-of-broadcast"]
    arg_shapes, static = data.draw(case.draw)
    args = random_args(seed, arg_shapes)
    lhs, rhs, _ = case.bind(static)
    assert not proves_equal(lhs, rhs, args, [LAYOUT_WITH_LITERALS], "exact")
    program = capture(lhs, *args)
    assert name not in optimize(program, options={"fp_mode": "exact"})["report"]["rewrites"]
    response = optimized_matches(program, args, "real", seed=seed)
    assert name in response["report"]["rewrites"]
    assert len(response["program"]["eqns"]) <= 1  # one multiply


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


# --- Negative goals for the composing, concat-slicing and reducing rules -------------------------

@pytest.mark.parametrize("axis, start, limit", [(0, (1, 0), (4, 4)), (1, (0, 2), (3, 6))])
def test_slice_straddling_both_parts_of_a_concat_is_neither_part(axis, start, limit):
    # The window has the shape of a part, shifted so that it takes from both.
    def straddle_and_parts(x, y):
        return lax.slice(jnp.concatenate([x, y], axis), start, limit), x, y
    result = saturate_fn(straddle_and_parts, random_args(5, [(3, 4), (3, 4)]), [LAYOUT], "exact")
    assert not result.same_class(0, 1) and not result.same_class(0, 2)
    assert "slice-of-concat" not in result.report.rules_fired
    assert not ill_typed_nodes(result)


def test_slice_of_concat_takes_the_part_along_the_concat_axis():
    x, y = random_args(6, [(3, 3), (3, 3)])
    # Along axis 1 the second part starts at column 3.
    lhs = lambda x, y: lax.slice(jnp.concatenate([x, y], 1), (0, 3), (3, 6))
    assert proves_equal(lhs, lambda x, y: y, [x, y], [LAYOUT], "exact")
    assert not proves_equal(lhs, lambda x, y: x, [x, y], [LAYOUT], "exact")


def test_slice_of_slice_adds_the_offsets():
    v = random_args(7, [(9,)])
    inner = lambda x: lax.slice(lax.slice(x, (2,), (9,)), (1,), (4,))
    assert proves_equal(inner, lambda x: lax.slice(x, (3,), (6,)), v, [LAYOUT], "exact")
    assert not proves_equal(inner, lambda x: lax.slice(x, (1,), (4,)), v, [LAYOUT], "exact")


def test_broadcast_of_broadcast_composes_in_order():
    v = random_args(8, [(2,)])
    twice = lambda x: broadcast(broadcast(x, (2, 2), (0,)), (2, 2, 2), (1, 2))
    assert proves_equal(twice, lambda x: broadcast(x, (2, 2, 2), (1,)), v, [LAYOUT], "exact")
    assert not proves_equal(twice, lambda x: broadcast(x, (2, 2, 2), (2,)), v, [LAYOUT], "exact")


def test_narrowing_convert_round_trip_is_not_x():
    assert not proves_equal(lambda x: x.astype(jnp.float16).astype(jnp.float32), lambda x: x, X, [LAYOUT])


@pytest.mark.parametrize("reduce", [jnp.sum, jnp.max, jnp.min])
def test_partial_reduction_of_a_transpose_is_not_rewritten(reduce):
    # Row reductions of x.T are column reductions of x: not the row reductions of x.
    result = saturate_fn(lambda x: (reduce(x.T, axis=0), reduce(x, axis=0)), SQUARE, [LAYOUT])
    assert not result.same_class(0, 1)
    assert not {n for n in result.report.rules_fired if n.endswith("-of-transpose")}


def test_full_sum_of_a_transpose_is_not_a_different_reduction():
    assert not proves_equal(lambda x: jnp.sum(x.T), lambda x: jnp.max(x), SQUARE, [LAYOUT])
    assert not proves_equal(lambda x: jnp.max(x.T), lambda x: jnp.min(x), SQUARE, [LAYOUT])


def test_reduce_sum_of_broadcast_needs_a_scalar_a_full_reduction_and_float32():
    s, v = np.float32(1.5), random_args(9, [(3,)])[0]
    fired = lambda fn, args, **kw: "reduce-sum-of-broadcast" in saturate_fn(
        fn, args, [LAYOUT_WITH_LITERALS], **kw).report.rules_fired
    assert fired(lambda x: jnp.sum(broadcast(x, (3, 4), ())), [s])
    assert not fired(lambda x: jnp.sum(broadcast(x, (3, 4), (0,))), [v])  # a vector: not x * 12
    assert not proves_equal(lambda x: jnp.sum(broadcast(x, (3, 4), (0,))), lambda x: x * 12.0, [v],
                            [LAYOUT_WITH_LITERALS])
    assert not fired(lambda x: jnp.sum(broadcast(x, (3, 4), ()), axis=0), [s])  # partial
    with jax.enable_x64(True):
        assert not fired(lambda x: jnp.sum(broadcast(x, (3, 4), ())), [np.float64(1.5)])
