"""The wire schema and the param codec: models, literals, arrays, and param round trips."""
from __future__ import annotations

import json
import math

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from pydantic import ValidationError

from wire.capture import capture, jaxpr_to_wire
from wire.execute import closed_jaxpr
from wire.format import (ConstSpec, WireEqn, WireError, WireLiteral, WireProgram, decode_array, encode_array,
                         encode_literal, is_nested_program, literal_value, nested_program_slots)
from wire.params import decode_params, encode_params


def test_eqn_in_field_uses_json_alias_and_accepts_python_name():
    by_alias = WireEqn.model_validate({"op": "add", "in": ["a", {"lit": 1, "dtype": "int32"}],
                                       "out": [{"name": "b", "shape": [], "dtype": "int32"}]})
    by_name = WireEqn(op="add", in_=["a"], out=[])
    assert by_alias.in_[1] == WireLiteral(lit=1, dtype="int32") and by_name.in_ == ["a"]
    assert "in" in by_alias.model_dump(by_alias=True) and by_alias.params == {}


def test_program_requires_the_v1_format():
    base = {"inputs": [], "eqns": [], "outputs": []}
    assert WireProgram.model_validate(base | {"format": "optu.jaxpr/v1"}).consts == []
    with pytest.raises(ValidationError):
        WireProgram.model_validate(base | {"format": "optu.jaxpr/v2"})
    with pytest.raises(ValidationError):
        WireProgram.model_validate(base | {"format": "optu.jaxpr/v1",
                                           "inputs": [{"name": "a", "shape": [1], "dtype": "f",
                                                       "role": "bias"}]})


@pytest.mark.parametrize("value,dtype", [
    (0.1, "float32"), (-0.0, "float32"), (math.nan, "float32"), (math.inf, "float64"),
    (-math.inf, "bfloat16"), (1e-40, "float32"), (3, "int8"), (2**63 - 1, "int64"),
    (2**32 - 1, "uint32"), (True, "bool"), (1 + 2j, "complex64"), (0.333, "float16")])
def test_literals_round_trip_exactly_through_json(value, dtype):
    np_dtype = jnp.dtype(dtype)
    lit = encode_literal(value, np_dtype)
    back = literal_value(WireLiteral.model_validate(json.loads(json.dumps(lit.model_dump(),
                                                                          allow_nan=False))))
    want = np.asarray(value, dtype=np_dtype)[()]
    assert back.dtype == np_dtype
    np.testing.assert_array_equal(back, want)


def test_literal_that_does_not_fit_its_dtype_is_a_wire_error():
    with pytest.raises(WireError):
        literal_value(WireLiteral(lit=300, dtype="int8"))
    with pytest.raises(WireError):
        literal_value(WireLiteral(lit="zero", dtype="float32"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint16", "bool", "float64"])
def test_arrays_round_trip_through_base64(dtype):
    arr = (np.random.default_rng(0).standard_normal((3, 5)) * 10).astype(jnp.dtype(dtype))
    spec = ConstSpec(name="c", shape=[3, 5], dtype=dtype, data=encode_array(arr))
    np.testing.assert_array_equal(decode_array(spec), arr)
    assert decode_array(spec).dtype == arr.dtype


def test_array_bytes_are_little_endian_c_order():
    arr = np.array([[1, 2], [3, 4]], dtype=">i4").T
    spec = ConstSpec(name="c", shape=[2, 2], dtype="int32", data=encode_array(arr))
    assert spec.data == encode_array(np.array([[1, 3], [2, 4]], "<i4"))
    np.testing.assert_array_equal(decode_array(spec), arr)


def test_wire_error_serialises_for_http():
    err = WireError("boom", eqn=3, field="in[1]")
    assert err.to_dict() == {"eqn": 3, "field": "in[1]", "message": "boom"}
    assert isinstance(err, ValueError) and "eqn 3" in str(err)


def _params_of(fn, *args, op):
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    return next(e.params for e in jaxpr.eqns if e.primitive.name == op)


def _round_trip(op, params):
    encoded = json.loads(json.dumps(encode_params(op, params, jaxpr_to_wire), allow_nan=False))
    return encoded, decode_params(op, encoded, closed_jaxpr)


def test_dot_general_params_round_trip():
    x = np.ones((2, 3), np.float32)
    params = _params_of(lambda a: lax.dot(a, a.T, precision=lax.Precision.HIGHEST,
                                          preferred_element_type=jnp.float32), x, op="dot_general")
    encoded, decoded = _round_trip("dot_general", params)
    assert encoded["dimension_numbers"] == [[[1], [0]], [[], []]]
    assert encoded["precision"] == [{"enum": "Precision", "value": "HIGHEST"}] * 2
    assert encoded["preferred_element_type"] == {"dtype": "float32"}
    assert decoded == params
    hash(tuple(decoded.items()))


def test_conv_and_gather_structs_round_trip():
    img, ker = np.ones((1, 8, 8, 3), np.float32), np.ones((3, 3, 3, 4), np.float32)
    conv = _params_of(lambda a, k: lax.conv_general_dilated(
        a, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), img, ker,
        op="conv_general_dilated")
    encoded, decoded = _round_trip("conv_general_dilated", conv)
    assert encoded["dimension_numbers"] == {"struct": "ConvDimensionNumbers", "fields": {
        "lhs_spec": [0, 3, 1, 2], "rhs_spec": [3, 2, 0, 1], "out_spec": [0, 3, 1, 2]}}
    assert decoded == conv
    gather = _params_of(lambda a: a[np.array([1, 0])], img, op="gather")
    assert _round_trip("gather", gather)[1] == gather


def test_nested_jaxprs_become_nested_programs():
    x = np.ones((4, 3), np.float32)
    scan = _params_of(lambda a: lax.scan(lambda c, r: (c + r, c * r), a[0], a), x, op="scan")
    encoded, decoded = _round_trip("scan", scan)
    assert encoded["jaxpr"]["program"]["format"] == "optu.jaxpr/v1"
    assert [e["op"] for e in encoded["jaxpr"]["program"]["eqns"]] == ["add", "mul"]
    assert isinstance(decoded["jaxpr"], jex.ClosedJaxpr)
    assert decoded["jaxpr"].in_avals == scan["jaxpr"].in_avals
    scatter = _params_of(lambda a: a.at[np.array([0])].add(1.0), x, op="scatter-add")
    encoded, decoded = _round_trip("scatter-add", scatter)
    assert encoded["update_jaxpr"]["open"] is True
    assert isinstance(decoded["update_jaxpr"], jex.Jaxpr)


def test_unencodable_param_names_primitive_and_param():
    with pytest.raises(WireError) as info:
        encode_params("my_prim", {"callback": print}, jaxpr_to_wire)
    assert info.value.field == "params.callback" and "my_prim" in info.value.message


@pytest.mark.parametrize("value", [
    {"enum": "Path", "value": "cwd"}, {"enum": "Precision", "value": "FASTEST"},
    {"struct": "os.system", "fields": {}}, {"struct": "ConvDimensionNumbers", "fields": {"x": 1}},
    {"weird": 1}, {"dtype": "object"}, {"program": {"format": "optu.jaxpr/v1"}}])
def test_decoding_only_builds_allow_listed_values(value):
    with pytest.raises(WireError) as info:
        decode_params("add", {"p": value}, closed_jaxpr)
    assert info.value.field == "params.p"


def test_nested_program_slots_find_every_body_where_it_lives_and_not_inside_it():
    inner = capture(lambda p, a: lax.cond(p, lambda a: a * 2, lambda a: a + 1, a), jnp.bool_(True), jnp.ones(3))
    outer = capture(lambda p, a: lax.cond(p, lambda a: lax.cond(p, lambda b: b * 2, lambda b: b, a), lambda a: a, a),
                    jnp.bool_(True), jnp.ones(3))
    (cond,) = [e for e in inner["eqns"] if e["op"] == "cond"]
    slots = list(nested_program_slots(cond["params"]))
    assert [path for path, *_ in slots] == ["branches[0]", "branches[1]"]
    assert all(holder[key] is nested and nested["program"]["eqns"] for _, holder, key, nested in slots)
    (cond,) = [e for e in outer["eqns"] if e["op"] == "cond"]
    assert len(list(nested_program_slots(cond["params"]))) == 2  # the inner cond's branches stay inside theirs
    assert not is_nested_program({"program": {}, "other": 1}) and not is_nested_program({"program": "text"})
