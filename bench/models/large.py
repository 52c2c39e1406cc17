"""Benchmark-scale workloads: realistic shapes, too big for the unit tests.

Each entry builds `(fn, args, weight_argnums)`; arrays are seeded float32.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bench.models.zoo import lstm_layer, normal

Workload = tuple[Callable[..., Any], tuple[Any, ...], tuple[int, ...]]


def _layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * gamma + beta


def _encoder_layer(x, p, heads):
    batch, seq, hidden = x.shape
    head_dim = hidden // heads
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    split = lambda t: t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)), axis=-1)
    ctx = (att @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    h = _layer_norm(x + ctx @ p["wo"], p["g1"], p["b1"])
    return _layer_norm(h + jax.nn.gelu(h @ p["w1"] + p["c1"]) @ p["w2"] + p["c2"], p["g2"], p["b2"])


def _encoder_params(rng, hidden, ffn):
    s = 1 / np.sqrt(hidden)
    return {"wq": normal(rng, hidden, hidden, scale=s), "wk": normal(rng, hidden, hidden, scale=s),
            "wv": normal(rng, hidden, hidden, scale=s), "wo": normal(rng, hidden, hidden, scale=s),
            "g1": np.ones(hidden, np.float32), "b1": np.zeros(hidden, np.float32),
            "w1": normal(rng, hidden, ffn, scale=s), "c1": np.zeros(ffn, np.float32),
            "w2": normal(rng, ffn, hidden, scale=1 / np.sqrt(ffn)), "c2": np.zeros(hidden, np.float32),
            "g2": np.ones(hidden, np.float32), "b2": np.zeros(hidden, np.float32)}


def bert_encoder(layers: int, hidden: int = 768, heads: int = 12, seq: int = 128, batch: int = 8) -> Workload:
    """BERT-base encoder stack (hidden 768, 12 heads, seq 128, batch 8)."""
    rng = np.random.default_rng(10 + layers)
    params = [_encoder_params(rng, hidden, 4 * hidden) for _ in range(layers)]

    def fn(x, params):
        for p in params:
            x = _encoder_layer(x, p, heads)
        return x

    return fn, (normal(rng, batch, seq, hidden), params), (1,)


def gpt_decode_step(hidden: int = 768, heads: int = 12, cache_len: int = 256, batch: int = 4) -> Workload:
    """One decoder step: project the new token, attend over a KV cache, update the cache."""
    rng = np.random.default_rng(20)
    head_dim = hidden // heads

    def fn(x, k_cache, v_cache, wq, wk, wv, wo, w1, w2):
        q, k, v = x @ wq, x @ wk, x @ wv
        heads_of = lambda t: t.reshape(batch, 1, heads, head_dim).transpose(0, 2, 1, 3)
        k_all = jnp.concatenate([k_cache, heads_of(k)], axis=2)
        v_all = jnp.concatenate([v_cache, heads_of(v)], axis=2)
        att = jax.nn.softmax(heads_of(q) @ k_all.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)), axis=-1)
        ctx = (att @ v_all).transpose(0, 2, 1, 3).reshape(batch, hidden)
        h = x + ctx @ wo
        return h + jax.nn.gelu(h @ w1) @ w2, k_all, v_all

    s = 1 / np.sqrt(hidden)
    return fn, (normal(rng, batch, hidden), normal(rng, batch, heads, cache_len, head_dim),
                normal(rng, batch, heads, cache_len, head_dim),
                *(normal(rng, hidden, hidden, scale=s) for _ in range(4)),
                normal(rng, hidden, 4 * hidden, scale=s), normal(rng, 4 * hidden, hidden, scale=s / 2)), \
        tuple(range(3, 9))


def grouped_query_attention(hidden: int = 512, q_heads: int = 8, kv_heads: int = 2, seq: int = 64,
                            batch: int = 4) -> Workload:
    """Attention with 8 query heads sharing 2 key/value heads."""
    rng = np.random.default_rng(21)
    head_dim = hidden // q_heads

    def fn(x, wq, wk, wv, wo):
        q = (x @ wq).reshape(batch, seq, q_heads, head_dim).transpose(0, 2, 1, 3)
        k = (x @ wk).reshape(batch, seq, kv_heads, head_dim).transpose(0, 2, 1, 3)
        v = (x @ wv).reshape(batch, seq, kv_heads, head_dim).transpose(0, 2, 1, 3)
        k, v = (jnp.repeat(t, q_heads // kv_heads, axis=1) for t in (k, v))
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)), axis=-1)
        return (att @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden) @ wo

    s = 1 / np.sqrt(hidden)
    kv = kv_heads * head_dim
    return fn, (normal(rng, batch, seq, hidden), normal(rng, hidden, hidden, scale=s),
                normal(rng, hidden, kv, scale=s), normal(rng, hidden, kv, scale=s),
                normal(rng, hidden, hidden, scale=s)), (1, 2, 3, 4)


def mlp_mixer_block(patches: int = 64, channels: int = 256, batch: int = 8) -> Workload:
    """Token mixing (across patches) then channel mixing, each an MLP with a residual."""
    rng = np.random.default_rng(22)

    def fn(x, t1, t2, c1, c2, g, b):
        y = _layer_norm(x, g, b).transpose(0, 2, 1)
        x = x + (jax.nn.gelu(y @ t1) @ t2).transpose(0, 2, 1)
        return x + jax.nn.gelu(_layer_norm(x, g, b) @ c1) @ c2

    return fn, (normal(rng, batch, patches, channels), normal(rng, patches, 2 * patches, scale=0.1),
                normal(rng, 2 * patches, patches, scale=0.1), normal(rng, channels, 4 * channels, scale=0.05),
                normal(rng, 4 * channels, channels, scale=0.05), np.ones(channels, np.float32),
                np.zeros(channels, np.float32)), (1, 2, 3, 4, 5, 6)


def nas_cell(z):
    """The NasRNN cell's combination of its eight gates (`z`: the step's projections, 8 x hidden)."""
    g = jnp.split(z, 8, axis=-1)
    a = jax.nn.sigmoid(g[0]) * jnp.tanh(g[1]) + jax.nn.relu(g[2]) * jax.nn.sigmoid(g[3])
    b = jnp.tanh(g[4] + g[5]) * jax.nn.sigmoid(g[6] * g[7])
    return jnp.tanh(a * b)


def nasrnn(steps: int = 16, batch: int = 16, hidden: int = 256) -> Workload:
    """A NasRNN-style cell unrolled in Python: eight gates from x and h per step, combined."""
    rng = np.random.default_rng(23)

    def fn(xs, wx, wh):
        h = jnp.zeros((batch, hidden), jnp.float32)
        for t in range(steps):
            h = nas_cell(xs[t] @ wx + h @ wh)
        return h

    return fn, (normal(rng, steps, batch, hidden), normal(rng, hidden, 8 * hidden, scale=0.05),
                normal(rng, hidden, 8 * hidden, scale=0.05)), (1, 2)


def resnext_block(batch: int = 8, size: int = 28, channels: int = 128, groups: int = 32) -> Workload:
    """1x1 reduce, 3x3 grouped conv, 1x1 expand, residual."""
    rng = np.random.default_rng(24)
    conv = lambda a, k, g=1: lax.conv_general_dilated(a, k, (1, 1), "SAME", feature_group_count=g,
                                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def fn(x, k1, k2, k3):
        h = jax.nn.relu(conv(x, k1))
        h = jax.nn.relu(conv(h, k2, groups))
        return jax.nn.relu(x + conv(h, k3))

    return fn, (normal(rng, batch, size, size, channels), normal(rng, 1, 1, channels, channels, scale=0.1),
                normal(rng, 3, 3, channels // groups, channels, scale=0.1),
                normal(rng, 1, 1, channels, channels, scale=0.1)), (1, 2, 3)


def matmul_chain(n: int) -> Workload:
    """A chain of n matmuls with uneven dims, evaluated left to right."""
    rng = np.random.default_rng(30 + n)
    dims = [int(d) for d in rng.choice([8, 16, 64, 256, 1024], size=n + 1)]

    def fn(*ms):
        out = ms[0]
        for m in ms[1:]:
            out = out @ m
        return out

    return fn, tuple(normal(rng, a, b, scale=1 / np.sqrt(a)) for a, b in zip(dims, dims[1:])), ()


def lstm_scan(steps: int = 32, batch: int = 16, n_in: int = 256, n_hid: int = 512) -> Workload:
    """An LSTM layer as `lax.scan` over time (the loop stays a loop: the body is optimized once)."""
    rng = np.random.default_rng(25)
    args = (normal(rng, steps, batch, n_in), normal(rng, n_in, 4 * n_hid, scale=1 / np.sqrt(n_in)),
            normal(rng, n_hid, 4 * n_hid, scale=1 / np.sqrt(n_hid)), np.zeros(4 * n_hid, np.float32))
    return lstm_layer(batch, n_hid), args, (1, 2, 3)


def mlp_train_step(batch: int = 128, dims: tuple[int, ...] = (784, 1024, 1024, 10)) -> Workload:
    """One SGD step of an MLP classifier: forward, softmax cross-entropy, backward, update."""
    rng = np.random.default_rng(26)

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        logits = h @ params[-1][0] + params[-1][1]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def fn(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), value

    params = [(normal(rng, a, b, scale=1 / np.sqrt(a)), np.zeros(b, np.float32)) for a, b in zip(dims, dims[1:])]
    labels = np.eye(dims[-1], dtype=np.float32)[rng.integers(0, dims[-1], batch)]
    return fn, (params, normal(rng, batch, dims[0]), labels), (0,)


LARGE: dict[str, Callable[[], Workload]] = {
    "bert_1_layer": lambda: bert_encoder(1),
    "bert_12_layers": lambda: bert_encoder(12),
    "gpt_decode_step": gpt_decode_step,
    "grouped_query_attention": grouped_query_attention,
    "mlp_mixer_block": mlp_mixer_block,
    "nasrnn": nasrnn,
    "resnext_block": resnext_block,
    "lstm_scan_large": lstm_scan,
    "mlp_train_step_large": mlp_train_step,
    "matmul_chain_12": lambda: matmul_chain(12),
    "matmul_chain_80": lambda: matmul_chain(80),
}
