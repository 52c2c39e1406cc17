"""A decoder written in plain JAX as flax and equinox decoders write it: a step that reads a
preallocated KV cache and a position, writes the new token's keys and values into the cache with
`dynamic_update_slice`, and masks the positions not written yet."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class KVDecoder:
    vocab: int = 64
    hidden: int = 32
    heads: int = 4
    layers: int = 2
    length: int = 40  # the cache's positions

    def params(self, seed: int = 0) -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        w = lambda *shape: (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
        h = self.hidden
        layer = lambda: {"qkv": w(h, 3 * h), "out": w(h, h), "up": w(h, 4 * h), "down": w(4 * h, h)}
        # held as JAX arrays, as a JAX model's initializers give them (NumPy arrays would be copied
        # to the device on every call, and may change between calls)
        return jax.tree.map(
            jnp.asarray,
            {"embed": w(self.vocab, h) * 4, "layers": [layer() for _ in range(self.layers)], "head": w(h, self.vocab)},
        )

    def empty_cache(self) -> jax.Array:
        """Keys or values: layers x length x heads x head dim, zeros."""
        return jnp.zeros((self.layers, self.length, self.heads, self.hidden // self.heads), jnp.float32)

    def step(self, params: dict[str, Any], keys: jax.Array, values: jax.Array, token: jax.Array,
             position: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The logits after `token` at `position`, and the caches with its keys and values written
        at `position`; later positions are masked."""
        head_dim = self.hidden // self.heads
        heads = lambda t: t.reshape(self.heads, head_dim)
        x = params["embed"][token]
        visible = jnp.arange(self.length) <= position
        new_keys, new_values = [], []
        for layer, k_cache, v_cache in zip(params["layers"], keys, values):
            q, k, v = jnp.split(_norm(x) @ layer["qkv"], 3)
            k_cache = jax.lax.dynamic_update_slice(k_cache, heads(k)[None], (position, 0, 0))
            v_cache = jax.lax.dynamic_update_slice(v_cache, heads(v)[None], (position, 0, 0))
            scores = jnp.einsum("hd,lhd->hl", heads(q), k_cache) / np.sqrt(head_dim)
            attention = jax.nn.softmax(jnp.where(visible, scores, -jnp.inf), axis=-1)
            x = x + jnp.einsum("hl,lhd->hd", attention, v_cache).reshape(self.hidden) @ layer["out"]
            x = x + jax.nn.gelu(_norm(x) @ layer["up"]) @ layer["down"]
            new_keys.append(k_cache)
            new_values.append(v_cache)
        return _norm(x) @ params["head"], jnp.stack(new_keys), jnp.stack(new_values)


def _norm(x: jax.Array) -> jax.Array:
    return (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)
