"""The table of ATen ops torch capture knows: one entry per core-ATen overload, its lowering to
JAX primitives (the wire equations) registered by the family modules beside this one. The shape
rule of an entry is the abstract evaluation of what it emits, checked against torch's own."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class OutSpec:
    """What torch says a node produces: the first (or only) output's shape and dtype, and all of
    them for multi-output ops."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    all: tuple[tuple[tuple[int, ...], np.dtype] | None, ...]
    # torch's type promotion over the node's tensor and scalar operands (what an elementwise op
    # computes in); None where the operands do not promote
    promoted: np.dtype | None = None
    # the first operand's strides and storage offset as torch holds it (None when not a tensor):
    # only an op that reads storage (as_strided) looks at how its operand is laid out
    layout: tuple[tuple[int, ...], int] | None = None


class Unsupported(ValueError):
    """A lowering refusing arguments it cannot compute exactly; the message says which and why."""


@dataclass(frozen=True)
class AtenOp:
    """One table entry: the overload's name (`aten.add.Tensor`) and its lowering, called as
    `lower(out, *args, **kwargs)` with tensors as JAX values and `out` the node's OutSpec."""

    name: str
    lower: Callable[..., Any]


ATEN: dict[str, AtenOp] = {}


def lowers(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the lowering of each named overload (one entry per name)."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            if name in ATEN:
                raise ValueError(f"{name} is lowered twice")
            ATEN[name] = AtenOp(name, fn)
        return fn
    return register


def is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def numpy_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of a torch dtype (bfloat16 and friends through ml_dtypes, as JAX names them)."""
    name = str(dtype).removeprefix("torch.")
    return np.dtype(bool) if name == "bool" else np.dtype(getattr(jnp, name))


def as_dtype(x: Any, dtype: Any) -> Any:
    """`x` (a tensor or a Python scalar) in `dtype`: scalars become typed constants, tensors get a
    convert only when their dtype differs."""
    dtype = np.dtype(dtype)
    if is_tensor(x):
        return x if np.dtype(x.dtype) == dtype else x.astype(dtype)
    return jnp.asarray(np.asarray(x, dtype=dtype))


def truthy(x: Any) -> Any:
    """`x != 0` as torch's logical ops read it, with no detour through another dtype for bools."""
    return x if np.dtype(x.dtype) == np.bool_ else x != jnp.zeros((), x.dtype)


def dims(axis: Any, rank: int) -> tuple[int, ...]:
    """A dim argument (int, list or None for all) as non-negative axes."""
    if axis is None or (isinstance(axis, (list, tuple)) and len(axis) == 0):
        return tuple(range(rank))
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    return tuple(int(a) % max(rank, 1) for a in axes)


def load_families() -> dict[str, AtenOp]:
    """The whole table: importing the family modules registers their entries."""
    for family in ("checks", "creation", "elementwise", "fused", "indexing", "nn", "reductions", "shapes"):
        importlib.import_module(f"wire.aten.{family}")
    return ATEN
