"""Capture -> JSON -> callable round trips: a sweep of jax.lax primitives, wrapper inlining,
nested control flow and the model zoo, all compared bit for bit under jax.jit."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from wire.capture import capture, capture_with_trees
from wire.execute import program_to_callable, typecheck
from wire.format import WireError, WireProgram

_RNG_KINDS = {
    "f": lambda r: r.standard_normal((4, 8)).astype(np.float32),
    "p": lambda r: r.uniform(0.1, 4.0, (4, 8)).astype(np.float32),
    "u": lambda r: r.uniform(-0.9, 0.9, (4, 8)).astype(np.float32),
    "g": lambda r: r.uniform(1.1, 4.0, (4, 8)).astype(np.float32),
    "i": lambda r: r.integers(-50, 50, (4, 8)).astype(np.int32),
    "s": lambda r: r.integers(0, 8, (4, 8)).astype(np.int32),
    "w": lambda r: r.integers(0, 2**32, (4, 8), dtype=np.uint64).astype(np.uint32),
    "b": lambda r: r.integers(0, 2, (4, 8)).astype(bool),
    "m": lambda r: r.standard_normal((8, 5)).astype(np.float32),
    "img": lambda r: r.standard_normal((2, 3, 8, 8)).astype(np.float32),
    "ker": lambda r: r.standard_normal((4, 3, 3, 3)).astype(np.float32),
}

_IDX = np.array([[0], [2], [3]], np.int32)
_SCATTER_DN = lax.ScatterDimensionNumbers((1,), (0,), (0,))
_GATHER_DN = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                        start_index_map=(0,))


def _scatter(op):
    return lambda x: op(x, _IDX, jnp.ones((3, 8), x.dtype), _SCATTER_DN)


# id -> (function, input kinds); each exercises (at least) the primitive it is named after.
SWEEP = {
    **{n: (getattr(lax, n), "f") for n in (
        "exp", "tanh", "logistic", "erf", "erfc", "sin", "cos", "tan", "atan", "sinh", "cosh",
        "asinh", "abs", "sign", "floor", "ceil", "neg", "expm1", "exp2", "cbrt", "is_finite",
        "square", "stop_gradient")},
    **{n: (getattr(lax, n), "p") for n in ("log", "sqrt", "rsqrt", "log1p", "lgamma",
                                           "digamma", "bessel_i0e", "bessel_i1e")},
    **{n: (getattr(lax, n), "u") for n in ("asin", "acos", "atanh", "erf_inv")},
    "acosh": (lax.acosh, "g"),
    **{n: (getattr(lax, n), "ff") for n in ("add", "sub", "mul", "div", "max", "min", "atan2",
                                            "rem", "nextafter", "eq", "ne", "lt", "le", "gt",
                                            "ge")},
    "pow": (lax.pow, "pf"),
    "integer_pow": (lambda x: lax.integer_pow(x, 3), "f"),
    "round": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), "f"),
    "clamp": (lambda x: lax.clamp(np.float32(-0.5), x, np.float32(0.5)), "f"),
    "select_n": (lambda b, x, y: lax.select_n(b, x, y), "bff"),
    "and": (lax.bitwise_and, "ii"), "or": (lax.bitwise_or, "ii"), "xor": (lax.bitwise_xor, "ii"),
    "not": (lax.bitwise_not, "i"), "logical_and": (jnp.logical_and, "bb"),
    "shift_left": (lax.shift_left, "is"), "shift_right_arithmetic": (lax.shift_right_arithmetic, "is"),
    "shift_right_logical": (lambda w, s: lax.shift_right_logical(w, s.astype(np.uint32)), "ws"),
    "clz": (lax.clz, "w"), "population_count": (lax.population_count, "i"),
    "int_rem": (lax.rem, "is"), "int_max": (lax.max, "ii"),
    "reduce_sum": (lambda x: x.sum(1), "f"), "reduce_max": (lambda x: x.max(0), "f"),
    "reduce_min": (lambda x: x.min(), "f"), "reduce_prod": (lambda x: x.prod(1), "f"),
    "reduce_and": (lambda b: b.all(1), "b"), "reduce_or": (lambda b: b.any(0), "b"),
    "reduce_xor": (lambda i: lax.reduce_xor_p.bind(i, axes=(1,)), "i"),
    "argmax": (lambda x: jnp.argmax(x, 1), "f"), "argmin": (lambda x: jnp.argmin(x, 0), "f"),
    "reduce_precision": (lambda x: lax.reduce_precision(x, 5, 10), "f"),
    "cumsum": (lambda x: lax.cumsum(x, 1), "f"), "cumprod": (lambda x: lax.cumprod(x, 0), "f"),
    "cummax": (lambda x: lax.cummax(x, 1, reverse=True), "f"), "cummin": (lambda x: lax.cummin(x, 0), "f"),
    "cumlogsumexp": (lambda x: lax.cumlogsumexp(x, 1), "f"),
    "transpose": (lambda x: x.T, "f"), "reshape": (lambda x: x.reshape(8, 4), "f"),
    "broadcast_in_dim": (lambda x: jnp.broadcast_to(x, (3, 4, 8)), "f"),
    "squeeze": (lambda x: lax.squeeze(x[:1], (0,)), "f"),
    "expand_dims": (lambda x: lax.expand_dims(x, (1,)), "f"),
    "concatenate": (lambda x, y: lax.concatenate([x, y, x], 0), "ff"),
    "pad": (lambda x: lax.pad(x, np.float32(0.5), ((1, 2, 1), (0, -1, 0))), "f"),
    "rev": (lambda x: lax.rev(x, (0, 1)), "f"),
    "slice": (lambda x: lax.slice(x, (1, 0), (4, 8), (2, 3)), "f"),
    "split": (lambda x: lax.split(x, (3, 5), axis=1), "f"),
    "dynamic_slice": (lambda x, s: lax.dynamic_slice(x, (s[0, 0], 2), (2, 4)), "fs"),
    "dynamic_update_slice": (lambda x, y: lax.dynamic_update_slice(x, y[:2, :3], (1, 4)), "ff"),
    "gather": (lambda x: lax.gather(x, _IDX, _GATHER_DN, (1, 8),
                                    mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS), "f"),
    "take_fill": (lambda x: jnp.take(x, np.array([0, 9, -1]), axis=1, mode="fill",
                                     fill_value=np.nan), "f"),
    "scatter": (_scatter(lax.scatter), "f"), "scatter-add": (_scatter(lax.scatter_add), "f"),
    "scatter-mul": (_scatter(lax.scatter_mul), "f"), "scatter-min": (_scatter(lax.scatter_min), "f"),
    "scatter-max": (_scatter(lax.scatter_max), "f"),
    "dot_general": (lambda x, m: lax.dot_general(x, m, (((1,), (0,)), ((), ()))), "fm"),
    "dot_general_batched": (lambda x, y: lax.dot_general(
        x.reshape(4, 2, 4), y.reshape(4, 4, 2), (((2,), (1,)), ((0,), (0,))),
        precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32), "ff"),
    "conv_general_dilated": (lambda a, k: lax.conv_general_dilated(
        a, k, (2, 1), ((1, 1), (0, 2)), rhs_dilation=(1, 2)), "imgker"),
    "sort": (lambda x: lax.sort(x, dimension=0), "f"),
    "sort_multi": (lambda x, y: lax.sort((x, y), num_keys=1), "ff"),
    "top_k": (lambda x: lax.top_k(x, 3), "f"),
    "iota": (lambda x: x + lax.iota(np.float32, 8), "f"),
    "convert_element_type": (lambda x: lax.convert_element_type(x, jnp.bfloat16), "f"),
    "bitcast_convert_type": (lambda x: lax.bitcast_convert_type(x, jnp.int32), "f"),
    "reduce_window": (lambda x: lax.reduce_window(x, -np.inf, lax.max, (2, 2), (1, 2), "SAME"), "f"),
    "copy": (lambda x: lax.copy_p.bind(x), "f"),
    "scan": (lambda x: lax.scan(lambda c, r: (c * 0.5 + r, jnp.tanh(c)), x[0], x), "f"),
    "while": (lambda x: lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, jnp.sin(c[1])),
                                       (0, x))[1], "f"),
    "cond": (lambda x: lax.cond(x.sum() > 0, jnp.exp, lambda v: v - 1, x), "f"),
    "switch": (lambda x, s: lax.switch(s[0, 0] % 3, [jnp.sin, jnp.cos, jnp.tanh], x), "fs"),
    "fori_loop": (lambda x, s: lax.fori_loop(0, s[0, 0], lambda i, c: c * 1.5 + i, x), "fs"),
}


def _kinds(spec: str) -> list[str]:
    out, rest = [], spec
    while rest:
        k = next(k for k in sorted(_RNG_KINDS, key=len, reverse=True) if rest.startswith(k))
        out.append(k)
        rest = rest[len(k):]
    return out


def _args(spec: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [_RNG_KINDS[k](rng) for k in _kinds(spec)]


def ops_of(program: dict) -> set[str]:
    """Every op name in a program, nested programs included."""
    ops = set()
    for eqn in program["eqns"]:
        ops.add(eqn["op"])
        stack = list(eqn["params"].values())
        while stack:
            v = stack.pop()
            if isinstance(v, dict) and "program" in v:
                ops |= ops_of(v["program"])
            elif isinstance(v, (list, dict)):
                stack.extend(v.values() if isinstance(v, dict) else v)
    return ops


def assert_round_trip(fn, args, weight_argnums=()) -> dict:
    program, _, out_tree = capture_with_trees(fn, *args, weight_argnums=weight_argnums)
    WireProgram.model_validate(program)
    program = json.loads(json.dumps(program, allow_nan=False))
    typecheck(program)
    rebuilt = program_to_callable(program)
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    got = jax.jit(rebuilt)(*jax.tree_util.tree_leaves(args))
    assert len(got) == len(want) == out_tree.num_leaves
    for w, g in zip(want, got):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    return program


@pytest.mark.parametrize("name", sorted(SWEEP))
def test_primitive_round_trip_is_bit_identical(name):
    fn, spec = SWEEP[name]
    assert_round_trip(fn, _args(spec))


def test_sweep_covers_at_least_60_primitives():
    ops = set()
    for fn, spec in SWEEP.values():
        ops |= ops_of(capture(fn, *_args(spec)))
    assert len(ops) >= 60, sorted(ops)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_round_trip_is_bit_identical(name):
    fn, args = ZOO[name]()
    program = assert_round_trip(fn, args, WEIGHT_ARGNUMS[name])
    roles = [i["role"] for i in program["inputs"]]
    n_weights = len(jax.tree_util.tree_leaves([args[i] for i in WEIGHT_ARGNUMS[name]]))
    assert roles.count("weight") == n_weights


_WRAPPERS = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
             "custom_vjp_call_jaxpr", "remat2", "checkpoint"}


@jax.custom_vjp
def _clip_grad(x):
    return jnp.sin(x)


_clip_grad.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (jnp.clip(g, -1, 1),))


def test_wrappers_are_inlined_everywhere():
    inner = jax.jit(lambda v: v * 2.0 + 1.0)

    def fn(x):
        y = jax.checkpoint(lambda v: jnp.tanh(inner(v)))(jax.nn.relu(x))
        y = _clip_grad(y)
        return lax.scan(lambda c, r: (jax.nn.relu(c + inner(r)), c), y[0], y)

    program = assert_round_trip(fn, _args("f"))
    assert not ops_of(program) & _WRAPPERS
    assert {"tanh", "max", "sin", "scan"} <= ops_of(program)


def test_control_flow_keeps_nested_programs():
    x = _args("f")
    fns = {"scan": SWEEP["scan"][0], "while": SWEEP["while"][0], "cond": SWEEP["cond"][0]}
    for op, fn in fns.items():
        program = capture(fn, *x)
        eqn = next(e for e in program["eqns"] if e["op"] == op)
        nested = [
            v
            for v in jax.tree_util.tree_leaves(eqn["params"], is_leaf=lambda v: isinstance(v, dict) and "program" in v)
            if isinstance(v, dict) and "program" in v
        ]
        assert nested, op
        for sub in nested:
            WireProgram.model_validate(sub["program"])


def test_names_are_unique_and_pytrees_flatten():
    def fn(d, w):
        top, _ = lax.top_k(d["a"] @ w, 2)
        return {"s": top, "t": (d["b"].sum(), d["a"])}

    args = ({"a": _args("f")[0], "b": np.ones(3, np.float32)}, _args("m")[0])
    program, in_tree, out_tree = capture_with_trees(fn, *args, weight_argnums=(1,))
    names = ([i["name"] for i in program["inputs"]] + [c["name"] for c in program["consts"]]
             + [o["name"] for e in program["eqns"] for o in e["out"]])
    assert len(names) == len(set(names))
    assert [i["name"] for i in program["inputs"]] == ["in0", "in1", "in2"]
    assert [i["role"] for i in program["inputs"]] == ["activation", "activation", "weight"]
    assert in_tree.num_leaves == 3 and out_tree.num_leaves == 3
    assert program["outputs"][-1] == "in0"


def test_closed_over_arrays_become_consts_and_literals_keep_dtype():
    table = np.arange(8, dtype=np.float32)
    program = assert_round_trip(lambda x: (x * table + 2.0).astype(jnp.int8) + np.int8(3), _args("f"))
    assert [c["name"] for c in program["consts"]] == ["c0"]
    lits = [x for e in program["eqns"] for x in e["in"] if isinstance(x, dict)]
    assert {(float(lit["lit"]), lit["dtype"]) for lit in lits} >= {(2.0, "float32"), (3.0, "int8")}


def test_a_custom_linear_solve_is_inlined_as_its_solve():
    a = np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)
    b = np.array([1.0, 2.0], np.float32)

    def fn(a, b):
        return lax.custom_linear_solve(lambda x: a @ x, b, solve=lambda _, r: jnp.linalg.solve(a, r))

    program = capture(fn, a, b)
    assert "custom_linear_solve" not in {e["op"] for e in program["eqns"]}
    np.testing.assert_allclose(program_to_callable(program)(a, b)[0], fn(a, b), rtol=1e-6)


def test_a_typed_prng_key_is_refused_naming_the_primitive_and_the_dtype():
    with pytest.raises(WireError) as err:
        capture(lambda x: jax.random.uniform(jax.random.key(0), x.shape) + x, np.zeros(3, np.float32))
    assert "primitive 'random_seed'" in str(err.value) and "key<fry>" in str(err.value)


def test_device_put_is_captured_as_the_values_it_places():
    x = np.arange(3, dtype=np.float32)
    program = capture(lambda x: jax.device_put(x) * 2.0, x)
    assert [e["op"] for e in program["eqns"]] == ["mul"]
    np.testing.assert_array_equal(program_to_callable(program)(x)[0], x * 2.0)


def test_a_dtype_param_spelled_as_a_jax_scalar_type_round_trips():
    # lax.mul(..., out_dtype=jnp.float32): the type object, not a numpy dtype, sits in the params
    def scaled(x, y):
        return lax.mul(x, y, out_dtype=jnp.float32)
    x = np.arange(4, dtype=np.float32).astype(jnp.bfloat16)
    program = capture(scaled, x, x)
    assert program["eqns"][0]["params"]["out_dtype"] == {"dtype": "float32"}
    (out,) = program_to_callable(json.loads(json.dumps(program)))(x, x)
    assert out.dtype == np.float32 and np.array_equal(out, scaled(x, x))
