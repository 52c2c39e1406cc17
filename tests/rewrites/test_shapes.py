"""The type analysis: terms the rules build get the shape and dtype JAX gives them, including
result types that live in params (a dot's preferred_element_type, mul's out_dtype), and a rule
never builds a product whose result type the program does not show."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from rule_harness import ill_typed_nodes, saturate_fn

from rewrites.algebra import ALGEBRA
from rewrites.layout import LAYOUT
from rewrites.matmul import MATMUL
from rewrites.merge import MERGE

# idioms aside: their kernels are no primitive JAX could type-check
ALGEBRAIC_FAMILIES = [ALGEBRA, LAYOUT, MATMUL, MERGE]


def _attention_block(x, wq, wk, wv, wo, gamma):
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = (q @ k.T) / jnp.sqrt(jnp.float32(q.shape[-1]))
    weights = jnp.exp(scores - scores.max(-1, keepdims=True))
    attended = (weights / weights.sum(-1, keepdims=True)) @ v
    mean = attended.mean(-1, keepdims=True)
    normed = (attended - mean) * lax.rsqrt(((attended - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    return (normed * gamma) @ wo + x * 2.0


def test_every_class_the_whole_rule_set_builds_is_typed_as_jax_types_it():
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 16), (16, 16), (16, 16), (16, 16), (16,))]
    result = saturate_fn(_attention_block, args, ALGEBRAIC_FAMILIES, iterations=6)
    assert sum(result.report.rules_fired.values()) > 20
    assert not ill_typed_nodes(result)


def test_a_product_of_operand_types_the_program_never_multiplies_is_not_built():
    # (a@b)@c with bfloat16 a, b accumulated in float32: regrouping would build b@c, a bfloat16 by
    # float32 product whose result type nothing in the program shows; the regrouping the other
    # way round is typed like the program's own products and is built
    def chain(a, b, c):
        ab = lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return ab @ c
    args = [np.ones((4, 8), jnp.bfloat16), np.ones((8, 16), jnp.bfloat16), np.ones((16, 4), np.float32)]
    result = saturate_fn(chain, args, [MATMUL], only=["matmul-assoc-right"])
    assert "matmul-assoc-right" not in result.report.rules_fired
    assert not ill_typed_nodes(result)


def test_a_result_type_held_in_params_is_kept_by_the_terms_rules_build():
    # (-x)*y with out_dtype float32 on bfloat16 operands -> -(x*y): the new product is float32 too
    def scaled(x, y):
        return lax.mul(-x, y, out_dtype=np.dtype("float32"))
    args = [np.ones((4,), jnp.bfloat16), np.ones((4,), jnp.bfloat16)]
    result = saturate_fn(scaled, args, [ALGEBRA], only=["neg-mul"])
    assert result.report.rules_fired.get("neg-mul", 0) > 0
    assert {cls.dtype for cls in result.view.classes.values()} == {"bfloat16", "float32"}
    assert not ill_typed_nodes(result)


def test_a_size_one_dim_broadcast_against_an_empty_one_is_empty():
    # lax broadcasts a size-1 dim to the other's size, zero included: (0, 3) + (1, 3) is (0, 3)
    args = [np.zeros((0, 3), np.float32), np.ones((1, 3), np.float32)]
    result = saturate_fn(lambda a, b: -(a + b) * b, args, [ALGEBRA])
    assert result.report.rules_fired.get("neg-mul", 0) > 0
    assert not ill_typed_nodes(result)
