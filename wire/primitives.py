"""One table of what the optimizer knows about each primitive, as JAX registers its own: the kernel
role it plays, the unit that prices it, whether it is pure (free to move out of a loop), the form
the e-graph language gives it, the params JAX requires but that are almost always None, and the
params that hold nested programs. Every layer reads its sets from here; a primitive not in the
table is opaque: carried through untouched, priced as host work, never moved."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal

Role = Literal["gemm", "elementwise", "reduction", "view", "move", "control"]
# The unit a primitive's cost comes from: the optical GEMM cores, the vector unit per element,
# bytes moved on the vector unit's SRAM port, nothing (an index map), a loop over its bodies, or
# the host (what the profile cannot price better).
Cost = Literal["gemm", "vector", "move", "free", "loop", "host"]
# How the e-graph language holds it: a typed unary, binary or reduce term; anything else is its
# own constructor or an opaque node.
TermForm = Literal["unary", "binary", "reduce"] | None
# An elementwise result's dtype: the operands' own, bool (comparisons), or the real type of a
# complex operand (abs).
DtypeRule = Literal["operands", "bool", "real"]


@dataclass(frozen=True)
class Primitive:
    name: str
    role: Role
    cost: Cost
    pure: bool = True
    term: TermForm = None
    none_params: tuple[str, ...] = ()
    dtype_rule: DtypeRule = "operands"
    bodies: tuple[tuple[str, str | None], ...] = ()  # (param holding a nested program, its consts-count param)


def _group(names: str, role: Role, cost: Cost, **fields) -> list[Primitive]:
    return [Primitive(name, role, cost, **fields) for name in names.split()]


_ACCURACY = ("accuracy",)  # transcendental ops' accuracy hint
_GEMM_NONE = ("out_sharding", "precision", "preferred_element_type")

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in [
    *_group("dot_general conv_general_dilated", "gemm", "gemm", none_params=_GEMM_NONE),
    # elementwise on the vector unit, one operand
    *_group("neg sign floor ceil erf erfc erf_inv not square", "elementwise", "vector", term="unary"),
    Primitive("abs", "elementwise", "vector", term="unary", dtype_rule="real"),
    Primitive("is_finite", "elementwise", "vector", term="unary", dtype_rule="bool"),
    *_group("exp exp2 log log1p expm1 tanh logistic sin cos tan sqrt rsqrt cbrt", "elementwise", "vector",
            term="unary", none_params=_ACCURACY),
    Primitive("reciprocal", "elementwise", "vector", pure=False, term="unary"),
    # elementwise on the vector unit, two operands (size-1 and rank-0 operands broadcast)
    *_group("add sub div max min pow rem atan2 nextafter and or xor", "elementwise", "vector", term="binary"),
    *_group("eq ne lt le gt ge", "elementwise", "vector", term="binary", dtype_rule="bool"),
    Primitive("mul", "elementwise", "vector", term="binary", none_params=("out_dtype",)),
    *_group("select_n integer_pow clamp round reduce_precision", "elementwise", "vector"),
    Primitive("convert_element_type", "elementwise", "vector", none_params=("sharding",)),
    Primitive("iota", "elementwise", "vector", none_params=("sharding",)),
    Primitive("add_any", "elementwise", "vector", pure=False),
    # elementwise the vector unit has no price for
    *_group("acos acosh asin asinh atan atanh bessel_i0e bessel_i1e clz complex conj cosh digamma igamma igammac "
            "imag lgamma polygamma population_count real shift_left shift_right_arithmetic shift_right_logical "
            "sinh zeta", "elementwise", "host"),
    # reductions and scans along an axis
    *_group("reduce_max reduce_min", "reduction", "vector", term="reduce"),
    Primitive("reduce_sum", "reduction", "vector", term="reduce", none_params=("out_sharding",)),
    *_group("reduce_prod argmax argmin cumsum cumprod cummax cummin cumlogsumexp", "reduction", "vector"),
    *_group("reduce_and reduce_or reduce_xor", "reduction", "host"),
    # views: a kernel reads their operand through another index map, no data moves
    Primitive("reshape", "view", "free", none_params=("dimensions", "sharding")),
    Primitive("broadcast_in_dim", "view", "free", none_params=("sharding",)),
    Primitive("squeeze", "view", "free"),
    *_group("expand_dims bitcast_convert_type", "view", "free", pure=False),
    Primitive("stop_gradient", "view", "free", pure=False, term="unary"),  # the identity when run
    # data movement
    *_group("transpose concatenate slice pad rev dynamic_slice dynamic_update_slice gather", "move", "move"),
    Primitive("copy", "move", "move", term="unary"),
    Primitive("copy_p", "move", "move", pure=False),
    Primitive("split", "move", "host"),
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


def nested_programs(eqn: dict) -> Iterator[dict]:
    """The wire programs an equation of a control-flow primitive holds, in the order its params
    list them (a while's condition before its body; a cond's branches in order)."""
    primitive = PRIMITIVES.get(eqn["op"])
    params = eqn.get("params") or {}
    for key, _ in primitive.bodies if primitive else ():
        held = params.get(key)
        yield from (branch["program"] for branch in held) if isinstance(held, list) else [held["program"]]
