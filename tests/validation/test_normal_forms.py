"""Value numbering numbers each equation by its normal form: exact identities (data movement,
literal arithmetic, scaling by a power of two, unordered operands) in any mode, a merged GEMM's
slices as the GEMMs they replace and other identities of real arithmetic in real mode; anything else
is still checked by running it."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from validation.regions import find_regions
from validation.value_numbering import ValueTable
from validation.validate import validate
from wire.capture import capture

pytestmark = pytest.mark.unit
RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def _projections(merged: bool, starts=(0, 16, 32)):
    """Three projections of one input, each through its own nonlinearity; merged into one matmul
    over the concatenated weights and sliced at `starts` when asked."""
    def fn(x, wq, wk, wv):
        if merged:
            both = x @ jnp.concatenate([wq, wk, wv], axis=1)
            q, k, v = (both[:, s:s + 16] for s in starts)
        else:
            q, k, v = x @ wq, x @ wk, x @ wv
        return jnp.tanh(q) * jnp.sin(k) + v
    return capture(fn, _normal(8, 24), _normal(24, 16), _normal(24, 16), _normal(24, 16))


def test_slices_of_a_merged_gemm_are_the_gemms_they_replace_in_real_arithmetic():
    original, merged = _projections(False), _projections(True)
    plan = find_regions(original, merged, ValueTable(real=True))
    assert plan is not None and plan.regions == []
    originals = {e["out"][0]["name"] for e in original["eqns"] if e["op"] == "dot_general"}
    slices = [e["out"][0]["name"] for e in merged["eqns"] if e["op"] == "slice"]
    assert {plan.stands_for[s] for s in slices} == originals
    assert validate(original, merged)["status"] == "identical"


def test_an_exact_numbering_checks_a_merged_gemm_by_running_it():
    # a library GEMM may round a slice of a wider product differently from the narrower product
    plan = find_regions(_projections(False), _projections(True), ValueTable(real=False))
    assert plan is not None and len([root for region in plan.regions for root in region.roots]) == 3
    assert validate(_projections(False), _projections(True), "exact")["status"] != "identical"


def test_a_slice_off_a_part_s_bounds_is_checked_and_fails():
    original = _projections(False)
    plan = find_regions(original, _projections(True, starts=(0, 17, 32)), ValueTable(real=True))
    assert plan is not None and len(plan.regions) == 1
    assert validate(original, _projections(True, starts=(0, 17, 32)))["status"] == "failed"


def test_parts_sliced_the_wrong_way_round_fail():
    assert validate(_projections(False), _projections(True, starts=(0, 32, 16)))["status"] == "failed"


def test_a_slice_of_a_concatenation_is_its_operand_in_any_arithmetic():
    x, y = _normal(4, 8), _normal(4, 8)
    original = capture(lambda a, b: jnp.tanh(a) + b, x, y)
    rewritten = capture(lambda a, b: jnp.tanh(jnp.concatenate([b, a], axis=0)[4:]) + b, x, y)
    assert find_regions(original, rewritten, ValueTable(real=False)).regions == []
    assert validate(original, rewritten, "exact")["status"] == "identical"


def test_a_strided_slice_of_a_concatenation_is_not_its_operand():
    x = _normal(4, 8)
    original = capture(lambda a: a * 2.0, x)
    rewritten = capture(lambda a: jnp.concatenate([a, a], axis=1)[:, ::2] * 2.0, x)
    assert find_regions(original, rewritten, ValueTable(real=True)).regions != []


def test_rows_of_a_matmul_over_stacked_inputs_are_the_matmuls_they_replace():
    # the same weight applied to two inputs, stacked along M
    def fn(stacked):
        def f(x, h, w):
            if stacked:
                both = jnp.concatenate([x, h], axis=0) @ w
                return jnp.tanh(both[:8]) + both[8:]
            return jnp.tanh(x @ w) + h @ w
        return f
    args = (_normal(8, 16), _normal(8, 16), _normal(16, 32))
    assert validate(capture(fn(False), *args), capture(fn(True), *args))["status"] == "identical"


def _convs(merged: bool, groups: int = 1):
    """Two convolutions of one image; merged along the kernels' output features when asked."""
    def fn(x, k1, k2):
        conv = lambda k: jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", feature_group_count=groups)
        if merged:
            both = conv(jnp.concatenate([k1, k2], axis=0))
            return jnp.tanh(both[:, :4]) + both[:, 4:]
        return jnp.tanh(conv(k1)) + conv(k2)
    return capture(fn, _normal(2, 4, 6, 6), _normal(4, 4 // groups, 3, 3), _normal(4, 4 // groups, 3, 3))


def test_output_features_of_a_merged_convolution_are_the_convolutions_they_replace():
    assert validate(_convs(False), _convs(True))["status"] == "identical"


def test_a_grouped_convolution_is_not_seen_through():
    # with groups, output features read only their group's inputs: a slice of the merged
    # convolution is not the convolution of the slice of its kernel (and here is not equal at all)
    original, merged = _convs(False, groups=2), _convs(True, groups=2)
    assert find_regions(original, merged, ValueTable(real=True)).regions != []
    assert validate(original, merged)["status"] == "failed"


def _exact_verdict(original, rewritten, *args):
    return validate(capture(original, *args), capture(rewritten, *args), "exact")["status"]


def test_division_by_a_power_of_two_is_multiplication_by_its_reciprocal():
    x = _normal(8, 16)
    assert _exact_verdict(lambda a: jnp.tanh(a / 1024.0), lambda a: jnp.tanh(a * (1 / 1024)), x) == "identical"
    assert _exact_verdict(lambda a: a / -0.25, lambda a: a * -4.0, x) == "identical"


def _folded_literal(program, value):
    """`program` with its literal that is `value` rounded to float32 holding `value` itself, as the
    optimizer writes a constant it folded (capture writes what float32 holds)."""
    for eqn in program["eqns"]:
        eqn["in"] = [{**a, "lit": value} if isinstance(a, dict) and np.float32(a["lit"]) == np.float32(value) else a
                     for a in eqn["in"]]
    return program


def test_division_by_another_number_is_its_reciprocal_in_real_arithmetic_only():
    # x * (1/3) rounds twice: it can differ from x / 3 in the last bit, which only an exact check sees
    x = _normal(8, 16)
    original, rewritten = capture(lambda a: a / 3.0, x), _folded_literal(capture(lambda a: a * (1 / 3), x), 1 / 3)
    assert len(find_regions(original, rewritten, ValueTable(real=False)).regions) == 1
    assert validate(original, rewritten, "real")["status"] == "identical"
    # 1/3 rounded to float32 is another number: checked, and not within what rounding explains
    assert find_regions(original, capture(lambda a: a * (1 / 3), x), ValueTable(real=True)).regions != []
    assert validate(original, capture(lambda a: a * 0.33, x), "real")["status"] == "failed"


@pytest.mark.parametrize("dtype, divisor", [("float32", 1e-40), ("float16", 1e-5), ("float32", 3e-39)])
def test_a_subnormal_divisor_is_not_its_reciprocal(dtype, divisor):
    # XLA may flush a subnormal divisor to zero (x / c is then x / 0), and 1/c may not fit the type
    x = _normal(8, 16).astype(dtype)
    original = capture(lambda a: jnp.tanh(a / jnp.array(divisor, dtype)), x)
    held = original["eqns"][0]["in"][1]["lit"]
    rewritten = capture(lambda a: jnp.tanh(a * jnp.array(2.0, dtype)), x)
    rewritten["eqns"][0]["in"][1]["lit"] = 1.0 / held
    assert find_regions(original, rewritten, ValueTable(real=True)).regions != []


def test_a_scaled_product_is_one_product_whichever_factor_carries_the_scale():
    # a layer norm's (x - mean) * rsqrt(var) / n against the 1/n folded into another factor
    a, b = _normal(8, 16), _normal(8, 16)
    original = capture(lambda x, y: jnp.tanh((x * y) / 768.0), a, b)
    folded = _folded_literal(capture(lambda x, y: jnp.tanh(x * (y * (1 / 768))), a, b), 1 / 768)
    assert validate(original, folded)["status"] == "identical"
    assert validate(original, capture(lambda x, y: jnp.tanh(x * (y * (1 / 767))), a, b))["status"] == "failed"


def test_literal_arithmetic_is_the_literal_it_rounds_to():
    # a mean over (n - ddof) elements, as a layer norm library writes it, against the scale folded
    x = _normal(8, 16)
    original = lambda a: jnp.sum(a, axis=1) / (jnp.float32(16.0) - jnp.float32(0.0))
    assert _exact_verdict(original, lambda a: jnp.sum(a, axis=1) * 0.0625, x) == "identical"
    assert _exact_verdict(original, lambda a: jnp.sum(a, axis=1) * 0.125, x) == "failed"


def test_operands_of_a_commutative_op_are_unordered_and_of_others_are_not():
    x, y = _normal(8, 16), _normal(8, 16)
    assert _exact_verdict(lambda a, b: jnp.tanh(a) * b, lambda a, b: b * jnp.tanh(a), x, y) == "identical"
    assert _exact_verdict(lambda a, b: a - b, lambda a, b: b - a, x, y) == "failed"
    # max may pick either signed zero: bit for bit its operands keep their order, and the swap is run
    swapped = capture(jnp.maximum, x, y), capture(lambda a, b: jnp.maximum(b, a), x, y)
    assert find_regions(*swapped, ValueTable(real=False)).regions != []
    assert find_regions(*swapped, ValueTable(real=True)).regions == []


def test_a_float_sum_of_products_keeps_its_order_bit_for_bit():
    # XLA fuses the add with one of its products into an FMA, chosen by operand order: swapped, the
    # results differ in the last bit, so only a real-arithmetic numbering takes them as one value
    args = [_normal(1000) for _ in range(4)]
    original = capture(lambda a, b, c, d: a * b + c * d, *args)
    swapped = capture(lambda a, b, c, d: c * d + a * b, *args)
    assert find_regions(original, swapped, ValueTable(real=False)).regions != []
    assert validate(original, swapped, "exact")["status"] == "failed"
    assert validate(original, swapped, "real")["status"] == "identical"
    ints = [np.arange(12, dtype=np.int32) * k for k in range(1, 5)]
    assert _exact_verdict(lambda a, b, c, d: a * b + c * d, lambda a, b, c, d: d * c + b * a, *ints) == "identical"


def test_a_complex_product_keeps_its_order_bit_for_bit():
    z = (
        (_normal(1000) + 1j * _normal(1000)).astype(np.complex64),
        (_normal(1000) + 1j * _normal(1000)).astype(np.complex64),
    )
    assert find_regions(capture(jnp.multiply, *z), capture(lambda a, b: b * a, *z), ValueTable(real=False)).regions


def test_two_random_draws_alike_are_not_one_value():
    x = np.ones(4, np.float32)
    draw = lambda: jax.lax.rng_uniform(np.float32(0), np.float32(1), (4,))
    original = capture(lambda a: (a + draw(), a + draw()), x)
    one_draw = {**original, "eqns": original["eqns"][:2], "outputs": [original["outputs"][0]] * 2}
    for mode in ("exact", "real"):
        assert validate(original, original, mode)["status"] == "identical"
        assert validate(original, one_draw, mode)["status"] not in ("identical", "passed")


def _scaled_by(*eqns):
    """x times a scalar that `eqns` compute from float32 literals into `s`, broadcast."""
    scalar = lambda name: [{"name": name, "shape": [], "dtype": "float32"}]
    vector = lambda name: [{"name": name, "shape": [4], "dtype": "float32"}]
    return {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}], "consts": [],
            "eqns": [*({**e, "out": scalar(e["out"])} for e in eqns),
                     {"op": "broadcast_in_dim", "in": ["s"], "out": vector("b"),
                      "params": {"shape": [4], "broadcast_dimensions": [], "sharding": None}},
                     {"op": "mul", "in": ["x", "b"], "out": vector("y"), "params": {}}],
            "outputs": ["y"]}


def test_literal_arithmetic_folds_as_each_mode_evaluates_it():
    # (1 + 2^-24) - 1 is 0 in float32 and 2^-24 in real arithmetic
    lit = lambda v: {"lit": v, "dtype": "float32"}
    original = _scaled_by({"op": "add", "in": [lit(1.0), lit(2.0 ** -24)], "out": "a", "params": {}},
                          {"op": "sub", "in": ["a", lit(1.0)], "out": "s", "params": {}})
    zero = _scaled_by({"op": "mul", "in": [lit(0.0), lit(1.0)], "out": "s", "params": {}})
    assert validate(original, zero, "exact")["status"] == "identical"
    assert validate(original, zero, "real")["status"] == "failed"


def test_a_slice_of_a_folded_literal_is_numbered_as_written():
    lit = lambda v: {"lit": v, "dtype": "float32"}
    program = _scaled_by({"op": "add", "in": [lit(1.0), lit(2.0)], "out": "a", "params": {}},
                         {"op": "slice", "in": ["a"], "out": "s",
                          "params": {"start_indices": [], "limit_indices": [], "strides": None}})
    assert validate(program, program, "exact")["status"] == "identical"


def test_composed_data_movement_is_one_move_and_no_move_where_it_cancels():
    x = _normal(2, 3, 4)
    twice = lambda a: jnp.tanh(jnp.transpose(jnp.transpose(a, (1, 2, 0)), (2, 1, 0)))
    assert _exact_verdict(twice, lambda a: jnp.tanh(jnp.transpose(a, (0, 2, 1))), x) == "identical"
    assert _exact_verdict(twice, lambda a: jnp.tanh(jnp.transpose(a, (2, 1, 0))), _normal(3, 3, 3)) == "failed"
    assert _exact_verdict(lambda a: jnp.transpose(jnp.transpose(a, (1, 0, 2)), (1, 0, 2)) + 1.0,
                          lambda a: a + 1.0, x) == "identical"
    spread = lambda a: jax.lax.broadcast_in_dim(jax.lax.broadcast_in_dim(a, (1, 4), (1,)), (5, 3, 4), (1, 2))
    assert _exact_verdict(spread, lambda a: jax.lax.broadcast_in_dim(a, (5, 3, 4), (2,)), _normal(4)) == "identical"
    assert _exact_verdict(lambda a: jnp.sin(a.reshape(6, 4).reshape(2, 12)), lambda a: jnp.sin(a.reshape(2, 12)),
                          x) == "identical"


def test_stop_gradient_is_its_operand():
    x = _normal(8, 16)
    assert _exact_verdict(lambda a: jnp.exp(jax.lax.stop_gradient(a)), jnp.exp, x) == "identical"


def test_a_sum_added_in_another_order_is_one_sum_in_real_arithmetic_only():
    # a residual stream: x + (attention + mlp) rewritten as (x + attention) + mlp
    args = [_normal(8, 16) for _ in range(3)]
    original = capture(lambda x, a, m: jnp.tanh(x + jnp.sin(a) * m + jnp.exp(m)), *args)
    reassociated = capture(lambda x, a, m: jnp.tanh((jnp.exp(m) + x) + jnp.sin(a) * m), *args)
    assert validate(original, reassociated, "real")["status"] == "identical"
    assert find_regions(original, reassociated, ValueTable(real=False)).regions != []
    wrong = capture(lambda x, a, m: jnp.tanh((jnp.exp(m) + x) + jnp.sin(a) * x), *args)
    assert validate(original, wrong, "real")["status"] == "failed"


def test_a_product_of_products_is_one_product_in_real_arithmetic():
    args = [_normal(8, 16) for _ in range(3)]
    assert validate(capture(lambda a, b, c: (a * b) * c, *args),
                    capture(lambda a, b, c: a * (c * b), *args), "real")["status"] == "identical"


def _residual_stream(term):
    """x + attention + mlp + bias, the attention term as `term` computes it."""
    def fn(x, a, b, m):
        return jnp.tanh(jnp.sin(m) + (x + term(a, b)) + jnp.cos(m))
    return capture(fn, *(_normal(8, 16) for _ in range(4)))


def test_a_rewritten_term_of_a_sum_is_the_only_region_not_the_sum():
    # the sums around it are the same terms in another order: pairing finds the term that changed
    original = _residual_stream(lambda a, b: jnp.exp(a) * jnp.exp(b))
    rewritten = _residual_stream(lambda a, b: jnp.exp(a + b))
    plan = find_regions(original, rewritten, ValueTable(real=True))
    assert len(plan.regions) == 1
    [region] = plan.regions
    assert [rewritten["eqns"][i]["op"] for i in region.eqns] == ["add", "exp"]
    assert validate(original, rewritten)["status"] == "passed"
    assert validate(original, _residual_stream(lambda a, b: jnp.exp(a - b)))["status"] == "failed"


def test_terms_of_a_sum_that_could_pair_either_way_are_checked_as_the_sum():
    # two changed terms alike in structure: which pairs with which would be a guess
    args = [_normal(8, 16) for _ in range(3)]
    original = capture(lambda x, a, b: jnp.tanh(x + jnp.sin(a) + jnp.sin(b)), *args)
    swapped = capture(lambda x, a, b: jnp.tanh(x + jnp.sin(b * 1.0) + jnp.sin(a * 1.0)), *args)
    plan = find_regions(original, swapped, ValueTable(real=True))
    assert any(original["eqns"][plan.original_numbered.producer[o][0]]["op"] == "add"
               for region in plan.regions for o, _ in region.roots)
    assert validate(original, swapped)["status"] in ("passed", "identical")


def test_a_chain_of_matrix_products_in_another_order_is_one_chain_in_real_arithmetic_only():
    a, b, c, d = _normal(8, 16), _normal(16, 4), _normal(4, 32), _normal(32, 8)
    original = capture(lambda a, b, c, d: jnp.tanh(((a @ b) @ c) @ d), a, b, c, d)
    regrouped = capture(lambda a, b, c, d: jnp.tanh(a @ ((b @ c) @ d)), a, b, c, d)
    assert validate(original, regrouped)["status"] == "identical"
    assert find_regions(original, regrouped, ValueTable(real=False)).regions != []
    square = [_normal(8, 8) for _ in range(3)]
    reordered = capture(lambda a, b, c: a @ (c @ b), *square)  # same factors, another order: another product
    assert validate(capture(lambda a, b, c: (a @ b) @ c, *square), reordered)["status"] == "failed"


@pytest.mark.parametrize("factors, product", [("float32", "int32"), ("complex64", "float32"), ("float32", "bool")])
def test_a_chain_of_products_that_convert_is_not_one_chain(factors, product):
    # each product truncates (drops the imaginary part, tests for nonzero) on its own: the order shows
    a, b, c = (RNG.normal(size=s).astype(factors) for s in [(4, 8), (8, 8), (8, 4)])
    dot = lambda x, y: jax.lax.dot_general(x, y, (((1,), (0,)), ((), ())), preferred_element_type=product)
    original = capture(lambda a, b, c: dot(dot(a, b), c), a, b, c)
    regrouped = capture(lambda a, b, c: dot(a, dot(b, c)), a, b, c)
    assert find_regions(original, regrouped, ValueTable(real=True)).regions != []


def test_a_chain_of_products_of_other_precisions_is_not_one_chain():
    a, b, c = _normal(8, 16), _normal(16, 4), _normal(4, 8)
    highest = lambda x, y: jnp.matmul(x, y, precision="highest")
    original = capture(lambda a, b, c: highest(a, b) @ c, a, b, c)
    assert find_regions(original, capture(lambda a, b, c: a @ highest(b, c), a, b, c), ValueTable(real=True)).regions


def test_a_merged_gemm_at_the_end_of_a_chain_is_the_gemms_it_replaces():
    x, a, wq, wk = _normal(8, 16), _normal(16, 24), _normal(24, 8), _normal(24, 8)
    original = capture(lambda x, a, wq, wk: jnp.tanh((x @ a) @ wq) * ((x @ a) @ wk), x, a, wq, wk)

    def merged(x, a, wq, wk):
        both = x @ (a @ jnp.concatenate([wq, wk], axis=1))
        return jnp.tanh(both[:, :8]) * both[:, 8:]
    assert validate(original, capture(merged, x, a, wq, wk))["status"] == "identical"
