"""Run a wire program: bind each equation's primitive by name, and type-check programs so a bad
one is a WireError naming the equation and field, never a JAX exception."""
from __future__ import annotations

import functools
import json
from typing import Any, Callable

import jax
import jax.extend.core as jex
import jax.extend.core.primitives as jex_prims
import numpy as np
from jax import lax
from pydantic import ValidationError

from wire.format import FORMAT, WireError, WireLiteral, WireProgram, decode_array, literal_value, parse_dtype
from wire.fused_ops import composite_ops
from wire.json_types import Program
from wire.params import decode_params
from wire.precision import declared_precision, in_declared_precision


@functools.cache
def primitive_table() -> dict[str, jex.Primitive]:
    """Primitive name -> Primitive, from jax.extend plus the few only `jax.lax` exports."""
    table: dict[str, jex.Primitive] = {}
    for module in (lax, jex_prims):
        for attr in dir(module):
            p = getattr(module, attr)
            if attr.endswith("_p") and isinstance(p, jex.Primitive):
                table.setdefault(p.name, p)
    return table


def _as_program(program: Program | WireProgram) -> WireProgram:
    if isinstance(program, WireProgram):
        return program
    if not isinstance(program, dict):
        raise WireError("a program must be a JSON object", field="")
    if program.get("format") != FORMAT:
        raise WireError(f"unknown format {program.get('format')!r}; expected {FORMAT!r}",
                        field="format")
    try:
        return WireProgram.model_validate(program)
    except ValidationError as e:
        err = e.errors()[0]
        loc = list(err["loc"])
        eqn = loc[1] if len(loc) > 1 and loc[0] == "eqns" and isinstance(loc[1], int) else None
        field = ".".join(str(x) for x in (loc[2:] if eqn is not None else loc))
        raise WireError(f"schema: {err['msg']}", eqn=eqn, field=field) from None


def _resolve(op: str, eqn: int) -> jex.Primitive:
    prim = primitive_table().get(op) or composite_ops().get(op)
    if prim is None:
        raise WireError(f"unknown primitive {op!r} cannot be run", eqn=eqn, field="op")
    return prim


def closed_jaxpr(program: Program) -> jex.ClosedJaxpr:
    """A (type-checked) wire program traced back into the closed jaxpr it stands for: what a
    control-flow primitive's params hold."""
    typecheck(program)
    fn = program_to_callable(program)
    avals = [jax.ShapeDtypeStruct(tuple(s["shape"]), parse_dtype(s["dtype"])) for s in program["inputs"]]
    return jax.make_jaxpr(lambda *a: fn(*a))(*avals)


def _decode(op: str, params: dict, eqn: int) -> dict:
    try:
        return decode_params(op, params, closed_jaxpr)
    except WireError as e:
        raise WireError(e.message, eqn=eqn, field=e.field) from None


def program_to_callable(program: Program | WireProgram) -> Callable[..., list[Any]]:
    """A function of the flat inputs, in order, returning the list of outputs.

    Run `typecheck` first on untrusted programs; this only checks what it needs to bind."""
    prog = _as_program(program)
    consts = {c.name: decode_array(c) for c in prog.consts}
    with _declared_precision(program):  # nested programs in params are traced here
        steps = [(_resolve(e.op, k), _decode(e.op, e.params, k), e) for k, e in enumerate(prog.eqns)]

    def read(env: dict, x: str | WireLiteral):
        return literal_value(x) if isinstance(x, WireLiteral) else env[x]

    def run(*args: Any) -> list[Any]:
        if len(args) != len(prog.inputs):
            raise TypeError(f"expected {len(prog.inputs)} inputs, got {len(args)}")
        env = dict(consts)
        env.update((s.name, a) for s, a in zip(prog.inputs, args))
        for prim, params, eqn in steps:
            outs = prim.bind(*[read(env, x) for x in eqn.in_], **params)
            outs = outs if prim.multiple_results else [outs]
            env.update((o.name, v) for o, v in zip(eqn.out, outs))
        return [read(env, x) for x in prog.outputs]

    return run


def jitted_program(program: Program) -> Callable[..., list[Any]]:
    """`program_to_callable`, jitted, and called in the precision the program declares."""
    return in_declared_precision(program, jax.jit(program_to_callable(program)))


def _declared_precision(program: Program | WireProgram):
    return declared_precision(program.model_dump(by_alias=True) if isinstance(program, WireProgram) else program)


def typecheck(program: Program | WireProgram) -> None:
    """Raise WireError unless every name is defined once before use, every primitive is known
    and every declared output matches what the primitive computes from the declared inputs."""
    try:
        with _declared_precision(program):
            _typecheck(_as_program(program))
    except RecursionError:
        # Only absurdly nested params or programs get here; they are a client error too.
        raise WireError("program or params nested too deeply", field="params") from None


def _typecheck(prog: WireProgram) -> None:
    env: dict[str, jax.ShapeDtypeStruct] = {}

    def define(name: str, shape: list[int], dtype: str, field: str, eqn: int | None = None):
        if name in env:
            raise WireError(f"name {name!r} is defined twice", eqn=eqn, field=field)
        if any(d < 0 for d in shape):
            raise WireError(f"negative dimension in {shape}", eqn=eqn, field=field)
        env[name] = jax.ShapeDtypeStruct(tuple(shape),
                                         parse_dtype(dtype, eqn=eqn, field=f"{field}.dtype"))

    for i, s in enumerate(prog.inputs):
        define(s.name, s.shape, s.dtype, f"inputs[{i}]")
    for i, c in enumerate(prog.consts):
        define(c.name, c.shape, c.dtype, f"consts[{i}]")
        try:
            decode_array(c)
        except WireError as e:
            raise WireError(e.message, field=f"consts[{i}].data") from None

    def arg(x: str | WireLiteral, eqn: int | None, field: str):
        if isinstance(x, WireLiteral):
            try:
                return literal_value(x)
            except WireError as e:
                raise WireError(e.message, eqn=eqn, field=field) from None
        if x not in env:
            raise WireError(f"variable {x!r} is not defined before use (names must be defined "
                            f"by an earlier equation, so cycles are impossible)", eqn=eqn, field=field)
        return env[x]

    # One abstract evaluation per distinct (op, params, operand types): a model's layers repeat theirs.
    evaluated: dict[tuple, list] = {}
    for k, e in enumerate(prog.eqns):
        ins = [arg(x, k, f"in[{j}]") for j, x in enumerate(e.in_)]
        key = (e.op, json.dumps(e.params, sort_keys=True, default=str), tuple(map(_operand_type, ins)))
        got = evaluated.get(key)
        if got is None:
            got = evaluated[key] = _abstract_eval(_resolve(e.op, k), _decode(e.op, e.params, k), ins, k)
        if len(got) != len(e.out):
            raise WireError(f"{e.op} produces {len(got)} outputs, {len(e.out)} declared",
                            eqn=k, field="out")
        for j, (o, g) in enumerate(zip(e.out, got)):
            declared = (tuple(o.shape), parse_dtype(o.dtype, eqn=k, field=f"out[{j}]"))
            if declared != (tuple(g.shape), np.dtype(g.dtype)):
                raise WireError(f"declared {o.dtype}{list(o.shape)} but {e.op} produces "
                                f"{np.dtype(g.dtype).name}{list(g.shape)}", eqn=k, field=f"out[{j}]")
            define(o.name, o.shape, o.dtype, f"out[{j}]", k)
    for i, x in enumerate(prog.outputs):
        arg(x, None, f"outputs[{i}]")


def _operand_type(operand: Any) -> Any:
    """What an abstract evaluation reads of an operand: a variable's type, a literal's value."""
    if isinstance(operand, jax.ShapeDtypeStruct):
        return operand
    return type(operand).__name__, np.asarray(operand).dtype.str, repr(operand)


def _abstract_eval(prim: jex.Primitive, params: dict, ins: list, eqn: int) -> list:
    spec_idx = [i for i, x in enumerate(ins) if isinstance(x, jax.ShapeDtypeStruct)]

    def bind(*specs):
        args = list(ins)
        for i, s in zip(spec_idx, specs):
            args[i] = s
        out = prim.bind(*args, **params)
        return out if prim.multiple_results else [out]

    try:
        return jax.eval_shape(bind, *[ins[i] for i in spec_idx])
    except Exception as ex:  # JAX raises many types for bad operands; all mean "does not type"
        msg = str(ex).split("\n")[0][:300]
        raise WireError(f"{prim.name} rejects its operands: {type(ex).__name__}: {msg}",
                        eqn=eqn, field="in") from None

