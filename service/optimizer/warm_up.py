"""A worker's first optimization, run before it takes requests: the first JAX traces and XLA
compiles of the pipeline's own helpers, egglog's first rulesets and the cost tables are paid at
start, so a server's first request is as fast as its tenth."""
from __future__ import annotations

import gc

import jax
import jax.numpy as jnp

from wire.capture import capture
from wire.json_types import Program


def _tiny_layer(x, wq, wk, wv, w1, w2, a, b):
    """A little of everything the optimizer handles: attention, layer norm, a GELU MLP, a chain."""
    q, k, v = x @ wq, x @ wk, x @ wv
    h = x + jax.nn.softmax(q @ k.T / 4.0, axis=-1) @ v
    h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)
    return h + jax.nn.gelu(h @ w1) @ w2 + jnp.tanh(x @ a @ b @ wq)


def warm_up_program() -> Program:
    f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    square = f32(16, 16)
    return capture(_tiny_layer, f32(8, 16), square, square, square, f32(16, 32), f32(32, 16), f32(16, 4),
                   f32(4, 16), weight_argnums=(1, 2, 3, 4, 5, 6, 7))


def warm_up(optimize) -> None:
    """Run `optimize` (the pipeline's) twice on the warm-up program; the answers are discarded.
    The first run's loads close into the e-graphs a thread keeps (rewrites/egraphs.py); a kept
    e-graph's first load pays one-time costs inside egglog (a worker's first request took 1.5x
    its tenth), and the second run pays them."""
    program = warm_up_program()
    for _ in range(2):
        optimize(program, None, None)


def settle_start_up_heap() -> None:
    """Collect once, then move what start-up made out of the collector's sight: the imports, the
    kept e-graphs and JAX's caches live as long as the worker, and a full collection walking
    them cost 0.17 s, once every few requests, inside whichever request it fell in."""
    gc.collect()
    gc.freeze()
