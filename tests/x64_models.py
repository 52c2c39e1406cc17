"""Programs as scientific JAX code and PyTorch-exported models look: captured under JAX's x64 mode,
with float64 values and int64 indices. The zoo's models widened to float64, and three written for
these tests (a GPT decode step indexing its KV cache by an int64 position, an LSTM whose scan
counts in int64, gathers and sorts by int64 indices), each with a rewrite to find."""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from wire.capture import capture

Workload = tuple[Callable[..., Any], tuple[Any, ...], tuple[int, ...]]
# The zoo's models whose code computes in the dtype of its inputs (lstm_scan's carry is float32 by hand).
WIDENABLE_ZOO = ("mlp2", "transformer_layer", "convnet", "mlp_train_step", "matmul_chain", "rnn_unrolled")


def gpt_decode_step(x, position, wq, wk, wv, wo, k_cache, v_cache, embedding, tokens):
    """One token: embedding lookup, the KV cache written at `position`, a causal mask by position."""
    h = embedding[tokens] + x
    q, k, v = h @ wq, h @ wk, h @ wv
    k_cache = lax.dynamic_update_slice(k_cache, k[:, None, :], (0, position, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v[:, None, :], (0, position, 0))
    scores = jnp.einsum("bd,btd->bt", q, k_cache) / jnp.sqrt(q.shape[-1])
    scores = jnp.where((jnp.arange(k_cache.shape[1]) <= position)[None, :], scores, -1e9)
    out = jnp.einsum("bt,btd->bd", jax.nn.softmax(scores, axis=-1), v_cache) @ wo
    return out, jnp.argmax(out, axis=-1), k_cache, v_cache


def lstm(xs, wx, wh, b):
    """An LSTM over `xs` (steps first) and the running sum of its outputs."""
    def step(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh + b, 4, -1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((xs.shape[1], wh.shape[0]), xs.dtype)
    _, hs = lax.scan(step, (zeros, zeros), xs)
    return hs, jnp.cumsum(hs.sum(-1), axis=0)


def gather_and_sort(x, indices, w1, w2):
    """Rows gathered by int64 indices through two projections, then top-k, sort and one-hot."""
    y = (jnp.take(x, indices, axis=0) @ w1) @ w2
    values, positions = lax.top_k(y, 3)
    one_hot = jax.nn.one_hot(jnp.argmax(y, -1), y.shape[-1], dtype=y.dtype)
    return values, positions, jnp.sort(y, axis=-1), one_hot * y, (indices * 2 + 1) % 7


def _written_here(rng: np.random.Generator) -> dict[str, Workload]:
    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape) * 0.2

    d = 32
    return {
        "gpt_decode_step": (gpt_decode_step, (normal(2, d), np.int64(3), normal(d, d), normal(d, d), normal(d, d),
                                              normal(d, d), normal(2, 8, d), normal(2, 8, d), normal(50, d),
                                              np.array([4, 7], np.int64)), (2, 3, 4, 5, 8)),
        "lstm": (lstm, (normal(6, 3, 16), normal(16, 4 * d), normal(d, 4 * d), normal(4 * d)), (1, 2, 3)),
        "gather_and_sort": (gather_and_sort, (normal(10, 256), np.array([1, 3, 5, 9], np.int64), normal(256, 256),
                                              normal(256, 8)), (2, 3)),
    }


def _widened(value: Any) -> Any:
    array = np.asarray(value)
    return array.astype(np.float64) if array.dtype == np.float32 else array


def x64_workloads() -> dict[str, Workload]:
    """Every workload above, its float arguments float64 (seeded)."""
    zoo = {name: (*ZOO[name](), WEIGHT_ARGNUMS[name]) for name in WIDENABLE_ZOO}
    workloads = {**zoo, **_written_here(np.random.default_rng(0))}
    return {name: (fn, jax.tree.map(_widened, args), weights) for name, (fn, args, weights) in workloads.items()}


def capture_x64(workload: Workload) -> dict[str, Any]:
    """The workload's wire program, captured as JAX traces it with x64 on."""
    fn, args, weights = workload
    with jax.enable_x64(True):
        return capture(fn, *args, weight_argnums=weights)
