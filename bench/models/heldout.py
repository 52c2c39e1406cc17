"""Workloads no estimate was ever tuned on: the check of `cpu-host` against this CPU's clock
(`python -m bench.cpu_speed --heldout`). The same kinds as the zoo (chains of varied widths,
unrolled and scanned RNNs, an encoder, a convnet, an MLP train step), written afresh at other
shapes and in other styles (pre-norm, RMSNorm, SwiGLU, a GRU, an Elman scan, pooling). Each entry
builds `(fn, args, weight_argnums)`; arrays are seeded float32.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bench.models.large import Workload
from bench.models.zoo import normal


def chain_wide() -> Workload:
    """x @ A @ B @ C with a wide middle: (64x512)(512x2048)(2048x64)(64x1024)."""
    rng = np.random.default_rng(101)
    dims = (64, 512, 2048, 64, 1024)
    mats = [normal(rng, a, b, scale=1 / np.sqrt(a)) for a, b in zip(dims, dims[1:])]
    return (lambda x, a, b, c: x @ a @ b @ c), tuple(mats), (1, 2, 3)


def chain_thin() -> Workload:
    """One row through four 1024-wide layers: a GEMV chain, its weights read once each."""
    rng = np.random.default_rng(102)
    x = normal(rng, 1, 1024)
    ws = [normal(rng, 1024, 1024, scale=1 / 32) for _ in range(4)]
    return (lambda x, *ws: x @ ws[0] @ ws[1] @ ws[2] @ ws[3]), (x, *ws), (1, 2, 3, 4)


def chain_outer() -> Workload:
    """(A @ B) @ (C @ D) written with two rank-16 products that an order change shrinks."""
    rng = np.random.default_rng(103)
    a, b, c, d = (normal(rng, *s, scale=0.1) for s in ((384, 16), (16, 384), (384, 16), (16, 640)))
    return (lambda a, b, c, d: (a @ b) @ (c @ d)), (a, b, c, d), ()


def gru_unrolled() -> Workload:
    """A GRU cell unrolled over 12 steps, batch 4, hidden 64, input 32."""
    rng = np.random.default_rng(104)
    steps, batch, n_in, n_hid = 12, 4, 32, 64
    xs = normal(rng, steps, batch, n_in)
    wx, wh = normal(rng, n_in, 3 * n_hid, scale=0.2), normal(rng, n_hid, 3 * n_hid, scale=0.1)
    b = np.zeros(3 * n_hid, np.float32)

    def fn(xs, wx, wh, b):
        h = jnp.zeros((batch, n_hid), jnp.float32)
        for t in range(steps):
            gx, gh = xs[t] @ wx + b, h @ wh
            r = jax.nn.sigmoid(gx[:, :n_hid] + gh[:, :n_hid])
            z = jax.nn.sigmoid(gx[:, n_hid:2 * n_hid] + gh[:, n_hid:2 * n_hid])
            n = jnp.tanh(gx[:, 2 * n_hid:] + r * gh[:, 2 * n_hid:])
            h = (1 - z) * n + z * h
        return h

    return fn, (xs, wx, wh, b), (1, 2, 3)


def elman_scan() -> Workload:
    """An Elman RNN as lax.scan: 64 steps, batch 16, hidden 256, input 128."""
    rng = np.random.default_rng(105)
    xs = normal(rng, 64, 16, 128)
    wx, wh = normal(rng, 128, 256, scale=0.08), normal(rng, 256, 256, scale=0.06)

    def fn(xs, wx, wh):
        step = lambda h, x: (jnp.tanh(x @ wx + h @ wh),) * 2
        return lax.scan(step, jnp.zeros((16, 256), jnp.float32), xs)[1]

    return fn, (xs, wx, wh), (1, 2)


def prenorm_encoder() -> Workload:
    """Two pre-norm layers (RMSNorm, 4-head attention, SwiGLU), batch 2, seq 96, hidden 192."""
    rng = np.random.default_rng(106)
    batch, seq, hidden, heads, ffn = 2, 96, 192, 4, 512
    s = 1 / np.sqrt(hidden)
    layers = [{"wqkv": normal(rng, hidden, 3 * hidden, scale=s), "wo": normal(rng, hidden, hidden, scale=s),
               "wg": normal(rng, hidden, ffn, scale=s), "wu": normal(rng, hidden, ffn, scale=s),
               "wd": normal(rng, ffn, hidden, scale=1 / np.sqrt(ffn)),
               "n1": np.ones(hidden, np.float32), "n2": np.ones(hidden, np.float32)} for _ in range(2)]
    rms = lambda x, g: x * lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g

    def fn(x, layers):
        for p in layers:
            q, k, v = jnp.split(rms(x, p["n1"]) @ p["wqkv"], 3, axis=-1)
            heads_of = lambda t: t.reshape(batch, seq, heads, hidden // heads)
            att = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", heads_of(q), heads_of(k)) / 6.93, axis=-1)
            x = x + jnp.einsum("bhqk,bkhd->bqhd", att, heads_of(v)).reshape(batch, seq, hidden) @ p["wo"]
            y = rms(x, p["n2"])
            x = x + (jax.nn.silu(y @ p["wg"]) * (y @ p["wu"])) @ p["wd"]
        return x

    return fn, (normal(rng, batch, seq, hidden), layers), (1,)


def pooled_convnet() -> Workload:
    """Two 3x3 convolutions with ReLU and a 2x2 average pool between, NHWC 4x32x32x8 -> 32 features."""
    rng = np.random.default_rng(107)
    x = normal(rng, 4, 32, 32, 8)
    k1, k2 = normal(rng, 3, 3, 8, 16, scale=0.1), normal(rng, 3, 3, 16, 32, scale=0.08)
    conv = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def fn(x, k1, k2):
        h = jax.nn.relu(conv(x, k1))
        h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
        return jax.nn.relu(conv(h, k2)).mean(axis=(1, 2))

    return fn, (x, k1, k2), (1, 2)


def mlp_sgd_step() -> Workload:
    """One SGD step of a 3-layer tanh MLP on a squared loss, batch 48, widths 96-160-160-10."""
    rng = np.random.default_rng(108)
    widths = (96, 160, 160, 10)
    params = [normal(rng, a, b, scale=1 / np.sqrt(a)) for a, b in zip(widths, widths[1:])]
    x, y = normal(rng, 48, 96), normal(rng, 48, 10)

    def loss(params, x, y):
        h = x
        for w in params[:-1]:
            h = jnp.tanh(h @ w)
        return ((h @ params[-1] - y) ** 2).mean()

    def fn(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return [w - 0.05 * g for w, g in zip(params, grads)]

    return fn, (params, x, y), ()


HELDOUT: dict[str, Callable[[], Workload]] = {
    "chain_wide": chain_wide, "chain_thin": chain_thin, "chain_outer": chain_outer, "gru_unrolled": gru_unrolled,
    "elman_scan": elman_scan, "prenorm_encoder": prenorm_encoder, "pooled_convnet": pooled_convnet,
    "mlp_sgd_step": mlp_sgd_step,
}
