"""Capture a JAX function as an `optu.jaxpr/v1` wire program: call-like wrappers are inlined,
control flow keeps its structure as nested programs."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import jax
import jax.extend.core as jex
import numpy as np

from wire.format import WireError, WireProgram, encode_array, encode_literal
from wire.json_types import Program
from wire.params import encode_params

# Wrapper primitives whose body is spliced into the caller, and the param holding that body.
_INLINE = {
    "jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr", "remat2": "jaxpr", "checkpoint": "jaxpr",
}


def capture(fn: Callable, *args: Any, weight_argnums: Sequence[int] = ()) -> Program:
    """The wire program of `fn` at `args` (pytrees allowed; inputs are the flattened leaves)."""
    return capture_with_trees(fn, *args, weight_argnums=weight_argnums)[0]


def capture_with_trees(fn: Callable, *args: Any, weight_argnums: Sequence[int] = ()
                       ) -> tuple[dict, Any, Any]:
    """As `capture`, plus the input and output treedefs needed to rebuild pytrees."""
    leaves, in_tree = jax.tree_util.tree_flatten(args)
    roles = [("weight" if i in weight_argnums else "activation")
             for i, a in enumerate(args) for _ in jax.tree_util.tree_leaves(a)]
    out_tree = None

    def flat_fn(*flat):
        nonlocal out_tree
        out = fn(*jax.tree_util.tree_unflatten(in_tree, flat))
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        return out_leaves

    closed = inline_calls(jax.make_jaxpr(flat_fn)(*leaves))
    program = jaxpr_to_wire(closed, roles)
    WireProgram.model_validate(program)
    return program, in_tree, out_tree


def inline_calls(closed: jex.ClosedJaxpr) -> jex.ClosedJaxpr:
    """Re-trace `closed` so wrapper calls disappear, recursing into control-flow bodies."""
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars]
    return jax.make_jaxpr(lambda *a: _eval(closed.jaxpr, closed.consts, a))(*avals)


def _eval(jaxpr: jex.Jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v):
        if isinstance(v, jex.Literal):
            # A raw bind does not promote weak types, so pin the literal to its aval dtype.
            return np.asarray(v.val, dtype=v.aval.dtype)[()]
        return env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name in _INLINE and _INLINE[name] in eqn.params:
            body = eqn.params[_INLINE[name]]
            if isinstance(body, jex.ClosedJaxpr):
                outs = _eval(body.jaxpr, body.consts, ins)
            else:
                outs = _eval(body, (), ins)
        elif name == "custom_linear_solve":
            outs = _linear_solve(eqn.params, ins)
        elif name == "device_put":
            # placement between host devices: the values are its operands, as when pjit's
            # shardings are inlined away (the optimized program runs where the client puts it)
            outs = ins
        else:
            params = {k: _inline_param(v) for k, v in eqn.params.items()}
            outs = eqn.primitive.bind(*ins, **params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _linear_solve(params: dict[str, Any], ins: list[Any]) -> list[Any]:
    """A custom linear solve's value: its `solve` function applied to the right-hand side (the
    custom rules it carries are for differentiation, which a compiled forward program does not
    need). Operands: the consts of matvec, vecmat, solve and transpose_solve, then b."""
    lengths, solve = params["const_lengths"], params["jaxprs"].solve
    start = lengths.matvec + lengths.vecmat
    return _eval(solve.jaxpr, solve.consts, [*ins[start:start + lengths.solve], *ins[sum(lengths):]])


def _inline_param(v: Any) -> Any:
    if isinstance(v, jex.ClosedJaxpr):
        return inline_calls(v)
    if isinstance(v, jex.Jaxpr):
        inlined = inline_calls(jex.ClosedJaxpr(v, ()))
        # Open jaxprs (scatter update, ...) cannot carry consts; keep the original then.
        return v if inlined.consts else inlined.jaxpr
    if isinstance(v, tuple) and v and all(isinstance(x, jex.ClosedJaxpr) for x in v):
        return tuple(inline_calls(x) for x in v)
    return v


def jaxpr_to_wire(closed: jex.ClosedJaxpr, roles: Sequence[str] | None = None) -> Program:
    """The wire program of an already-inlined closed jaxpr (names in*, c*, v* per program)."""
    jaxpr = closed.jaxpr
    names: dict[Any, str] = {}
    counter = itertools.count()

    def spec(v, name: str, where: str) -> dict:
        aval = v.aval
        if not hasattr(aval, "shape") or not hasattr(aval, "dtype"):
            raise WireError(f"{where}: value {v} has abstract type {aval} the wire format cannot carry",
                            field="out")
        if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
            raise WireError(f"{where}: a value of dtype {aval.dtype} (a typed PRNG key or another extended "
                            "dtype) cannot be carried by the wire format; raw uint32 keys "
                            "(jax.random.PRNGKey) can", field="out")
        return {"name": name, "shape": [int(d) for d in aval.shape], "dtype": np.dtype(aval.dtype).name}

    def ref(v) -> str | dict:
        if isinstance(v, jex.Literal):
            return encode_literal(v.val, v.aval.dtype).model_dump()
        return names[v]

    inputs = []
    for i, v in enumerate(jaxpr.invars):
        names[v] = f"in{i}"
        inputs.append(spec(v, f"in{i}", f"input {i}") | {"role": roles[i] if roles else "activation"})
    consts = []
    for i, (v, c) in enumerate(zip(jaxpr.constvars, closed.consts)):
        names[v] = f"c{i}"
        consts.append(spec(v, f"c{i}", f"const {i}") | {"data": encode_array(np.asarray(c, dtype=v.aval.dtype))})
    eqns = []
    for k, eqn in enumerate(jaxpr.eqns):
        ins = [ref(v) for v in eqn.invars]
        outs = []
        try:
            for v in eqn.outvars:
                name = f"v{next(counter)}"
                if not isinstance(v, jex.DropVar):
                    names[v] = name
                outs.append(spec(v, name, f"primitive {eqn.primitive.name!r}"))
            params = encode_params(eqn.primitive.name, eqn.params, jaxpr_to_wire)
        except WireError as e:
            raise WireError(e.message, eqn=k, field=e.field) from None
        eqns.append({"op": eqn.primitive.name, "in": ins, "out": outs, "params": params})
    return {"format": "optu.jaxpr/v1", "inputs": inputs, "consts": consts, "eqns": eqns,
            "outputs": [ref(v) for v in jaxpr.outvars]}
