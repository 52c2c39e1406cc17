"""Elementwise ATen ops: arithmetic, comparisons, logic, activations and casts. Operands are
promoted as torch promotes them (the node's `promoted` dtype), then computed in that dtype."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from wire.aten import as_dtype, is_tensor, lowers, truthy


def _promoted(out, *xs):
    dtype = out.promoted if out.promoted is not None else out.dtype
    return [as_dtype(x, dtype) for x in xs]


def _binary(fn):
    def lower(out, a, b, **_):
        return as_dtype(fn(*_promoted(out, a, b)), out.dtype)
    return lower


def _true_div(a, b):
    return a / b


def _floor_div(a, b):
    if jnp.issubdtype(a.dtype, jnp.integer):
        return jnp.floor_divide(a, b)
    return jnp.floor(a / b)


def _trunc_div(a, b):
    if jnp.issubdtype(a.dtype, jnp.integer):
        return lax.div(*jnp.broadcast_arrays(a, b))  # rounds toward zero, as C and torch do
    return jnp.trunc(a / b)


_BINARY = {
    "mul": jnp.multiply, "remainder": jnp.remainder, "fmod": jnp.fmod, "eq": jnp.equal, "ne": jnp.not_equal,
    "lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater, "ge": jnp.greater_equal,
    "bitwise_and": jnp.bitwise_and, "bitwise_or": jnp.bitwise_or, "bitwise_xor": jnp.bitwise_xor,
}
for _name, _fn in _BINARY.items():
    lowers(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_binary(_fn))
lowers("aten.maximum.default")(_binary(jnp.maximum))
lowers("aten.minimum.default")(_binary(jnp.minimum))
lowers("aten.atan2.default")(_binary(jnp.arctan2))
lowers("aten.logical_and.default")(_binary(lambda a, b: jnp.logical_and(truthy(a), truthy(b))))
lowers("aten.logical_or.default")(_binary(lambda a, b: jnp.logical_or(truthy(a), truthy(b))))
lowers("aten.logical_xor.default")(_binary(lambda a, b: jnp.logical_xor(truthy(a), truthy(b))))


@lowers("aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar")
def _add_sub(out, a, b, alpha=1):
    a, b = _promoted(out, a, b)
    if alpha != 1:
        b = b * as_dtype(alpha, b.dtype)
    return b - a if out.name == "aten.rsub.Scalar" else (a - b if ".sub." in out.name else a + b)


@lowers("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div(out, a, b, rounding_mode=None):
    if rounding_mode is None:
        return _true_div(*[as_dtype(x, out.dtype) for x in (a, b)])
    a, b = _promoted(out, a, b)
    return (_floor_div if rounding_mode == "floor" else _trunc_div)(a, b)


@lowers("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(out, a, b):
    if not is_tensor(b) and float(b).is_integer() and abs(b) <= 8 and b >= 0:
        return lax.integer_pow(as_dtype(a, out.dtype), int(b))
    return jnp.power(*_promoted(out, a, b))


def _unary(fn, float_only=False):
    def lower(out, a, **_):
        return as_dtype(fn(as_dtype(a, out.dtype) if float_only else a), out.dtype)
    return lower


_UNARY = {
    "neg": (jnp.negative, False), "abs": (jnp.abs, False), "sign": (jnp.sign, False),
    "floor": (jnp.floor, False), "ceil": (jnp.ceil, False), "trunc": (jnp.trunc, False),
    "round": (lambda x: jnp.round(x), False), "bitwise_not": (jnp.invert, False),
    "logical_not": (lambda x: ~truthy(x), False), "isnan": (jnp.isnan, False), "isinf": (jnp.isinf, False),
    "exp": (jnp.exp, True), "exp2": (jnp.exp2, True), "expm1": (jnp.expm1, True), "log": (jnp.log, True),
    "log2": (jnp.log2, True), "log10": (jnp.log10, True), "log1p": (jnp.log1p, True), "sqrt": (jnp.sqrt, True),
    "rsqrt": (lax.rsqrt, True), "sin": (jnp.sin, True), "cos": (jnp.cos, True), "tan": (jnp.tan, True),
    "tanh": (jnp.tanh, True), "sinh": (jnp.sinh, True), "cosh": (jnp.cosh, True), "asin": (jnp.arcsin, True),
    "acos": (jnp.arccos, True), "atan": (jnp.arctan, True), "erf": (lax.erf, True),
    "sigmoid": (jax.nn.sigmoid, True), "reciprocal": (lambda x: 1 / x, True),
    "relu": (lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)), False),
}
for _name, (_fn, _float_only) in _UNARY.items():
    lowers(f"aten.{_name}.default")(_unary(_fn, _float_only))


@lowers("aten.gelu.default")
def _gelu(out, x, approximate="none"):
    return jax.nn.gelu(x, approximate=approximate == "tanh")


@lowers("aten.silu.default")
def _silu(out, x):
    return x * jax.nn.sigmoid(x)


@lowers("aten.leaky_relu.default")
def _leaky_relu(out, x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * as_dtype(negative_slope, x.dtype))


@lowers("aten.hardtanh.default")
def _hardtanh(out, x, min_val=-1.0, max_val=1.0):
    return jnp.clip(x, as_dtype(min_val, x.dtype), as_dtype(max_val, x.dtype))


@lowers("aten.elu.default")
def _elu(out, x, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = as_dtype(alpha, x.dtype) * jnp.expm1(x * as_dtype(input_scale, x.dtype))
    return as_dtype(scale, x.dtype) * jnp.where(x > 0, x, neg)


@lowers("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(out, x, min=None, max=None):
    x = as_dtype(x, out.dtype)
    if min is not None:
        x = jnp.maximum(x, as_dtype(min, out.dtype))
    if max is not None:
        x = jnp.minimum(x, as_dtype(max, out.dtype))
    return x


@lowers("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(out, cond, a, b):
    return jnp.where(as_dtype(cond, np.bool_), as_dtype(a, out.dtype), as_dtype(b, out.dtype))


@lowers("aten._to_copy.default", "aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
        "aten.detach.default")
def _copy(out, x, **_):
    # dtype/layout/device/memory_format are all the node's out spec says: only the dtype can change
    return as_dtype(x, out.dtype)
