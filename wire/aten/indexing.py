"""ATen indexing: advanced indexing, index_select, gather, scatter, index_put, topk and sort.
Indices keep torch's dtype (int64); negative indices wrap as in torch."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from wire.aten import as_dtype, lowers
from wire.index_guard import require_in_range


@lowers("aten.index.Tensor", "aten._unsafe_index.Tensor")
def _index(out, x, indices):
    if out.name == "aten.index.Tensor":  # the unsafe form is torch's promise that no check is needed
        _advanced_in_range(x, indices)
    return x[tuple(slice(None) if i is None else i for i in indices)]


@lowers("aten.index_select.default")
def _index_select(out, x, dim, index):
    dim = dim % max(x.ndim, 1)
    require_in_range(index, x.shape[dim] if x.ndim else 1, negative=False, what=_along(x, dim))
    return jnp.take(x, index.reshape(-1), axis=dim, mode="clip")


def _along(x, dim):
    return f"indexes a {list(x.shape)} tensor along dim {dim}"


def _advanced_in_range(x, indices):
    """Advanced indices wrap negatives as Python does; one a dim long or more is out of range.
    A boolean mask stands for as many dims as it has (and cannot be out of range)."""
    dim = 0
    for index in indices:
        if index is not None and index.dtype != bool:
            require_in_range(index, x.shape[dim], negative=True, what=_along(x, dim))
        dim += index.ndim if index is not None and index.dtype == bool else 1


def _full_index(index, dim):
    """The index tuple that addresses `index`'s positions of a tensor, `index` along `dim`."""
    grids = jnp.indices(index.shape, sparse=True)
    return tuple(index if d == dim else grids[d] for d in range(index.ndim))


def _fit(x, shape):
    """`x` cut down to `shape` (torch's gather/scatter allow a smaller index than the tensor)."""
    return x[tuple(slice(0, n) for n in shape)] if x.shape != tuple(shape) else x


@lowers("aten.gather.default")
def _gather(out, x, dim, index, sparse_grad=False):
    dim = dim % max(x.ndim, 1)
    require_in_range(index, x.shape[dim] if x.ndim else 1, negative=False, what=_along(x, dim))
    return x[_full_index(jnp.where(index < 0, index + x.shape[dim], index), dim)]


@lowers("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default")
def _scatter(out, x, dim, index, src):
    dim = dim % max(x.ndim, 1)
    require_in_range(index, x.shape[dim] if x.ndim else 1, negative=False, what=_along(x, dim))
    values = as_dtype(src, x.dtype)
    if values.ndim:
        values = _fit(values, index.shape)
    where = x.at[_full_index(index, dim)]
    return where.add(values) if out.name == "aten.scatter_add.default" else where.set(values)


@lowers("aten.index_put.default")
def _index_put(out, x, indices, values, accumulate=False):
    _advanced_in_range(x, indices)
    where = x.at[tuple(slice(None) if i is None else i for i in indices)]
    values = as_dtype(values, x.dtype)
    return where.add(values) if accumulate else where.set(values)


@lowers("aten.topk.default")
def _topk(out, x, k, dim=-1, largest=True, sorted=True):
    dim = dim % max(x.ndim, 1)
    moved = jnp.moveaxis(x, dim, -1)
    values, index = lax.top_k(moved if largest else -moved, k)
    values = values if largest else -values
    return [jnp.moveaxis(values, -1, dim), jnp.moveaxis(index, -1, dim).astype(out.all[1][1])]


@lowers("aten.sort.default", "aten.sort.stable")
def _sort(out, x, *args, stable=None, dim=-1, descending=False):
    if args:  # sort.default(x, dim, descending)
        dim, descending = args[0], (args[1] if len(args) > 1 else descending)
    dim = dim % max(x.ndim, 1)
    index = jnp.argsort(x, axis=dim, stable=True, descending=descending)
    return [jnp.take_along_axis(x, index, axis=dim), index.astype(out.all[1][1])]
