"""The `tiled` op (wire/tiled.py) in interpret mode against its body run on the whole values:
tiles of rows, of rows and columns, sizes no tile divides, one row, fewer rows than a tile, bf16,
several results, operands read whole beside operands split, and operands that do not agree
refused."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from wire.capture import capture
from wire.execute import jitted_program, typecheck
from wire.format import WireError


def _layer(x, w, b, s):
    """A GEMM with its epilogue and a row statistic: what one fused kernel of a layer computes."""
    h = jax.nn.gelu(x @ w + b, approximate=True)
    return h * s, jnp.max(h, axis=1, keepdims=True)


def _epilogue(x, w, b):
    """A GEMM with an elementwise epilogue: each of its results' rows and columns made apart."""
    return jnp.tanh(x @ w + b) * 0.5


def _tiled(fn, shapes, block_shapes, params, dtype=jnp.float32):
    """A program of one `tiled` equation computing `fn` (its body captured at `block_shapes`), and
    the program `fn` is as written, and inputs."""
    rng = np.random.default_rng(sum(map(sum, shapes)))
    args = [jnp.asarray(rng.normal(size=s) / 3, dtype) for s in shapes]
    body = capture(fn, *[jnp.zeros(s, dtype) for s in block_shapes])
    whole = capture(fn, *args)
    out = [next(o for e in whole["eqns"] for o in e["out"] if o["name"] == n) for n in whole["outputs"]]
    program = {**whole, "eqns": [{"op": "tiled", "in": [i["name"] for i in whole["inputs"]], "out": out,
                                  "params": {"body": {"program": body}, **params}}]}
    return program, whole, args


def _rows(rows: int, block: int, dtype=jnp.float32):
    k, n = 24, 40
    return _tiled(_layer, [(rows, k), (k, n), (n,), (rows, n)], [(block, k), (k, n), (n,), (block, n)],
                  {"tile": [block], "in_axes": [[0], [None], [None], [0]], "out_axes": [[0], [0]]}, dtype)


def _same(program, whole, args, tolerance=2e-6):
    got, want = jitted_program(program)(*args), jitted_program(whole)(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=tolerance,
                                   atol=tolerance)


@pytest.mark.parametrize("rows, block", [(64, 16), (37, 16), (1, 8), (5, 8), (16, 16)])
def test_tiles_of_rows_compute_what_the_body_computes_on_every_row(rows, block):
    program, whole, args = _rows(rows, block)
    typecheck(program)
    _same(program, whole, args)


@pytest.mark.parametrize("m, n, tile", [(64, 48, (16, 16)), (37, 50, (16, 32)), (3, 70, (8, 16))])
def test_tiles_of_rows_and_columns_compute_the_whole_epilogue(m, n, tile):
    program, whole, args = _tiled(
        _epilogue, [(m, 24), (24, n), (n,)], [(tile[0], 24), (24, tile[1]), (tile[1],)],
        {"tile": list(tile), "in_axes": [[0, None], [None, 1], [None, 0]], "out_axes": [[0, 1]]})
    typecheck(program)
    _same(program, whole, args)


def test_bfloat16_tiles_match_the_body_in_bfloat16():
    program, whole, args = _rows(33, 8, jnp.bfloat16)
    assert all(g.dtype == ml_dtypes.bfloat16 for g in jitted_program(program)(*args))
    _same(program, whole, args, tolerance=2e-2)


def test_a_wrong_body_gives_a_different_answer():
    """The comparison above can fail: a body whose epilogue differs changes the results."""
    program, whole, args = _rows(20, 8)
    body = program["eqns"][0]["params"]["body"]["program"]
    next(e for e in body["eqns"] if e["op"] == "tanh")["op"] = "logistic"
    got, want = jitted_program(program)(*args), jitted_program(whole)(*args)
    assert not np.allclose(np.asarray(got[0]), np.asarray(want[0]), atol=1e-3)


def test_operands_split_into_different_sizes_are_refused():
    program, _, _ = _rows(20, 8)
    program["eqns"][0]["params"]["in_axes"] = [[0], [0], [None], [0]]  # w's 24 rows against x's 20
    with pytest.raises(WireError, match="tiled"):
        typecheck(program)


def test_a_body_whose_results_are_not_one_tile_is_refused():
    program, _, _ = _rows(20, 8)
    program["eqns"][0]["params"]["tile"] = [4]
    with pytest.raises(WireError, match="one tile"):
        typecheck(program)


def test_an_axis_split_along_two_grid_axes_is_refused():
    program, _, _ = _tiled(
        _epilogue, [(32, 24), (24, 32), (32,)], [(16, 24), (24, 16), (16,)],
        {"tile": [16, 16], "in_axes": [[0, 0], [None, 1], [None, 0]], "out_axes": [[0, 1]]})
    with pytest.raises(WireError, match="two grid axes"):
        typecheck(program)
