"""ATen ops that create tensors from sizes and scalars: full, arange, scalar_tensor. The dtype is
the node's (torch resolved its defaults); device, layout and pin_memory do not matter here."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from wire.aten import as_dtype, lowers


@lowers("aten.full.default", "aten.new_full.default")
def _full(out, *args, **_):
    fill = args[-1]  # full(size, fill) and new_full(self, size, fill)
    return jnp.full(out.shape, as_dtype(fill, out.dtype))


@lowers("aten.full_like.default", "aten.fill.Scalar")
def _full_like(out, x, fill, **_):
    return jnp.full(out.shape, as_dtype(fill, out.dtype))


@lowers("aten.zeros_like.default", "aten.empty.memory_format", "aten.empty_like.default",
        "aten.new_zeros.default", "aten.new_empty.default", "aten.empty_strided.default", "aten.zeros.default")
def _zeros(out, *args, **_):
    # torch's empty is uninitialised memory: zeros is one of its values, and a deterministic one
    return jnp.zeros(out.shape, out.dtype)


@lowers("aten.ones_like.default", "aten.new_ones.default", "aten.ones.default")
def _ones(out, *args, **_):
    return jnp.ones(out.shape, out.dtype)


@lowers("aten.scalar_tensor.default")
def _scalar_tensor(out, value, **_):
    return as_dtype(value, out.dtype)


@lowers("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def _arange(out, *args, **_):
    start, step = (args[0], args[2] if len(args) > 2 else 1) if len(args) > 1 else (0, 1)
    n = out.shape[0]
    if np.issubdtype(out.dtype, np.integer) and float(start).is_integer() and float(step).is_integer():
        iota = lax.iota(out.dtype, n)
        return iota * as_dtype(step, out.dtype) + as_dtype(start, out.dtype)
    # torch computes start + i * step in double, then rounds to the dtype
    compute = np.float64 if out.dtype == np.float64 else np.float32
    values = np.asarray(start, np.float64) + np.arange(n, dtype=np.float64) * np.float64(step)
    return jnp.asarray(values.astype(compute)).astype(out.dtype)
