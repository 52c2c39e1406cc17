"""Transformer encoders written three ways, as users write them: plain jax.numpy (weights as
arguments), flax.linen layers and equinox layers (vmapped over the batch), so the speed bench
measures programs of styles the optimizer was not tuned on.

Each builder returns `(fn, args, weight_argnums)`; weights are abstract (`jax.ShapeDtypeStruct`),
so a 12-layer encoder with hidden 1024 costs nothing to build.
"""
from __future__ import annotations

from typing import Any, Callable

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp

from bench.models.large import Workload, _encoder_layer

STYLES = ("plain", "flax", "equinox")


def _abstract(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def plain_encoder(layers: int, hidden: int, heads: int, seq: int, batch: int) -> Workload:
    """The bench's BERT layer (bench/models/large.py) in jax.numpy, weights passed as arguments."""
    f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    layer = {"wq": f32(hidden, hidden), "wk": f32(hidden, hidden), "wv": f32(hidden, hidden),
             "wo": f32(hidden, hidden), "g1": f32(hidden), "b1": f32(hidden), "w1": f32(hidden, 4 * hidden),
             "c1": f32(4 * hidden), "w2": f32(4 * hidden, hidden), "c2": f32(hidden), "g2": f32(hidden),
             "b2": f32(hidden)}

    def fn(x, params):
        for p in params:
            x = _encoder_layer(x, p, heads)
        return x

    return fn, (f32(batch, seq, hidden), [dict(layer) for _ in range(layers)]), (1,)


class _FlaxLayer(nn.Module):
    heads: int
    hidden: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(x, x))
        return nn.LayerNorm()(h + nn.Dense(self.hidden)(nn.gelu(nn.Dense(4 * self.hidden)(h))))


class _FlaxEncoder(nn.Module):
    layers: int
    heads: int
    hidden: int

    @nn.compact
    def __call__(self, x):
        for _ in range(self.layers):
            x = _FlaxLayer(self.heads, self.hidden)(x)
        return x


def flax_encoder(layers: int, hidden: int, heads: int, seq: int, batch: int) -> Workload:
    """Post-norm encoder layers from flax.linen's MultiHeadDotProductAttention, Dense and LayerNorm."""
    model = _FlaxEncoder(layers, heads, hidden)
    x = jax.ShapeDtypeStruct((batch, seq, hidden), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)
    return (lambda x, params: model.apply(params, x)), (x, params), (1,)


class _EquinoxLayer(eqx.Module):
    attention: eqx.nn.MultiheadAttention
    norm1: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear
    norm2: eqx.nn.LayerNorm

    def __init__(self, hidden: int, heads: int, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        self.attention = eqx.nn.MultiheadAttention(heads, hidden, key=k1)
        self.norm1, self.norm2 = eqx.nn.LayerNorm(hidden), eqx.nn.LayerNorm(hidden)
        self.up, self.down = eqx.nn.Linear(hidden, 4 * hidden, key=k2), eqx.nn.Linear(4 * hidden, hidden, key=k3)

    def __call__(self, x):  # one example: (seq, hidden)
        h = jax.vmap(self.norm1)(x + self.attention(x, x, x))
        return jax.vmap(self.norm2)(h + jax.vmap(lambda t: self.down(jax.nn.gelu(self.up(t))))(h))


def equinox_encoder(layers: int, hidden: int, heads: int, seq: int, batch: int) -> Workload:
    """Encoder layers from equinox's MultiheadAttention, Linear and LayerNorm, vmapped over the batch."""
    def build() -> list[_EquinoxLayer]:
        return [_EquinoxLayer(hidden, heads, k) for k in jax.random.split(jax.random.key(0), layers)]

    abstract = eqx.filter_eval_shape(build)
    is_weight = lambda leaf: isinstance(leaf, jax.ShapeDtypeStruct)
    params, static = eqx.partition(abstract, is_weight)

    def fn(x, params):
        for layer in eqx.combine(params, static):
            x = jax.vmap(layer)(x)
        return x

    return fn, (jax.ShapeDtypeStruct((batch, seq, hidden), jnp.float32), params), (1,)


BUILDERS: dict[str, Callable[..., Workload]] = {"plain": plain_encoder, "flax": flax_encoder,
                                                "equinox": equinox_encoder}


def encoder(style: str, layers: int, hidden: int, heads: int, seq: int, batch: int = 8) -> Workload:
    return BUILDERS[style](layers, hidden, heads, seq, batch)
