"""`program_to_callable` runs wire programs; `typecheck` rejects bad ones with a WireError that
names the equation and field, and never raises anything else."""
from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.capture import capture
from wire.execute import primitive_table, program_to_callable, typecheck
from wire.format import WireError, encode_array


def _program() -> dict:
    """y = tanh(x @ w + c0) * 0.5, with x f32[2,3], w f32[3,4] (a weight), c0 f32[4]."""
    c0 = np.arange(4, dtype=np.float32)
    return {
        "format": "optu.jaxpr/v1",
        "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"},
                   {"name": "w", "shape": [3, 4], "dtype": "float32", "role": "weight"}],
        "consts": [{"name": "c0", "shape": [4], "dtype": "float32", "data": encode_array(c0)}],
        "eqns": [
            {"op": "dot_general", "in": ["x", "w"],
             "out": [{"name": "d", "shape": [2, 4], "dtype": "float32"}],
             "params": {"dimension_numbers": [[[1], [0]], [[], []]], "precision": None,
                        "preferred_element_type": {"dtype": "float32"}}},
            {"op": "broadcast_in_dim", "in": ["c0"],
             "out": [{"name": "b", "shape": [2, 4], "dtype": "float32"}],
             "params": {"shape": [2, 4], "broadcast_dimensions": [1], "sharding": None}},
            {"op": "add", "in": ["d", "b"], "out": [{"name": "s", "shape": [2, 4], "dtype": "float32"}]},
            {"op": "tanh", "in": ["s"], "out": [{"name": "t", "shape": [2, 4], "dtype": "float32"}],
             "params": {"accuracy": None}},
            {"op": "mul", "in": ["t", {"lit": 0.5, "dtype": "float32"}],
             "out": [{"name": "y", "shape": [2, 4], "dtype": "float32"}]},
        ],
        "outputs": ["y", {"lit": "nan", "dtype": "float32"}],
    }


def test_hand_written_program_runs():
    typecheck(_program())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    y, nan = program_to_callable(_program())(x, w)
    np.testing.assert_allclose(y, np.tanh(x @ w + np.arange(4)) * 0.5, rtol=1e-5)
    assert np.isnan(nan) and nan.dtype == np.float32


def test_primitive_table_has_lax_primitives():
    table = primitive_table()
    assert {"add", "dot_general", "scan", "while", "cond", "scatter-add", "split"} <= set(table)


def _reject(mutate) -> WireError:
    prog = copy.deepcopy(_program())
    mutate(prog)
    with pytest.raises(WireError) as info:
        typecheck(prog)
    info.value.to_dict()  # must be JSON-able for the 422 body
    return info.value


def _where(err: WireError) -> tuple[int | None, str]:
    return err.eqn, err.field


def test_rejects_unknown_format_version():
    assert _where(_reject(lambda p: p.update(format="optu.jaxpr/v9"))) == (None, "format")


def test_rejects_duplicate_names():
    def dup(p):
        p["eqns"][2]["out"][0]["name"] = "d"
    assert _where(_reject(dup)) == (2, "out[0]")


def test_rejects_undefined_variable_and_says_cycles_are_impossible():
    def undefined(p):
        p["eqns"][2]["in"][1] = "t"  # defined only by a later equation
    err = _reject(undefined)
    assert _where(err) == (2, "in[1]") and "cycle" in err.message


def test_rejects_unknown_primitive():
    def unknown(p):
        p["eqns"][3]["op"] = "frobnicate"
    assert _where(_reject(unknown)) == (3, "op")


def test_rejects_declared_shape_mismatch():
    def wrong_shape(p):
        p["eqns"][0]["out"][0]["shape"] = [4, 2]
    assert _where(_reject(wrong_shape)) == (0, "out[0]")


def test_rejects_declared_dtype_mismatch():
    def wrong_dtype(p):
        p["eqns"][3]["out"][0]["dtype"] = "float16"
    assert _where(_reject(wrong_dtype)) == (3, "out[0]")


def test_a_repeated_equation_is_checked_each_time_it_appears():
    program = capture(lambda x: jnp.tanh(jnp.tanh(jnp.tanh(x))), np.ones((2, 3), np.float32))
    typecheck(program)  # three equal equations, one abstract evaluation
    program["eqns"][2]["out"][0]["shape"] = [3, 2]
    with pytest.raises(WireError) as info:
        typecheck(program)
    assert _where(info.value) == (2, "out[0]")


def test_rejects_unknown_dtype_string():
    def bad_dtype(p):
        p["inputs"][0]["dtype"] = "float33"
    assert _where(_reject(bad_dtype)) == (None, "inputs[0].dtype")
    def bad_literal(p):
        p["eqns"][4]["in"][1]["dtype"] = "flaot32"
    assert _where(_reject(bad_literal)) == (4, "in[1]")


def test_rejects_undefined_output():
    assert _where(_reject(lambda p: p["outputs"].append("nope"))) == (None, "outputs[2]")


def test_rejects_const_data_of_wrong_length():
    def short(p):
        p["consts"][0]["data"] = encode_array(np.zeros(3, np.float32))
    assert _where(_reject(short)) == (None, "consts[0].data")


def test_rejects_operands_the_primitive_cannot_take():
    def bad_params(p):
        p["eqns"][1]["params"]["broadcast_dimensions"] = [5]
    assert _where(_reject(bad_params))[0] == 1


def test_rejects_schema_violations_as_wire_errors():
    assert _where(_reject(lambda p: p["eqns"][2].pop("out"))) == (2, "out")


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False, width=32)
    | st.sampled_from(["x", "w", "c0", "d", "float32", "int8", "add", "nan"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["op", "in", "out", "params", "name", "shape", "dtype", "lit", "enum",
                         "value", "struct", "fields", "program", "axes", "y"]), inner, max_size=4),
    max_leaves=20)
_ops = st.sampled_from(["add", "mul", "tanh", "dot_general", "reduce_sum", "integer_pow",
                        "scan", "broadcast_in_dim", "transpose", "nope"])
_eqn = st.fixed_dictionaries({
    "op": _ops | _json,
    "in": st.lists(st.sampled_from(["x", "w", "c0", "d", "zz"])
                   | st.fixed_dictionaries({"lit": _json, "dtype": _json}), max_size=3) | _json,
    "out": st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["d", "e", "f", "x"]),
        "shape": st.lists(st.integers(-1, 4), max_size=3),
        "dtype": st.sampled_from(["float32", "int32", "bool", "junk"])}), max_size=2) | _json,
    "params": st.dictionaries(st.sampled_from(["axes", "y", "shape", "permutation",
                                               "dimension_numbers", "jaxpr"]), _json, max_size=3),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eqns=st.lists(_eqn, max_size=4), keep=st.integers(0, 5))
def test_garbage_equations_only_raise_wire_errors(eqns, keep):
    prog = _program()
    prog["eqns"] = prog["eqns"][:keep] + eqns
    try:
        typecheck(prog)
    except WireError as err:
        assert isinstance(err.to_dict()["message"], str)


@pytest.mark.parametrize("bad", [True, 0, "HIGHEST", [1, 2]])
def test_ill_typed_precision_is_rejected_before_it_reaches_xla(bad):
    # precision=true once passed type-checking and then aborted the process inside XLA.
    from wire.capture import capture

    program = capture(lambda a, b: a @ b, np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    broken = copy.deepcopy(program)
    broken["eqns"][0]["params"]["precision"] = bad
    with pytest.raises(WireError) as err:
        typecheck(broken)
    assert (err.value.eqn, err.value.field) == (0, "params.precision")
