"""The `flash_attention` op (wire/flash_attention.py) in interpret mode against attention computed
whole in float64: sizes no block divides, one query or one key, a causal mask from the block's
positions (rows whose first key blocks are all masked), a bias read by blocks, zeroed rows, bf16."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from wire.execute import jitted_program, typecheck
from wire.format import WireError


def _spec(name, shape, dtype="float32"):
    return {"name": name, "shape": list(shape), "dtype": dtype}


def _program(batch, queries, keys, blocks, dtype="float32", zero_rows=False):
    """softmax(where(q_pos >= k_pos, s * 0.3 + bias, -inf)) @ v, bias one value per key and batch."""
    bq, bk = min(blocks[0], queries), min(blocks[1], keys)
    block = [bq, bk]
    transform = {
        "format": "optu.jaxpr/v1",
        "consts": [],
        "inputs": [
            _spec("s", block, dtype),
            _spec("qp", block, "int32"),
            _spec("kp", block, "int32"),
            _spec("bias", block, dtype),
        ],
        "eqns": [
            {"op": "mul", "in": ["s", {"lit": 0.3, "dtype": dtype}], "out": [_spec("a", block, dtype)], "params": {}},
            {"op": "add", "in": ["a", "bias"], "out": [_spec("b", block, dtype)], "params": {}},
            {"op": "ge", "in": ["qp", "kp"], "out": [_spec("m", block, "bool")], "params": {}},
            {
                "op": "broadcast_in_dim",
                "in": [{"lit": "-inf", "dtype": dtype}],
                "out": [_spec("ninf", block, dtype)],
                "params": {"shape": block, "broadcast_dimensions": [], "sharding": None},
            },
            {"op": "select_n", "in": ["m", "ninf", "b"], "out": [_spec("e", block, dtype)], "params": {}},
        ],
        "outputs": ["e"],
    }
    inputs = [_spec("q", [batch, queries, 8], dtype), _spec("k", [batch, keys, 8], dtype),
              _spec("v", [batch, keys, 5], dtype), _spec("bias", [batch, 1, keys], dtype)]
    inputs += [_spec("keep", [1, queries, 1], "bool")] if zero_rows else []
    return {
        "format": "optu.jaxpr/v1",
        "inputs": inputs,
        "consts": [],
        "outputs": ["o"],
        "eqns": [
            {
                "op": "flash_attention",
                "in": [i["name"] for i in inputs],
                "out": [_spec("o", [batch, queries, 5], dtype)],
                "params": {
                    "score_transform": {"program": transform},
                    "query_block": blocks[0],
                    "key_block": blocks[1],
                    "zero_rows": zero_rows,
                    "out_dtype": dtype,
                },
            }
        ],
    }


def _reference(q, k, v, bias, keep=None):
    q, k, v, bias = (np.asarray(x, np.float64) for x in (q, k, v, bias))
    s = np.einsum("bqd,bkd->bqk", q, k) * 0.3 + bias
    s = np.where(np.arange(q.shape[1])[:, None] >= np.arange(k.shape[1])[None, :], s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        out = p / p.sum(-1, keepdims=True) @ v
    return out if keep is None else np.where(keep, out, 0)


@pytest.mark.parametrize("batch,queries,keys,blocks", [
    (2, 37, 37, (16, 8)), (1, 1, 1, (16, 16)), (3, 1, 45, (16, 16)), (1, 45, 1, (16, 16)),
    (2, 100, 70, (32, 16)), (1, 64, 64, (64, 64)),
], ids=["no-block-divides", "one-query-one-key", "one-query", "one-key", "more-queries-than-keys", "one-block"])
def test_fused_kernel_computes_attention_at_any_size(batch, queries, keys, blocks):
    program = _program(batch, queries, keys, blocks)
    typecheck(program)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s["shape"]).astype(np.float32) for s in program["inputs"]]
    got = np.asarray(jitted_program(program)(*args)[0])
    expected = _reference(*args)
    # causal rows see key 0 whenever there is one, so every row is finite
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_zeroed_rows_and_bf16():
    program = _program(1, 40, 40, (16, 16), dtype="bfloat16", zero_rows=True)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s["shape"]).astype(ml_dtypes.bfloat16) for s in program["inputs"][:4]]
    keep = (np.arange(40) % 3 != 0).reshape(1, 40, 1)
    got = np.asarray(jitted_program(program)(*args, keep)[0]).astype(np.float64)
    expected = _reference(*args, keep)
    assert np.all(got[:, ::3] == 0)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2)


def test_a_transform_not_of_the_block_shape_is_a_wire_error():
    program = _program(1, 40, 40, (16, 16))
    program["eqns"][0]["params"]["key_block"] = 8  # the transform's inputs are [16, 16] blocks
    with pytest.raises(WireError):
        typecheck(program)


def test_grouped_keys_and_values_serve_consecutive_batch_rows():
    """key_group / value_group 2: batch rows 2j and 2j+1 read K and V row j (GQA without the repeat)."""
    program = _program(4, 37, 37, (16, 8))
    for spec in program["inputs"][1:3]:
        spec["shape"][0] = 2
    program["eqns"][0]["params"].update(key_group=2, value_group=2)
    typecheck(program)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s["shape"]).astype(np.float32) for s in program["inputs"]]
    got = np.asarray(jitted_program(program)(*args)[0])
    q, k, v, bias = args
    np.testing.assert_allclose(got, _reference(q, np.repeat(k, 2, 0), np.repeat(v, 2, 0), bias), rtol=1e-5, atol=1e-5)
    program["eqns"][0]["params"]["key_group"] = 3  # 4 query rows cannot share 2 key rows in threes
    with pytest.raises(WireError):
        typecheck(program)
