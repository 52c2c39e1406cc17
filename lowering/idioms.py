"""Idiom nodes -> standard primitives: each idiom is expanded by tracing its reference
implementation, the same decomposition the recognizer matched, so extraction may pick the named
op (priced as one fused kernel) without the emitted program changing meaning."""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax

from wire.capture import inline_calls, jaxpr_to_wire

_BATCHED = (((3,), (2,)), ((0, 1), (0, 1)))  # [batch, heads, m, k] @ [batch, heads, k, n]


def _layer_norm(x, eps):
    n = x.shape[-1]
    mean = jnp.sum(x, -1, keepdims=True) / n
    var = jnp.sum((x - mean) ** 2, -1, keepdims=True) / n
    return (x - mean) * lax.rsqrt(var + eps)


def _attention(q, kt, v, scale):
    scores = lax.dot_general(q, kt, _BATCHED, preferred_element_type=q.dtype)
    return lax.dot_general(jax.nn.softmax(scores / scale, axis=-1), v, _BATCHED, preferred_element_type=q.dtype)


def reference(op: str, params: dict[str, Any]) -> Callable:
    """The function an idiom stands for."""
    if op == "softmax":
        return lambda x: jax.nn.softmax(x, axis=-1)
    if op == "gelu":
        return lambda x: jax.nn.gelu(x, approximate=bool(params["approximate"]))
    if op == "layer_norm":
        return _layer_norm
    if op == "attention":
        return _attention
    raise ValueError(f"unknown idiom {op}")


def expand(op: str, params: dict[str, Any], args: list, arg_avals: list[tuple], out_name: str) -> list[dict]:
    """Wire equations computing idiom `op` on `args` (names or literals), result named `out_name`."""
    structs = [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in arg_avals]
    traced = jaxpr_to_wire(inline_calls(jax.make_jaxpr(reference(op, params))(*structs)))
    prefix = f"{out_name}_"  # out_name is unique in the emitted program, so these are too
    rename = {spec["name"]: arg for spec, arg in zip(traced["inputs"], args)}
    result = traced["outputs"][0]
    eqns = []
    for eqn in traced["eqns"]:
        if eqn["op"] == "stop_gradient" and eqn["out"][0]["name"] != result:  # a forward no-op (softmax's
            rename[eqn["out"][0]["name"]] = rename.get(eqn["in"][0], eqn["in"][0])  # max shift): no kernel
            continue
        outs = [{**o, "name": out_name if o["name"] == result else prefix + o["name"]} for o in eqn["out"]]
        rename.update((o["name"], new["name"]) for o, new in zip(eqn["out"], outs))
        eqns.append({**eqn, "in": [rename.get(a, a) if isinstance(a, str) else a for a in eqn["in"]], "out": outs})
    return eqns
