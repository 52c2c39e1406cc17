"""Elementwise ATen ops captured into wire programs compute what PyTorch eager does, on shapes,
broadcasts, dtypes and scalar operands hypothesis draws."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from aten_harness import assert_matches_torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

aten = torch.ops.aten
FAST = settings(max_examples=40, deadline=None)

# name -> the input domain it is defined on ("real", "positive", "unit", "int", "bool")
UNARY = {
    "neg": "real", "abs": "real", "sign": "real", "floor": "real", "ceil": "real", "trunc": "real", "round": "real",
    "exp": "real", "exp2": "real", "expm1": "real", "log": "positive", "log2": "positive", "log10": "positive",
    "log1p": "positive", "sqrt": "positive", "rsqrt": "positive", "sin": "real", "cos": "real", "tan": "unit",
    "tanh": "real", "sinh": "real", "cosh": "real", "asin": "unit", "acos": "unit", "atan": "real", "erf": "real",
    "sigmoid": "real", "reciprocal": "positive", "relu": "real", "silu": "real", "isnan": "real", "isinf": "real",
    "bitwise_not": "int", "logical_not": "real",
}
BINARY = ["add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum.default", "minimum.default", "atan2.default",
          "eq.Tensor", "ne.Tensor", "lt.Tensor", "le.Tensor", "gt.Tensor", "ge.Tensor", "logical_and.default",
          "logical_or.default", "logical_xor.default", "remainder.Tensor", "fmod.Tensor", "pow.Tensor_Tensor"]
INT_BINARY = ["bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "div.Tensor_mode"]
SCALAR = ["add.Scalar", "sub.Scalar", "rsub.Scalar", "mul.Scalar", "div.Scalar", "div.Scalar_mode", "eq.Scalar",
          "ne.Scalar", "lt.Scalar", "le.Scalar", "gt.Scalar", "ge.Scalar", "remainder.Scalar", "fmod.Scalar",
          "pow.Tensor_Scalar", "bitwise_and.Scalar", "bitwise_or.Scalar", "bitwise_xor.Scalar"]


def _overload(name: str):
    packet, overload = name.split(".")
    return getattr(getattr(aten, packet), overload)


def _tensor(rng: np.random.Generator, shape, domain: str) -> torch.Tensor:
    if domain == "int":
        return torch.from_numpy(np.asarray(rng.integers(-20, 20, shape)))
    if domain == "bool":
        return torch.from_numpy(np.asarray(rng.random(shape) > 0.5))
    values = rng.standard_normal(shape) * 2
    if domain == "positive":
        values = np.abs(values) + 0.25
    elif domain == "unit":
        values = np.tanh(values) * 0.9
    return torch.from_numpy(np.asarray(values, np.float32))


@FAST
@given(name=st.sampled_from(sorted(UNARY)), shape=array_shapes(min_dims=0, max_dims=3, max_side=4),
       seed=st.integers(0, 2**16))
def test_unary_ops_match_torch(name, shape, seed):
    x = _tensor(np.random.default_rng(seed), shape, UNARY[name])
    assert_matches_torch(_overload(f"{name}.default"), x, rtol=2e-6, atol=1e-6)


@FAST
@given(name=st.sampled_from(BINARY + INT_BINARY), shapes=mutually_broadcastable_shapes(num_shapes=2, max_side=4),
       dtypes=st.sampled_from([("real", "real"), ("real", "int"), ("int", "int"), ("bool", "real")]),
       seed=st.integers(0, 2**16))
def test_binary_ops_broadcast_and_promote_like_torch(name, shapes, dtypes, seed):
    rng = np.random.default_rng(seed)
    if name in INT_BINARY:
        dtypes = ("int", "int")
    elif name in ("sub.Tensor", "pow.Tensor_Tensor") and "bool" in dtypes:
        dtypes = ("int", "real")  # torch refuses bool operands here
    a, b = (_tensor(rng, s, d) for s, d in zip(shapes.input_shapes, dtypes))
    kwargs = {}
    if name in ("remainder.Tensor", "fmod.Tensor", "div.Tensor_mode"):
        b = torch.where(b == 0, torch.ones_like(b), b)  # torch raises on an integer division by zero
    if name == "div.Tensor_mode":
        kwargs["rounding_mode"] = ["floor", "trunc"][seed % 2]
    if name == "pow.Tensor_Tensor":
        a = a.abs() + 1 if a.dtype.is_floating_point else a.abs()
        b = b.abs() % 3
    assert_matches_torch(_overload(name), a, b, rtol=1e-5, atol=1e-5, **kwargs)


@FAST
@given(name=st.sampled_from(SCALAR), shape=array_shapes(min_dims=0, max_dims=3, max_side=4),
       integer=st.booleans(), scalar=st.sampled_from([2, -3, 0.5, 2.0, 3]), seed=st.integers(0, 2**16))
def test_tensor_scalar_ops_promote_like_torch(name, shape, integer, scalar, seed):
    integer = integer or name.startswith("bitwise")
    if name.startswith("bitwise") or "mode" in name or (integer and name.split(".")[0] in ("remainder", "fmod")):
        scalar = int(scalar) or 1
    x = _tensor(np.random.default_rng(seed), shape, "int" if integer else "real")
    kwargs = {"rounding_mode": "floor"} if name == "div.Scalar_mode" else {}
    if name == "pow.Tensor_Scalar":
        x = x.abs() + (0 if integer else 0.5)
        scalar = abs(scalar)
    assert_matches_torch(_overload(name), x, scalar, rtol=1e-5, atol=1e-6, **kwargs)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch_in_both_forms(approximate):
    assert_matches_torch(aten.gelu.default, torch.linspace(-5, 5, 41), approximate=approximate, rtol=1e-5)


@pytest.mark.parametrize("op, args", [
    (aten.leaky_relu.default, (0.2,)), (aten.hardtanh.default, (-0.5, 2.0)), (aten.elu.default, (0.7, 1.2, 0.5))])
def test_parametrised_activations_match_torch(op, args):
    assert_matches_torch(op, torch.linspace(-4, 4, 33).reshape(3, 11), *args)


def test_float64_and_int64_stay_as_declared():
    program = assert_matches_torch(aten.add.Tensor, torch.randn(3, dtype=torch.float64), torch.arange(3))
    assert {s["dtype"] for s in program["inputs"]} == {"float64", "int64"}
    assert program["eqns"][-1]["out"][0]["dtype"] == "float64"
