"""ATen neural-network ops: matrix products, convolutions (transposed too), normalisations,
pooling, upsampling and embedding lookups, each as the JAX primitives that compute it."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from wire.aten import as_dtype, lowers
from wire.index_guard import require_in_range


@lowers("aten.mm.default", "aten.bmm.default")
def _mm(out, a, b):
    return jnp.matmul(a, b)


@lowers("aten.addmm.default", "aten.baddbmm.default")
def _addmm(out, bias, a, b, beta=1, alpha=1):
    product = jnp.matmul(a, b)
    if alpha != 1:
        product = product * as_dtype(alpha, product.dtype)
    if beta == 0:  # torch ignores the bias then, NaNs included
        return product
    return product + (bias if beta == 1 else bias * as_dtype(beta, bias.dtype))


def _spatial_letters(n: int) -> str:
    return "HWDXYZ"[:n]


@lowers("aten.convolution.default")
def _convolution(out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    n = w.ndim - 2
    sp = _spatial_letters(n)
    stride, padding, dilation = (list(v) * n if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    if transposed:
        output_padding = list(output_padding) * n if len(output_padding) == 1 else list(output_padding)
        # a transposed conv is a conv over the stride-dilated input with the kernel flipped and its
        # in/out channels swapped per group
        cin, cout_g, *k = w.shape
        w = w.reshape(groups, cin // groups, cout_g, *k).swapaxes(1, 2).reshape(groups * cout_g, cin // groups, *k)
        w = jnp.flip(w, tuple(range(2, 2 + n)))
        pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op)
                for kk, p, d, op in zip(k, padding, dilation, output_padding)]
        y = lax.conv_general_dilated(x, w, (1,) * n, pads, lhs_dilation=stride, rhs_dilation=dilation,
                                     dimension_numbers=("NC" + sp, "OI" + sp, "NC" + sp),
                                     feature_group_count=groups)
    else:
        y = lax.conv_general_dilated(x, w, stride, [(p, p) for p in padding], rhs_dilation=dilation,
                                     dimension_numbers=("NC" + sp, "OI" + sp, "NC" + sp),
                                     feature_group_count=groups)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return y


def _channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@lowers("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(out, x, weight, bias, running_mean, running_var, momentum, eps):
    y = (x - _channel(running_mean, x.ndim)) * lax.rsqrt(_channel(running_var, x.ndim) + as_dtype(eps, x.dtype))
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    # the saved mean/invstd of inference are empty tensors
    return [y] + [jnp.zeros(spec[0], spec[1]) for spec in out.all[1:]]


@lowers("aten.native_layer_norm.default")
def _layer_norm(out, x, normalized_shape, weight, bias, eps):
    y, mean, rstd = layer_norm(x, len(normalized_shape), weight, bias, eps)
    return [y, mean.reshape(out.all[1][0]), rstd.reshape(out.all[2][0])]


def layer_norm(x, dims: int, weight, bias, eps: float):
    """`x` normalised over its last `dims` axes, then scaled and shifted; with its mean and 1/std."""
    axes = tuple(range(x.ndim - dims, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    rstd = lax.rsqrt(jnp.mean(centered * centered, axis=axes, keepdims=True) + as_dtype(eps, x.dtype))
    y = centered * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


@lowers("aten.native_group_norm.default")
def _group_norm(out, x, weight, bias, n, c, hxw, group, eps):
    grouped = x.reshape(n, group, -1)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    centered = grouped - mean
    rstd = lax.rsqrt(jnp.mean(centered * centered, axis=-1, keepdims=True) + as_dtype(eps, x.dtype))
    y = (centered * rstd).reshape(x.shape)
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    return [y, mean.reshape(n, group), rstd.reshape(n, group)]


class Unavailable:
    """An output a lowering does not compute; selecting it is an unsupported-op error."""

    def __init__(self, what: str):
        self.what = what


def _pool_config(x, kernel, stride, padding, dilation, out_shape):
    n = len(kernel)
    stride = list(stride) if stride else list(kernel)
    stride, padding, dilation = (list(v) * n if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    lead = x.ndim - n
    pads = []
    for i in range(n):
        size, o = x.shape[lead + i], out_shape[lead + i]
        # ceil_mode shows up as one more output window: pad the high side just enough for it
        need = (o - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 - (size + 2 * padding[i])
        pads.append((padding[i], padding[i] + max(0, need)))
    return ((1,) * lead + tuple(kernel), (1,) * lead + tuple(stride), [(0, 0)] * lead + pads,
            (1,) * lead + tuple(dilation))


@lowers("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def _max_pool(out, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    window, strides, pads, dil = _pool_config(x, kernel, stride, padding, dilation, out.shape)
    init = as_dtype(-np.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min, x.dtype)
    y = lax.reduce_window(x, init, lax.max, window, strides, pads, window_dilation=dil)
    return [y, Unavailable(f"the indices output of {out.name}")]


@lowers("aten.avg_pool2d.default", "aten.avg_pool1d.default", "aten.avg_pool3d.default")
def _avg_pool(out, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    window, strides, pads, dil = _pool_config(x, kernel, stride, padding, (1,), out.shape)
    zero = as_dtype(0, x.dtype)
    total = lax.reduce_window(x, zero, lax.add, window, strides, pads)
    if divisor_override:
        return total / as_dtype(divisor_override, x.dtype)
    # the divisor counts the input (and the symmetric padding when count_include_pad), never the
    # extra high-side padding ceil_mode adds
    lead = x.ndim - len(kernel)
    sym = [(0, 0)] * lead + [(p[0], p[0]) for p in pads[lead:]]
    ones = jnp.ones(x.shape, x.dtype)
    if count_include_pad:
        ones = lax.pad(ones, as_dtype(1, x.dtype), [(lo, hi, 0) for lo, hi in sym])
        pads = [(0, hi - shi) for (_, hi), (_, shi) in zip(pads, sym)]
    return total / lax.reduce_window(ones, zero, lax.add, window, strides, pads)


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) averaging weights of adaptive pooling: output i averages floor(i*size/out) up to
    ceil((i+1)*size/out)."""
    m = np.zeros((out, size))
    for i in range(out):
        lo, hi = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


@lowers("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool1d.default")
def _adaptive_avg_pool(out, x, output_size):
    n = len(output_size)
    for i in range(n):
        axis = x.ndim - n + i
        m = jnp.asarray(_adaptive_matrix(x.shape[axis], out.shape[axis]).astype(x.dtype))
        x = jnp.moveaxis(jnp.tensordot(x, m, axes=[[axis], [1]]), -1, axis)
    return x


def _source_index(size: int, out: int, scale: float | None, align_corners: bool) -> np.ndarray:
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        return dst * ((size - 1) / (out - 1) if out > 1 else 0.0)
    ratio = 1.0 / scale if scale else size / out
    return np.maximum((dst + 0.5) * ratio - 0.5, 0.0)


def _scales(x, out, scale_factors, n):
    factors = list(scale_factors) if scale_factors else [None] * n
    return [(x.shape[x.ndim - n + i], out.shape[x.ndim - n + i], factors[i]) for i in range(n)]


@lowers("aten.upsample_nearest2d.vec", "aten.upsample_nearest1d.vec")
def _upsample_nearest(out, x, output_size, scale_factors):
    n = 2 if "2d" in out.name else 1
    for i, (size, o, scale) in enumerate(_scales(x, out, scale_factors, n)):
        ratio = 1.0 / scale if scale else size / o
        index = np.minimum(np.floor(np.arange(o) * np.float32(ratio)).astype(np.int32), size - 1)
        x = jnp.take(x, jnp.asarray(index), axis=x.ndim - n + i)
    return x


@lowers("aten.upsample_bilinear2d.vec", "aten.upsample_linear1d.vec")
def _upsample_linear(out, x, output_size, align_corners, scale_factors):
    n = 2 if "2d" in out.name else 1
    for i, (size, o, scale) in enumerate(_scales(x, out, scale_factors, n)):
        src = _source_index(size, o, scale, align_corners)
        lo = np.minimum(np.floor(src).astype(int), size - 1)
        hi = np.minimum(lo + 1, size - 1)
        frac = src - lo
        m = np.zeros((o, size))
        np.add.at(m, (np.arange(o), lo), 1 - frac)
        np.add.at(m, (np.arange(o), hi), frac)
        axis = x.ndim - n + i
        x = jnp.moveaxis(jnp.tensordot(x, jnp.asarray(m.astype(x.dtype)), axes=[[axis], [1]]), -1, axis)
    return x


@lowers("aten.embedding.default")
def _embedding(out, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    require_in_range(indices, weight.shape[0], negative=False, what=f"reads rows of a {list(weight.shape)} table")
    return jnp.take(weight, indices, axis=0, mode="clip")
