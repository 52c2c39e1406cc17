"""A decoder written in plain JAX as flax and equinox decoders write it (bench/models/kv_decoder.py):
a jitted step that reads a preallocated KV cache and a position and writes the new token's keys and
values into it. Through the jit client one optimization serves every position, and a greedy loop
gives jax.jit's tokens."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bench.models.kv_decoder import KVDecoder
from service.client import jit

pytestmark = pytest.mark.slow  # a whole decoder through the pipeline


def _greedy(decoder, step_fn, params, prompt, new_tokens):
    keys = values = decoder.empty_cache()
    tokens = list(prompt)
    for position in range(len(prompt) + new_tokens - 1):
        logits, keys, values = step_fn(params, keys, values, jnp.int32(tokens[position]), jnp.int32(position))
        if position + 1 >= len(prompt):
            tokens.append(int(jnp.argmax(logits)))
    return tokens


def test_a_jitted_decode_step_is_optimized_once_and_a_greedy_loop_gives_jax_jit_s_tokens():
    decoder, prompt = KVDecoder(), [3, 17, 42, 8]
    params = decoder.params()
    expected = _greedy(decoder, jax.jit(decoder.step), params, prompt, 32)
    optimized, results = jit(decoder.step, weight_argnums=0, time_limit_s=10), []

    def recorded(*args):
        out = optimized(*args)
        results.append(optimized.last_result)
        return out

    assert _greedy(decoder, recorded, params, prompt, 32) == expected
    assert len(expected) == len(prompt) + 32 and len(set(expected[len(prompt):])) > 1  # not one token repeated
    assert len(results) == len(expected) - 1 and len({id(r) for r in results}) == 1  # one optimization
    assert results[0].validation["status"] in ("passed", "identical")
