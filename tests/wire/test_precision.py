"""A program's declared precision: 64-bit types are type-checked and run as 64-bit, in JAX's x64
mode scoped to the work, and a 32-bit program is untouched."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from wire_examples import MATMUL_SCALE

from wire.execute import jitted_program, typecheck
from wire.format import WireError
from wire.precision import declares_64_bit


def _third(dtype: str) -> dict:
    """a / 3, in `dtype`."""
    return {"format": "optu.jaxpr/v1", "inputs": [{"name": "a", "shape": [2], "dtype": dtype}],
            "eqns": [{"op": "div", "in": ["a", {"lit": 3, "dtype": dtype}],
                      "out": [{"name": "b", "shape": [2], "dtype": dtype}], "params": {}}],
            "outputs": ["b"]}


def test_a_64_bit_dtype_is_found_anywhere_in_a_program_and_a_32_bit_program_declares_none():
    assert not declares_64_bit(MATMUL_SCALE)
    assert declares_64_bit(_third("float64"))
    nested = {"eqns": [{"op": "scan", "params": {"jaxpr": {"eqns": [{"out": [{"dtype": "int64"}]}]}}}]}
    assert declares_64_bit(nested)
    assert declares_64_bit({"eqns": [{"params": {"new_dtype": "complex128"}}]})


def test_a_float64_program_type_checks_and_runs_in_float64_without_turning_x64_on():
    program = _third("float64")
    typecheck(program)
    (out,) = jitted_program(program)(np.array([1.0, 2.0]))
    assert out.dtype == np.float64
    assert np.asarray(out).tolist() == [1.0 / 3.0, 2.0 / 3.0]  # float32 would round these differently
    assert not jax.config.jax_enable_x64


def test_a_declaration_that_disagrees_with_the_64_bit_result_is_still_refused():
    program = _third("float64")
    program["eqns"][0]["out"][0]["dtype"] = "float32"
    with pytest.raises(WireError, match="declared float32.*produces float64"):
        typecheck(program)


def test_int64_indices_stay_int64():
    program = {"format": "optu.jaxpr/v1", "inputs": [{"name": "i", "shape": [3], "dtype": "int64"}],
               "eqns": [{"op": "mul", "in": ["i", {"lit": 2**40, "dtype": "int64"}],
                         "out": [{"name": "j", "shape": [3], "dtype": "int64"}], "params": {}}],
               "outputs": ["j"]}
    typecheck(program)
    (out,) = jitted_program(program)(np.array([1, 2, 3], np.int64))
    assert out.dtype == np.int64 and np.asarray(out).tolist() == [2**40, 2**41, 3 * 2**40]
