"""JSON codec for primitive params: tuples, dtypes, enums, dimension-number structs and nested
jaxprs, both directions. Decoding only ever builds classes from an explicit allow-list."""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Callable

import jax
import jax.extend.core as jex
import numpy as np
from jax import lax

from wire.format import WireError, parse_dtype
from wire.primitives import PRIMITIVES

# Enum and struct classes a client may name; never resolve a client-sent name any other way.
ENUMS: dict[str, type[enum.Enum]] = {
    c.__name__: c for c in (lax.Precision, lax.GatherScatterMode, lax.RoundingMethod,
                            lax.DotAlgorithmPreset, lax.FftType, lax.RandomAlgorithm,
                            lax.AccuracyMode)}
STRUCTS: dict[str, type] = {
    c.__name__: c for c in (lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers,
                            lax.ConvDimensionNumbers, lax.DotAlgorithm)}

# Params JAX requires but that are almost always None (placement, accuracy hints), filled in when a
# hand-written program omits them so writers need not track JAX's param churn.
NONE_DEFAULTS: dict[str, tuple[str, ...]] = {p.name: p.none_params for p in PRIMITIVES.values() if p.none_params}


def strip_none_defaults(prim_name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Params without the None values decoding fills in: the canonical form, so an equation a
    rule builds with no params and the same equation captured from JAX are one e-node."""
    optional = NONE_DEFAULTS.get(prim_name, ())
    return {k: v for k, v in params.items() if not (v is None and k in optional)}


def _is_precision(v: Any) -> bool:
    one = lambda x: x is None or isinstance(x, (lax.Precision, lax.DotAlgorithm, lax.DotAlgorithmPreset))
    return one(v) or (isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, lax.Precision) for x in v))


def _is_dtype_or_none(v: Any) -> bool:
    return v is None or isinstance(v, np.dtype)


# Params that JAX forwards to XLA without checking their type: a wrong type there aborts the
# whole process (e.g. precision=true -> "LLVM ERROR: Invalid value"), so the wire checks them.
_PARAM_CHECKS: dict[str, tuple[Any, str]] = {
    "precision": (_is_precision, "null, a Precision enum, or a pair of them"),
    "preferred_element_type": (_is_dtype_or_none, 'null or {"dtype": ...}'),
    "out_dtype": (_is_dtype_or_none, 'null or {"dtype": ...}'),
    "new_dtype": (lambda v: isinstance(v, np.dtype), '{"dtype": ...}'),
}


_DTYPE_PARAMS = frozenset(["preferred_element_type", "out_dtype", "new_dtype"])


def _checked(prim: str, key: str, value: Any) -> Any:
    if key in _DTYPE_PARAMS and isinstance(value, str):  # the short form: "float32"
        value = parse_dtype(value, field=f"params.{key}")
    check = _PARAM_CHECKS.get(key)
    if check is not None and not check[0](value):
        raise WireError(f"primitive {prim!r}: param {key!r} must be {check[1]}, got {value!r:.80}",
                        field=f"params.{key}")
    return value


# Nested programs (loop bodies, branches) are whole wire programs: the codec is handed the
# functions that convert them (wire.capture's and wire.execute's), which themselves use this codec.
EncodeProgram = Callable[[jex.ClosedJaxpr], dict[str, Any]]
DecodeProgram = Callable[[dict[str, Any]], jex.ClosedJaxpr]


def encode_params(prim_name: str, params: dict[str, Any], encode_program: EncodeProgram) -> dict[str, Any]:
    """JSON-safe form of one equation's params; raises WireError for values with no encoding."""
    return {k: _encode(v, prim_name, k, encode_program) for k, v in params.items()}


def decode_params(prim_name: str, params: dict[str, Any], decode_program: DecodeProgram) -> dict[str, Any]:
    """Inverse of encode_params; lists come back as tuples because JAX params must hash."""
    if not isinstance(params, dict):
        raise WireError(f"params of {prim_name} must be an object", field="params")
    defaults = dict.fromkeys(NONE_DEFAULTS.get(prim_name, ()))
    return defaults | {k: _checked(prim_name, k, _decode(v, prim_name, k, decode_program)) for k, v in params.items()}


def _encode(v: Any, prim: str, key: str, encode_program: EncodeProgram) -> Any:
    if isinstance(v, jax.sharding.NamedSharding) and not v.mesh.axis_names:
        # A mesh with no axes shards nothing: the same as no sharding, which is what null says.
        return None
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):
        # Enums first: IntEnum members would otherwise pass as plain ints.
        if type(v).__name__ not in ENUMS:
            raise _unencodable(prim, key, v)
        return {"enum": type(v).__name__, "value": v.name}
    if isinstance(v, (int, np.integer, np.bool_)):
        return v.item() if isinstance(v, np.generic) else v
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else {"float": repr(f)}
    # a dtype, a numpy scalar type, or a JAX one (jnp.float32, which carries its dtype)
    if isinstance(v, np.dtype) or (isinstance(v, type) and (issubclass(v, np.generic)
                                                            or isinstance(getattr(v, "dtype", None), np.dtype))):
        return {"dtype": np.dtype(v).name}
    if isinstance(v, (jex.ClosedJaxpr, jex.Jaxpr)):
        closed = v if isinstance(v, jex.ClosedJaxpr) else jex.ClosedJaxpr(v, ())
        out = {"program": encode_program(closed)}
        return out | {"open": True} if isinstance(v, jex.Jaxpr) else out
    if type(v).__name__ in STRUCTS and type(v) is STRUCTS[type(v).__name__]:
        fields = (v._asdict() if hasattr(v, "_asdict")
                  else {f.name: getattr(v, f.name) for f in dataclasses.fields(v)})
        return {"struct": type(v).__name__,
                "fields": {f: _encode(x, prim, f"{key}.{f}", encode_program) for f, x in fields.items()}}
    if isinstance(v, (tuple, list)) and not hasattr(v, "_fields"):
        return [_encode(x, prim, f"{key}[{i}]", encode_program) for i, x in enumerate(v)]
    raise _unencodable(prim, key, v)


def _unencodable(prim: str, key: str, v: Any) -> WireError:
    return WireError(f"primitive {prim!r}: param {key!r} has a value of type "
                     f"{type(v).__name__} that the wire format cannot encode: {v!r:.80}",
                     field=f"params.{key}")


def _decode(v: Any, prim: str, key: str, decode_program: DecodeProgram) -> Any:
    if isinstance(v, list):
        return tuple(_decode(x, prim, f"{key}[{i}]", decode_program) for i, x in enumerate(v))
    if not isinstance(v, dict):
        return v
    field = f"params.{key}"
    try:
        if set(v) == {"dtype"}:
            return parse_dtype(v["dtype"], field=field)
        if set(v) == {"float"}:
            return float(v["float"])
        if set(v) == {"enum", "value"}:
            return ENUMS[v["enum"]][v["value"]]
        if set(v) == {"struct", "fields"}:
            cls = STRUCTS[v["struct"]]
            return cls(**{f: _decode(x, prim, f"{key}.{f}", decode_program) for f, x in v["fields"].items()})
        if set(v) in ({"program"}, {"program", "open"}):
            return _decode_program(v["program"], bool(v.get("open")), prim, key, decode_program)
    except WireError as e:
        if e.field.startswith("params."):
            raise
        raise WireError(f"primitive {prim!r}: param {key!r}: nested program: {e}",
                        field=field) from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise WireError(f"primitive {prim!r}: param {key!r}: cannot decode {v!r:.80} ({e})",
                        field=field) from None
    raise WireError(f"primitive {prim!r}: param {key!r}: unknown object form {sorted(v)}",
                    field=field)


def _decode_program(prog: Any, open_: bool, prim: str, key: str,
                    decode_program: DecodeProgram) -> jex.ClosedJaxpr | jex.Jaxpr:
    closed = decode_program(prog)
    if not open_:
        return closed
    if closed.consts:
        raise WireError(f"primitive {prim!r}: param {key!r}: an open jaxpr cannot hold consts",
                        field=f"params.{key}")
    return closed.jaxpr
