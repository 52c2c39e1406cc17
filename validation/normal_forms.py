"""What value numbering (validation/value_numbering.py) takes as the same computation beyond identical
equations: each equation is numbered by its normal form, an operand it equals or an equation
computing the same. Every identity here is exact in IEEE arithmetic, bit for bit, except those
said to hold in `real` numberings: identities of real arithmetic, which the real-arithmetic check
(float64 evaluation) could not tell apart beyond its own rounding; those through a GEMM or
convolution are among them, as a library GEMM may block, and so round, by its whole shape.

- data movement: a slice selecting one operand's part of a concatenation is that operand; a
  transpose of a transpose, a broadcast of a broadcast and a reshape of a reshape are one (none
  where it changes nothing); stop_gradient and copy are their operand;
- arithmetic: `add`, `sub`, `mul` and `neg` of float literals are the literal they round to in
  their own type (float16, 32 or 64), and in `real` numberings the literal their float64 result
  is (what the real-arithmetic check computes); x / 2^k is x * 2^-k (both are the correctly
  rounded x * 2^-k), and in `real` numberings x / c is x * (1/c) for any float literal c where
  c and 1/c are normal numbers of its type, 1/c in float64 (what the real-arithmetic check
  computes); operands of `and`, `or`, `xor`, `eq`, `ne`, integer `add` and non-complex `mul` are
  unordered, and in `real` numberings of every `add`, `mul`, `max`, `min` (bit for bit,
  XLA fuses a float add with one of its products into an FMA by their order, a complex product
  rounds by it, and `max`/`min` may pick either signed zero);
- real: a slice of a GEMM or convolution over a concatenation, along a dimension the op carries to
  its output unmixed (a GEMM's free dimension, a convolution's output features or batch), is the
  op over the selected part: a merged GEMM's slices are the GEMMs they replace; a sum (product)
  of sums (products) of one type is one sum (product) of all their terms, up to `MAX_TERMS`
  (a residual added in another order); a product of matrices whose factors are products of
  matrices of the same type and precision is one chain of all their factors, in order, up to
  `MAX_FACTORS` (a chain multiplied in another order).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
from jax.numpy import finfo

from rewrites.chain_order import PLAIN_MATMUL
from wire.json_types import Eqn, Lit

Formed = Eqn | Lit  # what a value is numbered as: an equation, or the literal it folds to
Form = Callable[[str], Formed | None]  # a value's normal form; None for an input
Shape = Callable[[Any], tuple[int, ...]]  # an operand's shape (a literal's: ())
Aval = Callable[[Any], tuple[tuple[int, ...], str]]  # an operand's shape and dtype

ALWAYS_UNORDERED = frozenset(["and", "or", "xor", "eq", "ne"])
REAL_UNORDERED = ALWAYS_UNORDERED | {"add", "mul", "max", "min"}
IDENTITIES = frozenset(["stop_gradient", "copy"])
FOLDED = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative}
FOLDED_TYPES = frozenset(["float16", "float32", "float64"])  # NumPy rounds these as IEEE does, once
MAX_FACTORS = 256  # a chain of products is rarely longer; each partial product's form is as long as its chain
MAX_TERMS = 64  # a sum flattened further would make each of a long chain's partial sums as long
POWER_OF_TWO_RANGE = 14  # 2^-14..2^14: normal numbers in every float type, float16 included


def is_literal(value: Any) -> bool:
    return isinstance(value, dict) and "lit" in value


def unordered(eqn: Eqn, real: bool) -> bool:
    """Whether the equation's result is the same for its operands in any order (see above)."""
    op, dtype = eqn["op"], eqn["out"][0]["dtype"] if eqn["out"] else ""
    if op in ALWAYS_UNORDERED or (real and op in REAL_UNORDERED):
        return True
    return (op == "mul" and not dtype.startswith("complex")) or \
        (op == "add" and not dtype.startswith(("float", "bfloat", "complex")))


def normal_form(eqn: Eqn, form: Form, aval: Aval, real: bool) -> str | Formed:
    """The operand `eqn` equals, or the equation (or literal) its single output is numbered as."""
    shape = lambda operand: aval(operand)[0]
    op, source = eqn["op"], eqn["in"][0] if eqn["in"] else None
    made = form(source) if isinstance(source, str) else None
    made = None if is_literal(made) else made  # a value folded to a literal moves nowhere
    if op in IDENTITIES and isinstance(source, str):
        return source
    if op in FOLDED:
        folded = _folded(eqn, form, real)
        return _flattened(folded, form) if real and op in ("add", "mul") and not is_literal(folded) else folded
    if op in ("transpose", "broadcast_in_dim", "reshape"):
        return _moved(eqn, made, shape)
    if op == "div":
        scaled = _reciprocal_scale(eqn, form, real)
        return _flattened(scaled, form) if real and scaled is not eqn else scaled
    if op == "dot_general" and real:
        return _chained(eqn, form, aval)
    if op == "slice" and made is not None:
        return _selected_part(eqn, made, form, shape, real) or eqn
    return eqn


def literal_of(operand: Any, form: Form) -> Lit | None:
    """A literal operand, or the literal a value was folded to."""
    if is_literal(operand):
        return operand
    value = form(operand) if isinstance(operand, str) else None
    return value if is_literal(value) else None


def _folded(eqn: Eqn, form: Form, real: bool) -> Formed:
    """Arithmetic on literals of one float type as the literal it is: rounded to that type, or
    (`real`) in float64, as the real-arithmetic check evaluates literals."""
    literals = [literal_of(a, form) for a in eqn["in"]]
    dtype = eqn["out"][0]["dtype"]
    if any(lit is None or lit["dtype"] != dtype for lit in literals) or dtype not in FOLDED_TYPES:
        return eqn
    value = FOLDED[eqn["op"]](*(np.array(lit["lit"], "float64" if real else dtype) for lit in literals))
    return {"lit": float(value), "dtype": dtype} if np.isfinite(value) else eqn


def _spliced(eqn: Eqn, form: Form, alike: Callable[[Eqn], bool], limit: int) -> Eqn:
    """`eqn` over its operands, each operand whose normal form `alike` accepts replaced by that
    form's operands in place, up to `limit` operands (beyond it, `eqn` as it is)."""
    operands = []
    for operand in eqn["in"]:
        inner = form(operand) if isinstance(operand, str) else None
        spliced = inner is not None and not is_literal(inner) and alike(inner)
        operands.extend(inner["in"] if spliced else [operand])
    return {**eqn, "in": operands} if len(operands) <= limit else eqn


def _flattened(eqn: Eqn, form: Form) -> Eqn:
    """A sum (product) whose operands are sums (products) of the same type, as one over all their
    terms: associative in real arithmetic."""
    kind = lambda e: (e["op"], [(o["shape"], o["dtype"]) for o in e["out"]],
                      {k: v for k, v in (e.get("params") or {}).items() if v is not None})
    return _spliced(eqn, form, lambda inner: kind(inner) == kind(eqn), MAX_TERMS)


def _is_matrix_product(eqn: Eqn, aval: Aval) -> bool:
    """A product of matrices, each of the product's type, a number type: a product that converts
    (floats to an integer, complex to real: `preferred_element_type`) rounds each partial product
    its own way, and booleans are not summed as numbers."""
    out_shape, out_dtype = eqn["out"][0]["shape"], eqn["out"][0]["dtype"]
    return eqn["op"] == "dot_general" and eqn["params"]["dimension_numbers"] == PLAIN_MATMUL \
        and len(out_shape) == 2 and out_dtype != "bool" \
        and all(isinstance(a, str) and len(aval(a)[0]) == 2 and aval(a)[1] == out_dtype for a in eqn["in"])


def _chained(eqn: Eqn, form: Form, aval: Aval) -> Eqn:
    """A product of matrices whose factors are products of matrices of the same type and
    precision, as one product of all their factors in order (associative in real arithmetic), up
    to `MAX_FACTORS`."""
    kind = lambda e: (e["out"][0]["dtype"], {k: v for k, v in e["params"].items()
                                             if v is not None and k != "dimension_numbers"})
    if not _is_matrix_product(eqn, aval):
        return eqn
    return _spliced(eqn, form, lambda inner: _is_matrix_product(inner, aval) and kind(inner) == kind(eqn),
                    MAX_FACTORS)


def _moved(eqn: Eqn, made: Eqn | None, shape: Shape) -> str | Eqn:
    """A transpose, broadcast or reshape of the same op as one, and none where it changes nothing."""
    op, params = eqn["op"], eqn["params"]
    if made is not None and made.get("op") == op:
        inner = made["params"]
        if op == "transpose":
            params = {**params, "permutation": [inner["permutation"][p] for p in params["permutation"]]}
        elif op == "broadcast_in_dim":
            params = {**params, "broadcast_dimensions": [params["broadcast_dimensions"][d]
                                                         for d in inner["broadcast_dimensions"]]}
        elif params.get("dimensions") or inner.get("dimensions"):
            return eqn  # a reshape that transposes first
        eqn = {**eqn, "in": made["in"], "params": params}
    operand = eqn["in"][0]
    if not isinstance(operand, str) or tuple(shape(operand)) != tuple(eqn["out"][0]["shape"]):
        return eqn
    unmoved = {"transpose": lambda: list(params["permutation"]) == sorted(params["permutation"]),
               "broadcast_in_dim": lambda: list(params["broadcast_dimensions"]) == list(range(len(shape(operand)))),
               "reshape": lambda: not params.get("dimensions")}
    return operand if unmoved[op]() else eqn


def _reciprocal_scale(eqn: Eqn, form: Form, real: bool) -> Eqn:
    """x / c as x * (1/c) for a float literal c: in `real` numberings any c where c and 1/c are
    normal numbers of its type (a subnormal divisor may be flushed to zero, a reciprocal out of
    range does not fit), with 1/c in float64 (as the real-arithmetic check evaluates it);
    otherwise only c = 2^k in range, whose reciprocal every float type holds exactly; any other
    division as it is."""
    divisor = literal_of(eqn["in"][1], form)
    if divisor is None or divisor["dtype"] not in FOLDED_TYPES | {"bfloat16"}:
        return eqn
    value = float(divisor["lit"])
    mantissa, exponent = math.frexp(abs(value)) if value else (0.0, 0)
    if real:
        limits = finfo(divisor["dtype"])  # c and 1/c must be normal numbers of the type
        normal = lambda v: float(limits.tiny) <= abs(v) <= float(limits.max)
        if not normal(value) or not normal(1.0 / value):
            return eqn
    elif mantissa != 0.5 or abs(exponent - 1) > POWER_OF_TWO_RANGE:
        return eqn
    return {**eqn, "op": "mul", "in": [eqn["in"][0], {**divisor, "lit": 1.0 / value}], "params": {}}


def carried_dims(eqn: Eqn, shape: Shape) -> Mapping[int, Mapping[int, int]]:
    """Per operand position: operand dimension -> the output dimension it is carried to, where each
    output index along it depends on that operand's index alone (none for ops not listed)."""
    params = eqn.get("params") or {}
    if eqn["op"] == "dot_general":  # of two operands, or a chain of matrix products (its first and last)
        (contract_l, contract_r), (batch_l, batch_r) = params["dimension_numbers"]
        sides = (0, len(eqn["in"]) - 1)
        ranks = [len(shape(eqn["in"][side])) for side in sides]
        free = [[d for d in range(ranks[0]) if d not in (*contract_l, *batch_l)],
                [d for d in range(ranks[1]) if d not in (*contract_r, *batch_r)]]
        first = [len(batch_l), len(batch_l) + len(free[0])]  # output: batch, lhs free, rhs free
        return {side: {d: first[k] + n for n, d in enumerate(free[k])} for k, side in enumerate(sides)}
    if eqn["op"] == "conv_general_dilated":
        if params.get("feature_group_count", 1) != 1 or params.get("batch_group_count", 1) != 1:
            return {}  # grouped: an output feature reads one group of the input features
        specs = params["dimension_numbers"]["fields"]
        return {0: {specs["lhs_spec"][0]: specs["out_spec"][0]}, 1: {specs["rhs_spec"][0]: specs["out_spec"][1]}}
    return {}


def _part(slice_eqn: Eqn, concat: Eqn, out_dim: int, shape: Shape) -> str | None:
    """The concatenation's operand that `slice_eqn` selects along `out_dim` (whole along every
    other dimension, unit strides), if it selects exactly one operand's part."""
    params = slice_eqn["params"]
    start, limit, whole = params["start_indices"], params["limit_indices"], shape(slice_eqn["in"][0])
    if any(s != 1 for s in params.get("strides") or []):
        return None
    if any((start[d], limit[d]) != (0, whole[d]) for d in range(len(whole)) if d != out_dim):
        return None
    axis, offset = concat["params"]["dimension"], 0
    for operand in concat["in"]:
        size = shape(operand)[axis]
        if (start[out_dim], limit[out_dim]) == (offset, offset + size):
            return operand if isinstance(operand, str) else None
        offset += size
    return None


def _selected_part(slice_eqn: Eqn, made: Eqn, form: Form, shape: Shape, real: bool) -> str | Eqn | None:
    """What a slice of `made` equals when it selects one operand's part of a concatenation."""
    if made["op"] == "concatenate":
        return _part(slice_eqn, made, made["params"]["dimension"], shape)
    if not real:
        return None
    for position, dims in carried_dims(made, shape).items():
        operand = made["in"][position]
        concat = form(operand) if isinstance(operand, str) else None
        if concat is None or concat.get("op") != "concatenate" or concat["params"]["dimension"] not in dims:
            continue
        part = _part(slice_eqn, concat, dims[concat["params"]["dimension"]], shape)
        if part is not None:
            operands = list(made["in"])
            operands[position] = part
            return {**made, "in": operands, "out": slice_eqn["out"]}
    return None
