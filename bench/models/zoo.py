"""Small realistic models with seeded example inputs, shared by benchmarks and end-to-end tests.

Each entry builds `(fn, args)`; `WEIGHT_ARGNUMS` says which positional args are model weights."""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Model = tuple[Callable[..., Any], tuple[Any, ...]]


def normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    """Seeded float32 N(0, scale^2) values of `shape`."""
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp2() -> Model:
    rng = np.random.default_rng(0)

    def fn(x, w1, b1, w2, b2):
        return jax.nn.relu(x @ w1 + b1) @ w2 + b2

    return fn, (normal(rng, 32, 128), normal(rng, 128, 256, scale=0.1), normal(rng, 256),
                normal(rng, 256, 10, scale=0.1), normal(rng, 10))


def _layernorm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * gamma + beta


def transformer_layer() -> Model:
    rng = np.random.default_rng(1)
    batch, seq, hidden, heads, ffn = 2, 16, 64, 4, 256
    head_dim = hidden // heads

    def fn(x, wq, wk, wv, wo, g1, b1, w1, c1, w2, c2, g2, b2):
        # Three separate projections of the same input: the optimizer's same-input merge target.
        q, k, v = x @ wq, x @ wk, x @ wv
        split = lambda t: t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
        q, k, v = split(q), split(k), split(v)
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)), axis=-1)
        ctx = (att @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        h = _layernorm(x + ctx @ wo, g1, b1)
        return _layernorm(h + jax.nn.gelu(h @ w1 + c1) @ w2 + c2, g2, b2)

    s = 1 / np.sqrt(hidden)
    return fn, (normal(rng, batch, seq, hidden),
                *(normal(rng, hidden, hidden, scale=s) for _ in range(4)),
                np.ones(hidden, np.float32), np.zeros(hidden, np.float32),
                normal(rng, hidden, ffn, scale=s), np.zeros(ffn, np.float32),
                normal(rng, ffn, hidden, scale=1 / np.sqrt(ffn)), np.zeros(hidden, np.float32),
                np.ones(hidden, np.float32), np.zeros(hidden, np.float32))


def convnet() -> Model:
    rng = np.random.default_rng(2)

    def fn(x, k1, k2, w, b):
        conv = lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(conv(jax.nn.relu(conv(x, k1)), k2))
        return h.mean(axis=(1, 2)) @ w + b

    return fn, (normal(rng, 4, 16, 16, 3), normal(rng, 3, 3, 3, 8, scale=0.3),
                normal(rng, 3, 3, 8, 16, scale=0.2), normal(rng, 16, 10, scale=0.3),
                normal(rng, 10))


def lstm_update(z, c):
    """An LSTM cell's state update from its four gates' projections `z`: (h, c)."""
    i, f, g, o = jnp.split(z, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c), c


def lstm_layer(batch: int, n_hid: int):
    """An LSTM layer as `lax.scan` over time: fn(xs, w_x, w_h, b) -> (hs, h, c)."""

    def fn(xs, w_x, w_h, b):
        def cell(carry, x):
            h, c = carry
            h, c = lstm_update(x @ w_x + h @ w_h + b, c)
            return (h, c), h

        zeros = jnp.zeros((batch, n_hid), jnp.float32)
        (h, c), hs = lax.scan(cell, (zeros, zeros), xs)
        return hs, h, c

    return fn


def lstm_scan() -> Model:
    rng = np.random.default_rng(3)
    steps, batch, n_in, n_hid = 8, 4, 16, 32
    return lstm_layer(batch, n_hid), (normal(rng, steps, batch, n_in), normal(rng, n_in, 4 * n_hid, scale=0.25),
                normal(rng, n_hid, 4 * n_hid, scale=0.18), normal(rng, 4 * n_hid, scale=0.1))


def mlp_train_step() -> Model:
    rng = np.random.default_rng(4)

    def loss(params, x, y):
        (w1, b1), (w2, b2) = params
        logits = jax.nn.relu(x @ w1 + b1) @ w2 + b2
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def fn(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value

    params = ((normal(rng, 20, 64, scale=0.2), np.zeros(64, np.float32)),
              (normal(rng, 64, 5, scale=0.1), np.zeros(5, np.float32)))
    labels = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 16)]
    return fn, (params, normal(rng, 16, 20), labels)


def matmul_chain() -> Model:
    rng = np.random.default_rng(5)
    dims = [8, 512, 16, 512, 8, 256, 32, 128]

    def fn(*ms):
        out = ms[0]
        for m in ms[1:]:  # left-to-right: far from the cheapest parenthesisation
            out = out @ m
        return out

    return fn, tuple(normal(rng, a, b, scale=1 / np.sqrt(a)) for a, b in zip(dims, dims[1:]))


def rnn_unrolled() -> Model:
    rng = np.random.default_rng(6)
    steps, batch, n_in, n_hid = 8, 4, 16, 32

    def fn(xs, w_x, w_h, b):
        h = jnp.zeros((batch, n_hid), jnp.float32)
        for t in range(steps):  # unrolled in Python, as NasRNN-style cells are
            h = jnp.tanh(xs[t] @ w_x + h @ w_h + b)
        return h

    return fn, (normal(rng, steps, batch, n_in), normal(rng, n_in, n_hid, scale=0.25),
                normal(rng, n_hid, n_hid, scale=0.15), normal(rng, n_hid, scale=0.1))


ZOO: dict[str, Callable[[], Model]] = {
    f.__name__: f for f in (mlp2, transformer_layer, convnet, lstm_scan, mlp_train_step,
                            matmul_chain, rnn_unrolled)}

WEIGHT_ARGNUMS: dict[str, tuple[int, ...]] = {
    "mlp2": (1, 2, 3, 4),
    "transformer_layer": tuple(range(1, 13)),
    "convnet": (1, 2, 3, 4),
    "lstm_scan": (1, 2, 3),
    "mlp_train_step": (0,),
    "matmul_chain": tuple(range(1, 7)),
    "rnn_unrolled": (1, 2, 3),
}
