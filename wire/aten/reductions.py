"""ATen reductions and scans along axes: sum, mean, prod, var, amax/amin, max/min with indices,
argmax/argmin, any/all, cumsum/cumprod, softmax and log-softmax."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wire.aten import as_dtype, dims, lowers, truthy


def _axes(x, dim):
    return dims(dim, x.ndim) if x.ndim else ()


@lowers("aten.sum.dim_IntList", "aten.sum.default")
def _sum(out, x, dim=None, keepdim=False, dtype=None):
    return jnp.sum(as_dtype(x, out.dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers("aten.mean.dim", "aten.mean.default")
def _mean(out, x, dim=None, keepdim=False, dtype=None):
    return jnp.mean(as_dtype(x, out.dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers("aten.prod.dim_int", "aten.prod.default")
def _prod(out, x, dim=None, keepdim=False, dtype=None):
    return jnp.prod(as_dtype(x, out.dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers("aten.var.correction", "aten.var.dim")
def _var(out, x, dim=None, *args, correction=None, keepdim=False, unbiased=None):
    if args:  # var.dim(x, dim, unbiased, keepdim)
        unbiased, keepdim = args[0], (args[1] if len(args) > 1 else keepdim)
    ddof = correction if correction is not None else (0 if unbiased is False else 1)
    return jnp.var(x, axis=_axes(x, dim), ddof=ddof, keepdims=keepdim)


@lowers("aten.amax.default", "aten.amin.default")
def _amax(out, x, dim=(), keepdim=False):
    fn = jnp.max if out.name == "aten.amax.default" else jnp.min
    return fn(x, axis=_axes(x, dim), keepdims=keepdim)


@lowers("aten.max.default", "aten.min.default")
def _max_all(out, x):
    return (jnp.max if out.name == "aten.max.default" else jnp.min)(x)


@lowers("aten.max.dim", "aten.min.dim")
def _max_dim(out, x, dim, keepdim=False):
    is_max = out.name == "aten.max.dim"
    values = (jnp.max if is_max else jnp.min)(x, axis=dim, keepdims=keepdim)
    index = (jnp.argmax if is_max else jnp.argmin)(x, axis=dim, keepdims=keepdim)
    return [values, index.astype(out.all[1][1])]


@lowers("aten.argmax.default", "aten.argmin.default")
def _argmax(out, x, dim=None, keepdim=False):
    fn = jnp.argmax if out.name == "aten.argmax.default" else jnp.argmin
    if dim is None:
        return fn(x.reshape(-1)).astype(out.dtype).reshape(out.shape)
    return fn(x, axis=dim, keepdims=keepdim).astype(out.dtype)


@lowers("aten.any.dim", "aten.any.dims", "aten.any.default", "aten.all.dim", "aten.all.dims", "aten.all.default")
def _any_all(out, x, dim=None, keepdim=False):
    fn = jnp.any if ".any." in out.name else jnp.all
    return as_dtype(fn(truthy(x), axis=_axes(x, dim), keepdims=keepdim), out.dtype)


@lowers("aten.cumsum.default", "aten.cumprod.default")
def _cumsum(out, x, dim, dtype=None):
    fn = jnp.cumsum if out.name == "aten.cumsum.default" else jnp.cumprod
    return fn(as_dtype(x, out.dtype), axis=dim % max(x.ndim, 1)) if x.ndim else as_dtype(x, out.dtype)


@lowers("aten._softmax.default")
def _softmax(out, x, dim, half_to_float=False):
    return as_dtype(jax.nn.softmax(x, axis=dim), out.dtype)


@lowers("aten._log_softmax.default")
def _log_softmax(out, x, dim, half_to_float=False):
    return as_dtype(jax.nn.log_softmax(x, axis=dim), out.dtype)


@lowers("aten.logsumexp.default")
def _logsumexp(out, x, dim, keepdim=False):
    return jax.nn.logsumexp(x, axis=_axes(x, dim), keepdims=keepdim)


@lowers("aten.linalg_vector_norm.default")
def _vector_norm(out, x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002 (ATen's name)
    magnitude = jnp.abs(as_dtype(x, dtype) if dtype is not None else x).astype(out.dtype)
    axes = _axes(x, dim)
    if ord == float("inf"):
        return jnp.max(magnitude, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(magnitude, axis=axes, keepdims=keepdim)
    if ord == 0:  # the count of nonzeros
        return jnp.sum((magnitude != 0).astype(out.dtype), axis=axes, keepdims=keepdim)
    if ord == 2:  # torch computes sqrt(sum(|x|^2)); weight norm's is this one
        return jnp.sqrt(jnp.sum(magnitude * magnitude, axis=axes, keepdims=keepdim))
    if ord == 1:
        return jnp.sum(magnitude, axis=axes, keepdims=keepdim)
    return jnp.sum(magnitude ** ord, axis=axes, keepdims=keepdim) ** (1 / ord)
