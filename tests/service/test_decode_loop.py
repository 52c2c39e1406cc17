"""A decoder written in plain JAX as flax and equinox decoders write it: a jitted step that reads a
preallocated KV cache and a position and writes the new token's keys and values into it. Through
the jit client one optimization serves every position, and a greedy loop gives jax.jit's tokens."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from service.client import jit

pytestmark = pytest.mark.slow  # a whole decoder through the pipeline

VOCAB, HIDDEN, HEADS, LAYERS, LENGTH = 64, 32, 4, 2, 40


def _params():
    rng = np.random.default_rng(0)
    w = lambda *shape: (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
    layer = lambda: {"qkv": w(HIDDEN, 3 * HIDDEN), "out": w(HIDDEN, HIDDEN), "up": w(HIDDEN, 4 * HIDDEN),
                     "down": w(4 * HIDDEN, HIDDEN)}
    return {"embed": w(VOCAB, HIDDEN) * 4, "layers": [layer() for _ in range(LAYERS)], "head": w(HIDDEN, VOCAB)}


def _norm(x):
    return (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)


def step(params, keys, values, token, position):
    """The logits after `token` at `position`, and the caches (layers x LENGTH x HEADS x head dim)
    with its keys and values written at `position`; later positions are masked."""
    x = params["embed"][token]
    visible = jnp.arange(LENGTH) <= position
    new_keys, new_values = [], []
    for layer, k_cache, v_cache in zip(params["layers"], keys, values):
        q, k, v = jnp.split(_norm(x) @ layer["qkv"], 3)
        heads = lambda t: t.reshape(HEADS, HIDDEN // HEADS)
        k_cache = jax.lax.dynamic_update_slice(k_cache, heads(k)[None], (position, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, heads(v)[None], (position, 0, 0))
        scores = jnp.einsum("hd,lhd->hl", heads(q), k_cache) / np.sqrt(HIDDEN // HEADS)
        attention = jax.nn.softmax(jnp.where(visible, scores, -jnp.inf), axis=-1)
        x = x + jnp.einsum("hl,lhd->hd", attention, v_cache).reshape(HIDDEN) @ layer["out"]
        x = x + jax.nn.gelu(_norm(x) @ layer["up"]) @ layer["down"]
        new_keys.append(k_cache)
        new_values.append(v_cache)
    return _norm(x) @ params["head"], jnp.stack(new_keys), jnp.stack(new_values)


def _greedy(step_fn, params, prompt, new_tokens):
    keys = values = jnp.zeros((LAYERS, LENGTH, HEADS, HIDDEN // HEADS), jnp.float32)
    tokens = list(prompt)
    for position in range(len(prompt) + new_tokens - 1):
        logits, keys, values = step_fn(params, keys, values, jnp.int32(tokens[position]), jnp.int32(position))
        if position + 1 >= len(prompt):
            tokens.append(int(jnp.argmax(logits)))
    return tokens


def test_a_jitted_decode_step_is_optimized_once_and_a_greedy_loop_gives_jax_jit_s_tokens():
    params, prompt = _params(), [3, 17, 42, 8]
    expected = _greedy(jax.jit(step), params, prompt, 32)
    optimized, results = jit(step, weight_argnums=0, time_limit_s=10), []

    def recorded(*args):
        out = optimized(*args)
        results.append(optimized.last_result)
        return out

    assert _greedy(recorded, params, prompt, 32) == expected
    assert len(expected) == len(prompt) + 32 and len(set(expected[len(prompt):])) > 1  # not one token repeated
    assert len(results) == len(expected) - 1 and len({id(r) for r in results}) == 1  # one optimization
    assert results[0].validation["status"] in ("passed", "identical")
