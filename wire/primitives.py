"""One table of what the optimizer knows about each primitive, as JAX registers its own: the kernel
role it plays, the unit that prices it, whether it is pure (free to move out of a loop), whether
IEEE arithmetic fixes its bits, the e-graph term it is held as (and lowered back from), its result
dtype, the params JAX requires but that are almost always None, and the params that hold nested
programs. Every layer reads its sets from here; a primitive not in the table is opaque: carried
through untouched, priced as host work, never moved."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal

from wire.json_types import Eqn, Program

Role = Literal["gemm", "elementwise", "reduction", "view", "move", "control"]
# The unit a primitive's cost comes from: the optical GEMM cores, the vector unit per element,
# bytes moved on the vector unit's SRAM port, nothing (an index map), a loop over its bodies, or
# the host (what the profile cannot price better).
Cost = Literal["gemm", "vector", "move", "free", "loop", "host"]
# The e-graph term that holds it (rewrites.ingest encodes it, costmodel.node_equation lowers it back
# to the primitive): a generic unary, binary or reduce term named by the primitive, a constructor of
# its own, or None: an opaque node.
GENERIC_TERMS = ("unary", "binary", "reduce")
# An elementwise result's dtype: the operands' own, bool (comparisons), or the real type of a
# complex operand (abs).
DtypeRule = Literal["operands", "bool", "real"]


@dataclass(frozen=True)
class Primitive:
    name: str
    role: Role
    cost: Cost
    pure: bool = True
    # IEEE 754 fixes its result (the exact value correctly rounded, or no arithmetic at all), so
    # every conforming backend computes the same bits; a transcendental function is an
    # approximation, and a sum or product over many terms depends on the order it is taken in.
    fp_exact: bool = False
    term: str | None = None
    none_params: tuple[str, ...] = ()
    dtype_rule: DtypeRule = "operands"
    bodies: tuple[tuple[str, str | None], ...] = ()  # (param holding a nested program, its consts-count param)


def _group(names: str, role: Role, cost: Cost, **fields) -> list[Primitive]:
    return [Primitive(name, role, cost, **fields) for name in names.split()]


_ACCURACY = ("accuracy",)  # transcendental ops' accuracy hint
_GEMM_NONE = ("out_sharding", "precision", "preferred_element_type")
_EXACT = {"fp_exact": True}

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in [
    Primitive("dot_general", "gemm", "gemm", term="dot", none_params=_GEMM_NONE),
    Primitive("conv_general_dilated", "gemm", "gemm", term="conv", none_params=_GEMM_NONE),
    # elementwise on the vector unit, one operand
    *_group("neg sign floor ceil not square", "elementwise", "vector", term="unary", **_EXACT),
    *_group("erf erfc erf_inv", "elementwise", "vector", term="unary"),
    Primitive("abs", "elementwise", "vector", term="unary", dtype_rule="real", **_EXACT),
    Primitive("is_finite", "elementwise", "vector", term="unary", dtype_rule="bool", **_EXACT),
    Primitive("sqrt", "elementwise", "vector", term="unary", none_params=_ACCURACY, **_EXACT),
    *_group("exp exp2 log log1p expm1 tanh logistic sin cos tan rsqrt cbrt", "elementwise", "vector",
            term="unary", none_params=_ACCURACY),
    Primitive("reciprocal", "elementwise", "vector", pure=False, term="unary", **_EXACT),
    # elementwise on the vector unit, two operands (size-1 and rank-0 operands broadcast)
    *_group("add sub div max min rem nextafter and or xor", "elementwise", "vector", term="binary", **_EXACT),
    *_group("pow atan2", "elementwise", "vector", term="binary"),
    *_group("eq ne lt le gt ge", "elementwise", "vector", term="binary", dtype_rule="bool", **_EXACT),
    Primitive("mul", "elementwise", "vector", term="binary", none_params=("out_dtype",), **_EXACT),
    Primitive("select_n", "elementwise", "vector", term="select", **_EXACT),
    Primitive("integer_pow", "elementwise", "vector", term="integer_pow"),
    *_group("clamp round reduce_precision", "elementwise", "vector", **_EXACT),
    Primitive("convert_element_type", "elementwise", "vector", term="convert", none_params=("sharding",), **_EXACT),
    Primitive("iota", "elementwise", "vector", none_params=("sharding",), **_EXACT),
    Primitive("add_any", "elementwise", "vector", pure=False, **_EXACT),
    # elementwise the vector unit has no price for
    *_group("acos acosh asin asinh atan atanh bessel_i0e bessel_i1e cosh digamma igamma igammac lgamma polygamma "
            "sinh zeta", "elementwise", "host"),
    *_group("clz complex conj imag population_count real shift_left shift_right_arithmetic shift_right_logical",
            "elementwise", "host", **_EXACT),
    # reductions and scans along an axis
    *_group("reduce_max reduce_min", "reduction", "vector", term="reduce", **_EXACT),
    Primitive("reduce_sum", "reduction", "vector", term="reduce", none_params=("out_sharding",)),
    *_group("reduce_prod cumsum cumprod cumlogsumexp", "reduction", "vector"),
    *_group("argmax argmin cummax cummin", "reduction", "vector", **_EXACT),
    *_group("reduce_and reduce_or reduce_xor", "reduction", "vector", term="reduce", **_EXACT),  # max, min, parity
    # views: a kernel reads their operand through another index map, no data moves
    Primitive("reshape", "view", "free", term="reshape", none_params=("dimensions", "sharding"), **_EXACT),
    Primitive("broadcast_in_dim", "view", "free", term="broadcast", none_params=("sharding",), **_EXACT),
    Primitive("squeeze", "view", "free", term="squeeze", **_EXACT),
    *_group("expand_dims bitcast_convert_type", "view", "free", pure=False, **_EXACT),
    Primitive("stop_gradient", "view", "free", pure=False, term="unary", **_EXACT),  # the identity when run
    # data movement
    Primitive("transpose", "move", "move", term="transpose", **_EXACT),
    Primitive("concatenate", "move", "move", term="concat", **_EXACT),
    Primitive("slice", "move", "move", term="slice", **_EXACT),
    *_group("pad rev dynamic_slice dynamic_update_slice gather", "move", "move", **_EXACT),
    Primitive("copy", "move", "move", term="unary", **_EXACT),
    Primitive("copy_p", "move", "move", pure=False, **_EXACT),
    Primitive("split", "move", "host", **_EXACT),
    # control flow: nested programs, priced from their bodies, never moved as a whole
    Primitive("scan", "control", "loop", pure=False, bodies=(("jaxpr", "num_consts"),)),
    Primitive("while", "control", "loop", pure=False,
              bodies=(("cond_jaxpr", "cond_nconsts"), ("body_jaxpr", "body_nconsts"))),
    Primitive("cond", "control", "loop", pure=False, bodies=(("branches", None),)),
]}


def names(**where) -> frozenset[str]:
    """The primitives whose fields equal `where`, e.g. names(role="gemm")."""
    return frozenset(p.name for p in PRIMITIVES.values() if all(getattr(p, k) == v for k, v in where.items()))


GEMMS = names(role="gemm")
PURE = names(pure=True)


def holds_programs(program: Program) -> bool:
    """Whether an equation of `program` holds a nested program (a loop body, a branch)."""
    return any(PRIMITIVES[e["op"]].bodies for e in program["eqns"] if e["op"] in PRIMITIVES)


def nested_programs(eqn: Eqn) -> Iterator[Program]:
    """The wire programs an equation of a control-flow primitive holds, in the order its params
    list them (a while's condition before its body; a cond's branches in order)."""
    primitive = PRIMITIVES.get(eqn["op"])
    params = eqn.get("params") or {}
    for key, _ in primitive.bodies if primitive else ():
        held = params.get(key)
        yield from (branch["program"] for branch in held) if isinstance(held, list) else [held["program"]]


def deterministic(eqn: Eqn) -> bool:
    """Whether the equation's outputs are a function of its operands: a primitive of the table whose
    nested programs are deterministic too (one it does not know may draw random numbers or call
    the host, so two alike are not one value)."""
    return eqn["op"] in PRIMITIVES and all(deterministic(e) for body in nested_programs(eqn) for e in body["eqns"])


def live_equations(eqns: list[dict], outputs: list, with_effects: bool = True) -> list[int]:
    """Indices, in order, of the equations a returned value depends on and (`with_effects`) of every
    one that is not deterministic (it may act on the world, so it runs whether its values are read
    or not)."""
    needed = {o for o in outputs if isinstance(o, str)}
    kept = []
    for index in range(len(eqns) - 1, -1, -1):
        eqn = eqns[index]
        if (with_effects and not deterministic(eqn)) or any(o["name"] in needed for o in eqn["out"]):
            kept.append(index)
            needed.update(a for a in eqn["in"] if isinstance(a, str))
    return kept[::-1]


def const_operands(eqn: Eqn) -> dict[str, tuple[int, int]]:
    """Per body of a loop (scan, while): (index of its first loop-invariant const among the
    equation's operands, how many); a while's condition consts come before its body's. Empty for
    other primitives (a cond's operands pass straight through to its branches)."""
    primitive = PRIMITIVES.get(eqn["op"])
    if primitive is None or not primitive.bodies or not all(n for _, n in primitive.bodies):
        return {}
    params, blocks, start = eqn.get("params") or {}, {}, 0
    for key, n_key in primitive.bodies:
        blocks[key] = start, int(params.get(n_key, 0))
        start += blocks[key][1]
    return blocks
