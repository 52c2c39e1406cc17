"""`row_blocked`: a fused kernel a returned program may carry, one Pallas kernel that runs a nested
program over blocks of rows. Every operand is either split into blocks along its row axis
(`in_axes[i]`, the same number of rows for all) or read whole (`None`: a weight, a bias); every
result is made of its rows (`out_axes`). The body is the program of one block: `block_rows` rows,
each computed from its own rows alone (a GEMM's rows with its epilogue, a row's norm or softmax),
so the blocks are independent and each runs with its values on chip.
Rows are padded to a whole number of blocks and the padding cut from the results; off a GPU the
kernel runs in Pallas's interpret mode: correct, not fast.
"""
from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.experimental.pallas as pl
import jax.numpy as jnp
from jax.extend.core import jaxpr_as_fun

NAME = "row_blocked"


def _rows(operands: Sequence[jax.Array], in_axes: Sequence[int | None]) -> int:
    sizes = {x.shape[a] for x, a in zip(operands, in_axes) if a is not None}
    if len(sizes) != 1:
        raise ValueError(f"{NAME}: the operands split into rows must have one row count, got {sorted(sizes)}")
    return sizes.pop()


def _padded(x: jax.Array, axis: int, rows: int) -> jax.Array:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, rows - x.shape[axis])
    return jnp.pad(x, widths) if rows != x.shape[axis] else x


def _spec(shape: Sequence[int], axis: int | None, block_rows: int) -> pl.BlockSpec:
    """Block `i` of rows along `axis` (the whole value where `axis` is None)."""
    block = tuple(block_rows if d == axis else size for d, size in enumerate(shape))
    return pl.BlockSpec(block, lambda i: tuple(i if d == axis else 0 for d in range(len(shape))))


def row_blocked(*operands: jax.Array, body: Any, block_rows: int, in_axes: Sequence[int | None],
                out_axes: Sequence[int]) -> list[jax.Array]:
    """`body` (a closed jaxpr of one block) run over every block of rows; see the module docstring."""
    if len(in_axes) != len(operands) or len(out_axes) != len(body.out_avals):
        raise ValueError(f"{NAME}: {len(operands)} operands and {len(body.out_avals)} results need as many "
                         f"in_axes and out_axes, got {len(in_axes)} and {len(out_axes)}")
    rows = _rows(operands, in_axes)
    blocks = -(-rows // block_rows)
    padded = [x if a is None else _padded(x, a, blocks * block_rows) for x, a in zip(operands, in_axes)]
    for aval, a in zip(body.out_avals, out_axes):
        if aval.shape[a] != block_rows:
            raise ValueError(f"{NAME}: a result of the body has {aval.shape[a]} rows on axis {a}, not {block_rows}")
    run = jaxpr_as_fun(body)

    def kernel(*refs):
        ins, outs = refs[:len(padded)], refs[len(padded):]
        for ref, value in zip(outs, run(*(ref[...] for ref in ins))):
            ref[...] = value.astype(ref.dtype)

    out_shapes = [tuple(blocks * block_rows if d == a else size for d, size in enumerate(aval.shape))
                  for aval, a in zip(body.out_avals, out_axes)]
    results = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct(shape, aval.dtype) for shape, aval in zip(out_shapes, body.out_avals)],
        grid=(blocks,),
        in_specs=[_spec(x.shape, a, block_rows) for x, a in zip(padded, in_axes)],
        out_specs=[_spec(shape, a, block_rows) for shape, a in zip(out_shapes, out_axes)],
        interpret=jax.default_backend() != "gpu",
    )(*padded)
    return [jax.lax.slice_in_dim(r, 0, rows, axis=a) for r, a in zip(results, out_axes)]


class RowBlocked:
    """The op as the wire executor binds a primitive: `bind(*operands, **params)`."""

    name = NAME
    multiple_results = True

    @staticmethod
    def bind(*operands, body, block_rows, in_axes, out_axes):
        if int(block_rows) < 1:
            raise ValueError(f"{NAME}: block_rows must be at least 1, got {block_rows}")
        return row_blocked(*operands, body=body, block_rows=int(block_rows), in_axes=tuple(in_axes),
                           out_axes=tuple(out_axes))
