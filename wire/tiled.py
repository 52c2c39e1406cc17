"""`tiled`: a fused kernel a returned program may carry, one Pallas kernel that runs a nested
program over tiles of its results, along one or two grid axes. Along each grid axis `d`, an operand
is either split into blocks of `tile[d]` on its axis `in_axes[i][d]` (the same size for all) or
read whole along it (None: a weight's rows, a bias); every result is split along every grid axis
(`out_axes`). The body is the program of one tile, each tile computed from its own blocks alone (a
GEMM's rows and columns with an elementwise epilogue, a row's norm), so the tiles are independent
and each runs with its values on chip.
Sizes are padded to whole tiles and the padding cut from the results; off a GPU the kernel runs in
Pallas's interpret mode: correct, not fast.
"""
from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.experimental.pallas as pl
import jax.numpy as jnp
from jax.extend.core import jaxpr_as_fun

NAME = "tiled"
Axes = Sequence[int | None]  # per grid axis: the value's axis split along it, or None


def _sizes(operands: Sequence[jax.Array], in_axes: Sequence[Axes], dims: int) -> list[int]:
    sizes = []
    for d in range(dims):
        found = {x.shape[axes[d]] for x, axes in zip(operands, in_axes) if axes[d] is not None}
        if len(found) != 1:
            raise ValueError(f"{NAME}: the operands split along grid axis {d} must agree on its size, got "
                             f"{sorted(found)}")
        sizes.append(found.pop())
    return sizes


def _padded(x: jax.Array, axes: Axes, whole: Sequence[int]) -> jax.Array:
    widths = [(0, 0)] * x.ndim
    for d, a in enumerate(axes):
        if a is not None:
            widths[a] = (0, whole[d] - x.shape[a])
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


def _spec(shape: Sequence[int], axes: Axes, tile: Sequence[int]) -> pl.BlockSpec:
    """Tile `ids` of the value: block `ids[d]` along each axis split by grid axis `d`."""
    block, along = list(shape), {}
    for d, a in enumerate(axes):
        if a is not None:
            block[a], along[a] = tile[d], d
    return pl.BlockSpec(tuple(block), lambda *ids: tuple(ids[along[a]] if a in along else 0
                                                         for a in range(len(shape))))


def _check(operands: Sequence[jax.Array], body: Any, tile: Sequence[int], in_axes: Sequence[Axes],
           out_axes: Sequence[Axes]) -> None:
    if len(in_axes) != len(operands) or len(out_axes) != len(body.out_avals):
        raise ValueError(f"{NAME}: {len(operands)} operands and {len(body.out_avals)} results need as many "
                         f"in_axes and out_axes, got {len(in_axes)} and {len(out_axes)}")
    if min(tile, default=0) < 1 or any(len(axes) != len(tile) for axes in (*in_axes, *out_axes)):
        raise ValueError(f"{NAME}: tile {list(tile)} needs a size of at least 1 and an axis entry per grid axis")
    for axes in (*in_axes, *out_axes):
        split = [a for a in axes if a is not None]
        if len(split) != len(set(split)):
            raise ValueError(f"{NAME}: one axis split along two grid axes ({list(axes)})")
    for aval, axes in zip(body.out_avals, out_axes):
        if any(a is None or aval.shape[a] != t for a, t in zip(axes, tile)):
            raise ValueError(f"{NAME}: a result of the body, shape {list(aval.shape)}, is not one tile {list(tile)} "
                             f"on its axes {list(axes)}")


def tiled(*operands: jax.Array, body: Any, tile: Sequence[int], in_axes: Sequence[Axes],
          out_axes: Sequence[Axes]) -> list[jax.Array]:
    """`body` (a closed jaxpr of one tile) run over every tile; see the module docstring."""
    _check(operands, body, tile, in_axes, out_axes)
    sizes = _sizes(operands, in_axes, len(tile))
    counts = [-(-s // t) for s, t in zip(sizes, tile)]
    whole = [c * t for c, t in zip(counts, tile)]
    padded = [_padded(x, axes, whole) for x, axes in zip(operands, in_axes)]
    run = jaxpr_as_fun(body)

    def kernel(*refs):
        ins, outs = refs[:len(padded)], refs[len(padded):]
        for ref, value in zip(outs, run(*(ref[...] for ref in ins))):
            ref[...] = value.astype(ref.dtype)

    out_shapes = []
    for aval, axes in zip(body.out_avals, out_axes):
        shape = list(aval.shape)
        for d, a in enumerate(axes):
            shape[a] = whole[d]
        out_shapes.append(tuple(shape))
    results = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct(shape, aval.dtype) for shape, aval in zip(out_shapes, body.out_avals)],
        grid=tuple(counts),
        in_specs=[_spec(x.shape, axes, tile) for x, axes in zip(padded, in_axes)],
        out_specs=[_spec(shape, axes, tile) for shape, axes in zip(out_shapes, out_axes)],
        interpret=jax.default_backend() != "gpu",
    )(*padded)
    cut = []
    for result, axes in zip(results, out_axes):
        for d, a in enumerate(axes):
            result = jax.lax.slice_in_dim(result, 0, sizes[d], axis=a)
        cut.append(result)
    return cut


class Tiled:
    """The op as the wire executor binds a primitive: `bind(*operands, **params)`."""

    name = NAME
    multiple_results = True

    @staticmethod
    def bind(*operands, body, tile, in_axes, out_axes):
        return tiled(*operands, body=body, tile=tuple(int(t) for t in tile),
                     in_axes=tuple(tuple(a) for a in in_axes), out_axes=tuple(tuple(a) for a in out_axes))
