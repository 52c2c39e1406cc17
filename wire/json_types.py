"""The wire program as every stage below the boundary holds it: the JSON a validated
`wire.format.WireProgram` dumps to, typed key by key. Programs stay JSON values (their canonical
hash, their nested bodies inside params and their trip over HTTP need nothing else); these types
say what each holds, and tests/wire/test_json_types.py keeps them and the pydantic models alike."""
# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from typing import Any, Literal, NotRequired, TypedDict, Union


class Tensor(TypedDict):
    """A value's name and type: an equation's output, or the start of an input or a const."""

    name: str
    shape: list[int]
    dtype: str


class Input(Tensor):
    role: NotRequired[Literal["activation", "weight"]]  # absent: an activation


class Const(Tensor):
    data: str  # base64 of the C-order, little-endian bytes


class Lit(TypedDict):
    """A scalar operand, `lit` read in `dtype` (non-finite floats as "nan", "inf", "-inf")."""

    lit: Union[bool, int, float, str]
    dtype: str


Operand = Union[str, Lit]  # a variable's name, or a literal

# "in" is a Python keyword, hence the functional form; params are per primitive (wire/params.py).
Eqn = TypedDict("Eqn", {"op": str, "in": list[Operand], "out": list[Tensor], "params": NotRequired[dict[str, Any]]})


class Program(TypedDict):
    format: str
    inputs: list[Input]
    consts: NotRequired[list[Const]]
    eqns: list[Eqn]
    outputs: list[Operand]
