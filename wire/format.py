"""Pydantic models of the `optu.jaxpr/v1` wire format.

A program is a flat list of equations over named tensors; nested programs live in params."""
from __future__ import annotations

import base64
import functools
import math
from typing import Annotated, Any, Iterator, Literal, Union

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

FORMAT = "optu.jaxpr/v1"

# JSON has no NaN/Infinity, so non-finite float literals travel as these strings.
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class WireError(ValueError):
    """A program that does not type-check; `eqn`/`field` locate it for an HTTP 422 answer."""

    def __init__(self, message: str, *, eqn: int | None = None, field: str = ""):
        super().__init__(message)
        self.message = message
        self.eqn = eqn
        self.field = field

    def __str__(self) -> str:
        where = f"eqn {self.eqn}" if self.eqn is not None else "program"
        return f"{where}, {self.field or '-'}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"eqn": self.eqn, "field": self.field, "message": self.message}


def _finite_only(value: Any, where: str) -> Any:
    """JSON has no NaN/Infinity; Python's parser accepts them anyway. The wire format spells
    non-finite floats as strings, so a bare token is refused rather than silently re-spelled."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: bare {value!r} is not JSON; write non-finite floats as "
                         f'"nan"/"inf"/"-inf" (literals) or {{"float": "nan"}} (params)')
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_only(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite_only(v, f"{where}[{i}]")
    return value


def _whole_number(value: Any) -> Any:
    # JSON Schema's integer is any number with no fraction: 3.0 is 3. Anything else goes on to the
    # strict check, which refuses true and "3".
    return int(value) if isinstance(value, float) and value.is_integer() else value


def json_int(**bounds: int) -> Any:
    """An integer as JSON Schema reads one, within `bounds` (Field's ge, gt, ...): 3 or 3.0, never
    true or "3" (in models that are strict). The bounds come first so the schema states them."""
    return Annotated[int, Field(**bounds), BeforeValidator(_whole_number)]


JsonInt = json_int()


class _Wire(BaseModel):
    # Nothing a client sends is dropped or re-typed: an unknown key, `true` for a dimension or a
    # string for a number is an error, as the OpenAPI schema says.
    model_config = ConfigDict(extra="forbid", strict=True)


class WireLiteral(_Wire):
    """A scalar constant operand; `lit` is interpreted in `dtype` (weak types are not kept)."""

    lit: Union[bool, int, float, str]
    dtype: str = Field(json_schema_extra=lambda schema: schema.update(enum=dtype_names()))

    @field_validator("lit")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        return _finite_only(v, "lit")


class TensorSpec(_Wire):
    name: str
    shape: list[json_int(ge=0)]
    dtype: str = Field(json_schema_extra=lambda schema: schema.update(enum=dtype_names()))


class InputSpec(TensorSpec):
    # "weight" inputs are constant across calls; the optimizer may precompute from them.
    role: Literal["activation", "weight"] = "activation"


class ConstSpec(TensorSpec):
    data: str = Field(description="base64 of the C-order, little-endian bytes")


class WireEqn(_Wire):
    model_config = ConfigDict(populate_by_name=True)

    op: str
    in_: list[Union[str, WireLiteral]] = Field(alias="in")
    out: list[TensorSpec]
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _finite(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _finite_only(v, "params")


class WireProgram(_Wire):
    format: Literal["optu.jaxpr/v1"]
    inputs: list[InputSpec]
    consts: list[ConstSpec] = Field(default_factory=list)
    eqns: list[WireEqn]
    outputs: list[Union[str, WireLiteral]]


@functools.cache
def _dtypes() -> dict[str, np.dtype]:
    """Array dtypes JAX can hold, by name (ml_dtypes such as bfloat16 and float8_* included)."""
    import jax.numpy as jnp

    out = {"bool": np.dtype(bool)}
    for attr in dir(jnp):
        if attr.startswith(("float", "int", "uint", "bfloat", "complex")) and attr[-1].isdigit() \
                or attr.startswith(("float8_", "float4_")):
            try:
                dt = np.dtype(getattr(jnp, attr))
            except TypeError:
                continue
            out[dt.name] = dt
    return out


def dtype_names() -> list[str]:
    """Every dtype name a program may use (the schema's enum)."""
    return sorted(_dtypes())


def parse_dtype(name: str, *, eqn: int | None = None, field: str = "dtype") -> np.dtype:
    """The numpy dtype named `name`; anything else (object, str, typos) is a WireError."""
    dt = _dtypes().get(name) if isinstance(name, str) else None
    if dt is None:
        raise WireError(f"unknown dtype {name!r}", eqn=eqn, field=field)
    return dt


def encode_array(arr: np.ndarray) -> str:
    arr = np.asarray(arr)
    return base64.b64encode(np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"))).tobytes()).decode()


def decode_array(spec: ConstSpec) -> np.ndarray:
    dt = parse_dtype(spec.dtype, field=f"consts[{spec.name}].dtype").newbyteorder("<")
    try:
        raw = base64.b64decode(spec.data, validate=True)
    except ValueError:
        raise WireError(f"const {spec.name!r} data is not base64", field=f"consts[{spec.name}].data") from None
    count = math.prod(spec.shape)
    if len(raw) != count * dt.itemsize:
        raise WireError(
            f"const {spec.name!r} has {len(raw)} bytes, shape {spec.shape} of {spec.dtype} needs "
            f"{count * dt.itemsize}", field=f"consts[{spec.name}].data")
    return np.frombuffer(raw, dtype=dt).reshape(spec.shape).astype(dt.newbyteorder("="))


def encode_literal(value: Any, dtype: np.dtype) -> WireLiteral:
    """A scalar as a WireLiteral; exact for every float width since Python floats are f64."""
    dtype = np.dtype(dtype)
    v = np.asarray(value, dtype=dtype).item()
    if isinstance(v, complex):
        v = repr(v)
    elif isinstance(v, float) and not math.isfinite(v):
        v = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return WireLiteral(lit=v, dtype=dtype.name)


def literal_value(lit: WireLiteral) -> np.generic:
    dt = parse_dtype(lit.dtype, field="lit.dtype")
    v = lit.lit
    if isinstance(v, str):
        v = _NONFINITE.get(v, v)
        if isinstance(v, str):
            try:
                v = complex(v) if dt.kind == "c" else float(v)
            except ValueError:
                raise WireError(f"literal {lit.lit!r} is not a {dt.name}", field="lit") from None
    try:
        with np.errstate(over="raise", invalid="ignore"):
            out = np.array(v, dtype=dt)
    except (OverflowError, ValueError, TypeError, FloatingPointError):
        raise WireError(f"literal {v!r} does not fit {dt.name}", field="lit") from None
    return out[()]


def is_nested_program(value: Any) -> bool:
    """Whether a param value is a nested program as the format writes one (a loop body, a branch,
    scatter's update): `{"program": {...}}`, with `"open": true` for one that takes no consts."""
    return isinstance(value, dict) and set(value) in ({"program"}, {"program", "open"}) \
        and isinstance(value["program"], dict)


def nested_program_slots(value: Any, path: str = "") -> Iterator[tuple[str, Any, Any, dict]]:
    """(path, container, key, nested program object) for every nested program in a params value,
    depth first, not looking inside the programs found; `container[key]` is where each lives, so
    it can be replaced."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, v in items:
        sub = f"{path}[{key}]" if isinstance(value, list) else (f"{path}.{key}" if path else str(key))
        if is_nested_program(v):
            yield sub, value, key, v
        elif isinstance(v, (dict, list)):
            yield from nested_program_slots(v, sub)
