"""ATen views and data movement: reshapes, permutes, broadcasts, slices, concatenation, splits,
padding, flips and repeats. Sizes come from torch's out spec where torch allows -1."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from wire.aten import Unsupported, as_dtype, dims, lowers


@lowers("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(out, x, size):
    return jnp.reshape(x, out.shape)


@lowers("aten.permute.default")
def _permute(out, x, order):
    return jnp.transpose(x, dims(order, x.ndim))


@lowers("aten.transpose.int")
def _transpose(out, x, a, b):
    return jnp.swapaxes(x, a, b)


@lowers("aten.t.default")
def _t(out, x):
    return x.T


@lowers("aten.expand.default")
def _expand(out, x, size, implicit=False):
    return jnp.broadcast_to(x, out.shape)


@lowers("aten.unsqueeze.default")
def _unsqueeze(out, x, dim):
    return jnp.expand_dims(x, dim % (x.ndim + 1))


@lowers("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default")
def _squeeze(out, x, dim=None):
    axes = [a for a in dims(dim, x.ndim) if x.shape[a] == 1]  # torch skips non-1 dims silently
    return jnp.squeeze(x, tuple(axes))


def _clamp_index(i, size):
    i = i + size if i < 0 else i
    return min(max(i, 0), size)


@lowers("aten.slice.Tensor")
def _slice(out, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    size = x.shape[dim]
    lo = 0 if start is None else _clamp_index(start, size)
    hi = size if end is None else _clamp_index(end, size)
    hi = max(hi, lo)
    return lax.slice_in_dim(x, lo, hi, step, axis=dim)


@lowers("aten.select.int")
def _select(out, x, dim, index):
    dim = dim % x.ndim
    return lax.index_in_dim(x, index % x.shape[dim], axis=dim, keepdims=False)


@lowers("aten.cat.default")
def _cat(out, tensors, dim=0):
    # torch lets empty 1-d tensors join anything; they add nothing
    parts = [as_dtype(t, out.dtype) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    return jnp.concatenate(parts, axis=dim % len(out.shape))


@lowers("aten.split_with_sizes.default")
def _split_with_sizes(out, x, sizes, dim=0):
    dim = dim % x.ndim
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [lax.slice_in_dim(x, s, s + n, axis=dim) for s, n in zip(starts, sizes)]


@lowers("aten.split.Tensor")
def _split(out, x, size, dim=0):
    dim = dim % x.ndim
    total = x.shape[dim]
    return [lax.slice_in_dim(x, s, min(s + size, total), axis=dim) for s in range(0, total, size)]


@lowers("aten.unbind.int")
def _unbind(out, x, dim=0):
    dim = dim % x.ndim
    return [lax.index_in_dim(x, i, axis=dim, keepdims=False) for i in range(x.shape[dim])]


@lowers("aten.constant_pad_nd.default")
def _pad(out, x, pad, value=0):
    # torch lists (before, after) pairs from the last dim backwards; negative pads crop
    config = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        config[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, as_dtype(value, x.dtype), config)


@lowers("aten.flip.default")
def _flip(out, x, axes):
    return jnp.flip(x, dims(axes, x.ndim))


@lowers("aten.roll.default")
def _roll(out, x, shifts, axes=()):
    if not axes:
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), dims(axes, x.ndim))


@lowers("aten.repeat.default")
def _repeat(out, x, repeats):
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, tuple(repeats))


@lowers("aten.slice_scatter.default")
def _slice_scatter(out, x, src, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    size = x.shape[dim]
    lo = 0 if start is None else _clamp_index(start, size)
    hi = size if end is None else _clamp_index(end, size)
    index = [slice(None)] * x.ndim
    index[dim] = slice(lo, hi, step)
    return x.at[tuple(index)].set(as_dtype(src, x.dtype))


@lowers("aten.select_scatter.default")
def _select_scatter(out, x, src, dim, index):
    dim = dim % x.ndim
    where = [slice(None)] * x.ndim
    where[dim] = index % x.shape[dim]
    return x.at[tuple(where)].set(as_dtype(src, x.dtype))


@lowers("aten.tril.default", "aten.triu.default")
def _tri(out, x, diagonal=0):
    return (jnp.tril if out.name == "aten.tril.default" else jnp.triu)(x, diagonal)


@lowers("aten.as_strided.default")
def _as_strided(out, x, size, stride, storage_offset=None):
    # a view of the operand's storage: each element read is found where torch keeps it (from the
    # operand's strides), so the view is a reshape when it reads the operand in order, else a gather
    if out.layout is None:
        raise Unsupported("reads its operand's storage, whose layout torch did not record")
    if 0 in out.shape:
        return jnp.zeros(out.shape, x.dtype)
    strides, offset = out.layout
    held = offset + sum(np.indices(x.shape)[k] * strides[k] for k in range(x.ndim)).reshape(-1)
    element_at = np.full(int(held.max(initial=0)) + 1, -1)
    element_at[held] = np.arange(x.size)  # an expanded operand's repeats hold one value: any of them
    read = (offset if storage_offset is None else storage_offset) + sum(
        np.indices(out.shape)[k] * int(stride[k]) for k in range(len(out.shape))).reshape(-1)
    if read.min(initial=0) < 0 or read.max(initial=0) >= element_at.size or (element_at[read] < 0).any():
        raise Unsupported("reads storage its operand does not cover")
    source = element_at[read]
    if source.size == x.size and (source == np.arange(x.size)).all():
        return jnp.reshape(x, out.shape)
    return jnp.take(jnp.reshape(x, -1), jnp.asarray(source)).reshape(out.shape)
