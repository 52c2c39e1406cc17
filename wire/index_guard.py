"""Index bounds that PyTorch checks at run time. Eager torch raises IndexError where an embedding,
index_select, gather, scatter or advanced index reads outside its tensor; JAX's gathers clamp and
its scatters drop, so the same program compiled by XLA would return a wrong value in silence (a
static KV cache run past a model's position table gives other tokens). Each index lowering states
the range its indices must lie in; capture collects those whose values depend on the call into a
guard: a program of the model's inputs computing one flag per check, run before the model so that a
call out of range raises as eager does and writes no cache in place."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from wire.execute import program_to_callable
from wire.json_types import Program
from wire.primitives import live_equations


class IndexOutOfRange(ValueError):
    """An index the capture's own example puts out of range (torch.export would have raised)."""


@dataclass
class Bound:
    """One check: `flag` is true where some index lies outside its range; `what` says which."""

    flag: Any
    what: str


_COLLECTED: ContextVar[list[Bound] | None] = ContextVar("index_bounds", default=None)


@contextmanager
def collecting() -> Iterator[list[Bound]]:
    """The bounds the index lowerings state while the block runs (they state none outside one)."""
    token = _COLLECTED.set([])
    try:
        yield _COLLECTED.get()
    finally:
        _COLLECTED.reset(token)


def require_in_range(index: Any, size: int, *, negative: bool, what: str) -> None:
    """`index` must lie in [0, size), or in [-size, size) where torch wraps `negative` indices.
    A check decided at capture (indices from constants) computes nothing."""
    bounds = _COLLECTED.get()
    if bounds is None or not np.issubdtype(np.dtype(index.dtype), np.integer):
        return
    low = -size if negative else 0
    flag = jnp.any((index < low) | (index >= size))
    if not isinstance(flag, jax.core.Tracer):
        if bool(flag):
            raise IndexOutOfRange(f"{what} at an index outside [{low}, {size})")
        return
    bounds.append(Bound(flag, f"{what}; every index must lie in [{low}, {size})"))


@dataclass(frozen=True)
class IndexGuard:
    """A wire program of the captured program's inputs whose outputs are boolean flags, each true
    when the index read that `checks` names at the same position is out of range."""

    program: dict
    checks: list[str]


def split_guard(program: Program, checks: list[str]) -> tuple[Program, IndexGuard | None]:
    """`program` whose last len(checks) outputs are the flags, as the model's program (those
    outputs and the work only they need removed; everything else as it was) and the guard of the
    flags that read the program's inputs. A flag made from constants alone (an iota's positions)
    is decided here: capture fails where it is set, and it is left out of the guard where not."""
    if not checks:
        return program, None
    eqns, outputs, flags = program["eqns"], program["outputs"][:-len(checks)], program["outputs"][-len(checks):]
    flag_eqns = _needed(eqns, flags)
    model_eqns = _needed(eqns, outputs) | (set(range(len(eqns))) - flag_eqns)
    model = {**program, "eqns": [e for k, e in enumerate(eqns) if k in model_eqns], "outputs": outputs}
    inputs = {i["name"] for i in program["inputs"]}
    per_call = [k for k, flag in enumerate(flags) if _reads(eqns, _needed(eqns, [flag])) & inputs]
    decided = [k for k in range(len(flags)) if k not in per_call]
    if decided:
        for k, out_of_range in zip(decided, program_to_callable(_flags_program(program, [flags[k] for k in decided],
                                                                                inputs=[]))()):
            if bool(out_of_range):
                raise IndexOutOfRange(checks[k])
    if not per_call:
        return model, None
    return model, IndexGuard(_flags_program(program, [flags[k] for k in per_call]), [checks[k] for k in per_call])


def _flags_program(program: Program, flags: list, inputs: list | None = None) -> Program:
    """The part of `program` computing `flags`, on its inputs (or on `inputs`)."""
    needed = _needed(program["eqns"], flags)
    read = _reads(program["eqns"], needed)
    return {**program, "inputs": program["inputs"] if inputs is None else inputs,
            "consts": [c for c in program["consts"] if c["name"] in read], "outputs": flags,
            "eqns": [e for k, e in enumerate(program["eqns"]) if k in needed]}


def _reads(eqns: list[dict], needed: set[int]) -> set[str]:
    """The names the equations at `needed` read."""
    return {x for k in needed for x in eqns[k]["in"] if isinstance(x, str)}


def _needed(eqns: list[dict], roots: list) -> set[int]:
    """The positions of the equations the values `roots` are computed from."""
    return set(live_equations(eqns, roots, with_effects=False))
