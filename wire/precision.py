"""The precision a wire program declares, as JAX needs to hear it: a program that names a 64-bit
type anywhere (float64, int64, uint64, complex128: in its inputs, consts, equations, literals or
nested programs) is traced, run and checked under JAX's x64 mode, scoped to that work and that
thread; JAX's global flag is never flipped, and a 32-bit program runs exactly as before."""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from functools import wraps
from typing import Any, Callable

import jax

SIXTY_FOUR_BIT = frozenset({"float64", "int64", "uint64", "complex128"})


def declares_64_bit(program: Any) -> bool:
    """Whether any dtype the program (a wire program's JSON, or any part of it) names is 64-bit."""
    stack = [program]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and node in SIXTY_FOUR_BIT:
            return True
    return False


def declared_precision(program: Any) -> AbstractContextManager:
    """A context in which JAX computes in the types `program` declares: x64 on for a program that
    declares a 64-bit type (JAX would otherwise narrow it to 32 bits), nothing otherwise."""
    return x64_when(declares_64_bit(program))


def x64_when(sixty_four_bit: bool) -> AbstractContextManager:
    """`declared_precision` for a program already known to declare a 64-bit type or not (a callable
    that runs one program many times decides it once)."""
    return jax.enable_x64(True) if sixty_four_bit else nullcontext()


def in_declared_precision(program: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` called (traced, compiled and run) in `program`'s declared precision: how a jitted
    program must be called, since jit narrows 64-bit arguments at its boundary unless x64 is on."""
    if not declares_64_bit(program):
        return fn

    @wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return call
