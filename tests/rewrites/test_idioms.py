"""IDIOMS: each idiom is recognized as one named op in the decomposition's e-class, its expansion
computes the same values (float64), the pipeline result is bit-identical, near misses are not
recognized."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from rule_harness import check_rule_numerics, optimized_matches, random_args, saturate_fn, seeds, shapes

from lowering.idioms import expand, reference
from rewrites.idioms import IDIOMS
from rewrites.layout import LAYOUT
from wire.execute import program_to_callable

pytestmark = pytest.mark.slow  # whole programs through the pipeline

SQRT8 = np.float32(np.sqrt(8))


def _normalize(x, eps=1e-5):
    """The zoo's layer norm without its scale and shift (those stay separate ops)."""
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)


def attention(q, k, v):
    return jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / SQRT8, axis=-1) @ v


# rule -> (the decomposition as JAX or users write it, the idiom's op, its params)
CASES = {
    "softmax-idiom": (lambda x: jax.nn.softmax(x, axis=-1), "softmax", {}),
    "gelu-tanh-idiom": (lambda x: jax.nn.gelu(x, approximate=True), "gelu", {"approximate": True}),
    "gelu-erf-idiom": (lambda x: jax.nn.gelu(x, approximate=False), "gelu", {"approximate": False}),
    "layer-norm-idiom": (lambda x: _normalize(x), "layer_norm", {}),
    "attention-idiom": (attention, "attention", {}),
}


def test_every_idiom_rule_has_a_case():
    assert set(CASES) == set(IDIOMS.names)


def _draw(name, data):
    if name == "attention-idiom":
        return [data.draw(st.tuples(*(st.integers(2, 4) for _ in range(4))))] * 3  # size-1 axes: see below
    shape = data.draw(shapes(1, 3))
    # Size-1 reduced axes are left out: JAX emits other equations for them, the patterns do not
    # match, and the program is simply kept as it is.
    return [(*shape[:-1], max(2, shape[-1]))]


def _recognized(fn, args, op) -> bool:
    # LAYOUT for copy-identity: JAX wraps softmax's max in stop_gradient and ends gelu with a copy.
    result = saturate_fn(fn, args, [LAYOUT, IDIOMS])
    return any(n.op == op for n in result.root(0).nodes)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=3, deadline=None)
@given(data=st.data(), seed=seeds)
def test_idiom_is_recognized_and_its_expansion_is_exact(name, data, seed):
    fn, op, params = CASES[name]
    arg_shapes = _draw(name, data)
    args = random_args(seed, arg_shapes)
    assert _recognized(fn, args, op)
    if op == "layer_norm":
        expanded = lambda x: reference(op, params)(x, 1e-5)
    elif op == "attention":
        expanded = lambda q, k, v: reference(op, params)(q, k.transpose(0, 1, 3, 2), v, float(SQRT8))
    else:
        expanded = reference(op, params)
    check_rule_numerics(fn, expanded, random_args(seed, arg_shapes, np.float64), 1e-12)
    response = optimized_matches(fn, args, "exact", seed=seed)
    assert name in response["report"]["rewrites"]


def test_near_misses_are_not_recognized():
    x = random_args(0, [(3, 5, 7)])
    assert not _recognized(lambda x: jax.nn.softmax(x, axis=0), x, "softmax")  # not the last axis
    assert not _recognized(lambda x: jnp.exp(x) / jnp.sum(jnp.exp(x), -1, keepdims=True), x, "softmax")  # no max shift
    assert not _recognized(lambda x: x * 0.5 * (1 + jnp.tanh(0.8 * (x + 0.044715 * x ** 3))), x, "gelu")
    wrong_count = lambda x: (x - x.sum(-1, keepdims=True) / 6) * lax.rsqrt(
        ((x - x.sum(-1, keepdims=True) / 6) ** 2).sum(-1, keepdims=True) / 6 + 1e-5)
    assert not _recognized(wrong_count, x, "layer_norm")  # divides by 6, the axis has 7


def test_softmax_expands_without_a_stop_gradient_kernel():
    # stop_gradient is a forward no-op; emitted it would be a kernel of its own
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    eqns = expand("softmax", {}, ["x"], [((4, 8), "float32")], "y")
    assert "stop_gradient" not in [e["op"] for e in eqns]
    program = {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32"}],
               "consts": [], "eqns": eqns, "outputs": ["y"]}
    (got,) = program_to_callable(program)(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.nn.softmax(x, axis=-1)))
