"""`flash_attention`: the fused key-blocked attention a returned program may carry, one Pallas
kernel computing softmax(E(Q K^T)) @ V over blocks of keys with a running row max, sum and
output (the online softmax), so no score-sized value leaves the kernel.

Operands are canonical: q [B, Nq, D], k [B / key_group, Nk, D], v [B / value_group, Nk, W], then the score transform's
extra operands, each [B or 1, Nq or 1, Nk or 1] (a bias, a padding mask's row, a scalar), then,
with `zero_rows`, a [B or 1, Nq, 1] boolean that keeps a row's output where true and zeroes it
elsewhere (torch's rows whose keys are all masked). E is a nested program from one block of
scores [query_block, key_block], the block's query and key positions (int32, the same shape: a
causal mask is computed per block) and the extras' blocks (broadcast to it), to the transformed
scores.
Off a GPU the kernel runs in Pallas's interpret mode: correct, not fast.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.experimental.pallas as pl
import jax.numpy as jnp
from jax import lax
from jax.extend.core import jaxpr_as_fun

NAME = "flash_attention"


def _padded(x: jax.Array, axis: int, multiple: int) -> jax.Array:
    """`x` with its `axis` padded by zeros to a multiple of `multiple` (a size-1 axis broadcasts, so stays)."""
    size = x.shape[axis]
    if size == 1 or size % multiple == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, -size % multiple)
    return jnp.pad(x, widths)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *extras: jax.Array, score_transform: Any,
                    query_block: int, key_block: int, zero_rows: bool, scores_dtype: Any, out_dtype: Any,
                    key_group: int = 1, value_group: int = 1) -> jax.Array:
    """softmax(E(q k^T)) @ v per batch, E = `score_transform` (a closed jaxpr) of each score block
    and the extras' blocks; see the module docstring for the operands. Batch row b reads row
    b // key_group of k and b // value_group of v (GQA's shared K/V heads, never repeated)."""
    batch, queries, depth = q.shape
    keys, width = k.shape[1], v.shape[2]
    bq, bk = min(query_block, queries), min(key_block, keys)
    accumulate = jnp.promote_types(jnp.promote_types(q.dtype, v.dtype), jnp.float32)
    q, k, v, keep = _padded(q, 1, bq), _padded(k, 1, bk), _padded(v, 1, bk), None
    extras = [_padded(_padded(x, 1, bq), 2, bk) for x in extras]
    if zero_rows:
        *extras, keep = extras
    transform = jaxpr_as_fun(score_transform)
    key_blocks = k.shape[1] // bk

    def kernel(q_ref, k_ref, v_ref, *refs):
        *extra_refs, out_ref = refs
        query = q_ref[...]
        query_positions = pl.program_id(1) * bq + lax.broadcasted_iota(jnp.int32, (query.shape[0], bk), 0)

        def step(j, carry):
            row_max, row_sum, acc = carry
            start = j * bk
            block = pl.ds(start, bk)
            scores = lax.dot_general(query, k_ref[block, :], (((1,), (1,)), ((), ())),
                                     preferred_element_type=accumulate)
            blocks = [ref[:, block] if ref.shape[1] > 1 else ref[...] for ref in extra_refs[:len(extras)]]
            blocks = [jnp.broadcast_to(x, (query.shape[0], bk)) for x in blocks]
            key_positions = start + lax.broadcasted_iota(jnp.int32, scores.shape, 1)
            e = transform(scores.astype(scores_dtype), query_positions, key_positions, *blocks)[0].astype(accumulate)
            e = jnp.where(key_positions < keys, e, -jnp.inf)  # the padding past the last key
            new_max = jnp.maximum(row_max, e.max(axis=1))
            # a row with no key seen yet keeps max -inf: shift by 0 so exp gives 0, not nan
            shift = jnp.where(new_max == -jnp.inf, 0, new_max)
            p = jnp.exp(e - shift[:, None])
            rescale = jnp.exp(row_max - shift)
            mixed = lax.dot_general(p.astype(v_ref.dtype), v_ref[block, :], (((1,), (0,)), ((), ())),
                                    preferred_element_type=accumulate)
            return new_max, rescale * row_sum + p.sum(axis=1), rescale[:, None] * acc + mixed

        rows = query.shape[0]
        init = (jnp.full((rows,), -jnp.inf, accumulate), jnp.zeros((rows,), accumulate),
                jnp.zeros((rows, width), accumulate))
        _, row_sum, acc = lax.fori_loop(0, key_blocks, step, init)
        out = acc / row_sum[:, None]
        if zero_rows:
            out = jnp.where(extra_refs[-1][...], out, 0)
        out_ref[...] = out.astype(out_ref.dtype)

    def extra_spec(x: jax.Array) -> pl.BlockSpec:
        rows = bq if x.shape[1] > 1 else 1
        batched, per_row = x.shape[0] > 1, x.shape[1] > 1
        return pl.BlockSpec((pl.squeezed, rows, x.shape[2]),
                            lambda b, i: (b if batched else 0, i if per_row else 0, 0))

    operands = [*extras, *([keep] if zero_rows else [])]
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((batch, q.shape[1], width), out_dtype),
        grid=(batch, q.shape[1] // bq),
        in_specs=[pl.BlockSpec((pl.squeezed, bq, depth), lambda b, i: (b, i, 0)),
                  pl.BlockSpec((pl.squeezed, k.shape[1], depth), lambda b, i: (b // key_group, 0, 0)),
                  pl.BlockSpec((pl.squeezed, v.shape[1], width), lambda b, i: (b // value_group, 0, 0)),
                  *map(extra_spec, operands)],
        out_specs=pl.BlockSpec((pl.squeezed, bq, width), lambda b, i: (b, i, 0)),
        interpret=jax.default_backend() != "gpu",
    )(q, k, v, *operands)
    return out[:, :queries]


class FlashAttention:
    """The op as the wire executor binds a primitive: `bind(*operands, **params)`."""

    name = NAME
    multiple_results = False

    @staticmethod
    def bind(q, k, v, *extras, score_transform, query_block, key_block, zero_rows=False, out_dtype=None,
             key_group=1, value_group=1):
        groups = {"key_group": int(key_group), "value_group": int(value_group)}
        if min(groups.values()) < 1 or q.shape[0] != k.shape[0] * groups["key_group"] or \
                q.shape[0] != v.shape[0] * groups["value_group"]:
            raise ValueError(f"flash_attention: {q.shape[0]} query rows do not share {k.shape[0]} key and "
                             f"{v.shape[0]} value rows in groups of {key_group} and {value_group}")
        return flash_attention(q, k, v, *extras, score_transform=score_transform, query_block=int(query_block),
                               key_block=int(key_block), zero_rows=bool(zero_rows),
                               scores_dtype=score_transform.in_avals[0].dtype, out_dtype=out_dtype or v.dtype, **groups)
