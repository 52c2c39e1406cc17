"""The typed JSON form of a program names the keys the wire format's pydantic models validate,
required where they are required, so the types below the boundary say what a program holds."""
from __future__ import annotations

import pytest

from tests.typed_json import model_keys
from wire import json_types
from wire.format import ConstSpec, InputSpec, TensorSpec, WireEqn, WireLiteral, WireProgram

PAIRS = [(json_types.Tensor, TensorSpec), (json_types.Input, InputSpec), (json_types.Const, ConstSpec),
         (json_types.Lit, WireLiteral), (json_types.Eqn, WireEqn), (json_types.Program, WireProgram)]


@pytest.mark.parametrize("typed, model", PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_each_typed_form_has_the_models_keys_required_alike(typed, model):
    assert (set(typed.__annotations__), set(typed.__required_keys__)) == model_keys(model)


def test_a_validated_program_dumps_to_the_keys_its_type_declares():
    program = WireProgram.model_validate({
        "format": "optu.jaxpr/v1", "inputs": [{"name": "a", "shape": [2], "dtype": "float32"}],
        "eqns": [{"op": "mul", "in": ["a", {"lit": 2.0, "dtype": "float32"}],
                  "out": [{"name": "b", "shape": [2], "dtype": "float32"}]}],
        "outputs": ["b"]}).model_dump(by_alias=True)
    assert set(program) <= set(json_types.Program.__annotations__)
    eqn = program["eqns"][0]
    assert set(eqn) <= set(json_types.Eqn.__annotations__) and set(eqn["in"][1]) == set(json_types.Lit.__annotations__)
