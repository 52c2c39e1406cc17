"""The `row_blocked` op (wire/row_blocked.py) in interpret mode against its body run on every row
at once: row counts no block divides, one row, fewer rows than a block, bf16, several results,
operands read whole beside operands split into rows, and operands that do not agree refused."""
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


def _blocked(rows: int, block_rows: int, dtype=jnp.float32, k: int = 24, n: int = 40):
    """A program of one `row_blocked` equation computing `_layer` (its body captured at block size),
    x and s split into rows, w and b read whole; and the inputs."""
    rng = np.random.default_rng(rows * 31 + block_rows)
    x, s = (jnp.asarray(rng.normal(size=(rows, c)), dtype) for c in (k, n))
    w, b = jnp.asarray(rng.normal(size=(k, n)) / 5, dtype), jnp.asarray(rng.normal(size=(n,)), dtype)
    body = capture(_layer, jnp.zeros((block_rows, k), dtype), w, b, jnp.zeros((block_rows, n), dtype))
    whole = capture(_layer, x, w, b, s)
    program = {**whole, "eqns": [{
        "op": "row_blocked", "in": [i["name"] for i in whole["inputs"]],
        "out": [_out_spec(whole, name) for name in whole["outputs"]],
        "params": {"body": {"program": body}, "block_rows": block_rows, "in_axes": [0, None, None, 0],
                   "out_axes": [0, 0]}}]}
    return program, whole, (x, w, b, s)


def _out_spec(program, name):
    return next(o for e in program["eqns"] for o in e["out"] if o["name"] == name)


@pytest.mark.parametrize("rows, block_rows", [(64, 16), (37, 16), (1, 8), (5, 8), (16, 16)])
def test_blocks_of_rows_compute_what_the_body_computes_on_every_row(rows, block_rows):
    program, whole, inputs = _blocked(rows, block_rows)
    typecheck(program)
    got, want = jitted_program(program)(*inputs), jitted_program(whole)(*inputs)
    assert len(got) == 2
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=2e-6)


def test_bfloat16_rows_match_the_body_in_bfloat16():
    program, whole, inputs = _blocked(33, 8, jnp.bfloat16)
    got, want = jitted_program(program)(*inputs), jitted_program(whole)(*inputs)
    for g, w in zip(got, want):
        assert g.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=2e-2, atol=2e-2)


def test_a_wrong_body_gives_a_different_answer():
    """The comparison above can fail: a body whose epilogue differs changes the results."""
    program, whole, inputs = _blocked(20, 8)
    body = program["eqns"][0]["params"]["body"]["program"]
    tanh = next(e for e in body["eqns"] if e["op"] == "tanh")
    tanh["op"] = "logistic"
    got, want = jitted_program(program)(*inputs), jitted_program(whole)(*inputs)
    assert not np.allclose(np.asarray(got[0]), np.asarray(want[0]), atol=1e-3)


def test_operands_split_into_different_row_counts_are_refused():
    program, _, _ = _blocked(20, 8)
    program["eqns"][0]["params"]["in_axes"] = [0, 0, None, 0]  # w's 24 rows against x's 20
    with pytest.raises(WireError, match="row_blocked"):
        typecheck(program)


def test_a_body_whose_results_are_not_one_block_of_rows_is_refused():
    program, _, _ = _blocked(20, 8)
    program["eqns"][0]["params"]["block_rows"] = 4
    with pytest.raises(WireError, match="rows"):
        typecheck(program)
