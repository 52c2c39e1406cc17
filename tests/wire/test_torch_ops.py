"""Every ATen overload of the capture table computes what PyTorch eager does (the elementwise
ones on hypothesis-drawn shapes in test_torch_elementwise.py, the rest here); an op outside the
table, or an output capture does not compute, is an UnsupportedAtenOp naming the op and the node."""
from __future__ import annotations

import re

import pytest
import torch
from aten_cases import CASES, encoder_layer
from aten_harness import assert_matches_torch
from test_torch_elementwise import BINARY, INT_BINARY, SCALAR, UNARY

from wire.aten import load_families
from wire.torch_capture import UnsupportedAtenOp, capture_torch

# tolerances for ops whose torch kernels sum in another order (GEMMs, convolutions, pools)
LOOSE = {
    "aten._transformer_encoder_layer_fwd.default",
    "aten._native_multi_head_attention.default",
    "aten._embedding_bag.default",
    "aten._embedding_bag_forward_only.default",
    "aten.convolution.default",
    "aten.baddbmm.default",
    "aten.addmm.default",
    "aten.bmm.default",
    "aten.mm.default",
    "aten.native_group_norm.default",
    "aten.native_layer_norm.default",
    "aten.upsample_bilinear2d.vec",
    "aten.upsample_linear1d.vec",
    "aten._adaptive_avg_pool2d.default",
    "aten.adaptive_avg_pool1d.default",
    "aten.logsumexp.default",
    "aten.var.correction",
    "aten.var.dim",
}
# ops whose inputs come from fixed examples in test_torch_elementwise.py rather than CASES
ELEMENTWISE = {f"aten.{n}.default" for n in UNARY} | {f"aten.{n}" for n in BINARY + INT_BINARY + SCALAR} | {
    "aten.gelu.default", "aten.leaky_relu.default", "aten.hardtanh.default", "aten.elu.default"}
# assertions compute nothing: tested by what they let through and what they stop (test_torch_checks.py)
CHECKS = {name for name in load_families() if "assert" in name or "constrain_range" in name or "dep_token" in name}


def _overload(name: str):
    _, packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


@pytest.mark.parametrize("name", sorted(CASES))
def test_aten_op_matches_torch_eager(name):
    args, kwargs = CASES[name](torch.Generator().manual_seed(7))
    tol = {"rtol": 1e-4, "atol": 1e-5} if name in LOOSE else {}
    # capture does not compute max pooling's indices or an embedding bag's bookkeeping (selecting
    # them is an error, tested below)
    outputs = 1 if "max_pool" in name or "embedding_bag" in name else None
    assert_matches_torch(_overload(name), *args, **kwargs, **tol, outputs=outputs)


@pytest.mark.parametrize("norm_first, gelu, mask_type", [(True, True, 1), (False, True, 0), (True, False, None)])
def test_the_encoder_layer_fast_path_matches_torch_with_either_norm_activation_and_mask(norm_first, gelu, mask_type):
    g = torch.Generator().manual_seed(5)
    mask = {1: torch.tensor([[False] * 3 + [True] * 2, [False] * 5]), 0: torch.ones(5, 5, dtype=torch.bool).triu(1),
            None: None}[mask_type]
    args = encoder_layer(g, norm_first, gelu, mask, mask_type)
    assert_matches_torch(torch.ops.aten._transformer_encoder_layer_fwd.default, *args, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_of_every_mode_with_an_empty_bag_matches_torch(mode):
    g = torch.Generator().manual_seed(6)
    weight, indices = torch.randn(10, 4, generator=g), torch.randint(0, 10, (7,), generator=g)
    assert_matches_torch(torch.ops.aten._embedding_bag.default, weight, indices, torch.tensor([0, 3, 3]), False,
                         mode, outputs=1)


def test_transposed_convolution_with_groups_matches_torch():
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(2, 4, 5, 6, generator=g), torch.randn(4, 3, 3, 2, generator=g), torch.randn(6, generator=g)
    assert_matches_torch(torch.ops.aten.convolution.default, x, w, b, [2, 1], [1, 0], [1, 2], True, [1, 0], 2,
                         rtol=1e-4, atol=1e-5)


def test_every_table_entry_is_checked_against_torch():
    unchecked = set(load_families()) - set(CASES) - ELEMENTWISE - CHECKS
    assert not unchecked, f"ATen table entries with no test against torch: {sorted(unchecked)}"


@pytest.mark.parametrize("ord", [2, 1, 3, 0, float("inf"), float("-inf"), -1.5])
def test_vector_norm_of_every_order_matches_torch(ord):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, generator=g) * (torch.rand(4, 6, generator=g) > 0.3)  # zeros for the 0-norm to count
    assert_matches_torch(torch.ops.aten.linalg_vector_norm.default, x, ord, [1], rtol=1e-5)


def test_as_strided_in_operand_order_is_a_reshape_and_other_views_a_gather():
    g = torch.Generator().manual_seed(1)
    # adaptive pooling's relayout of a 1x1 map reads its operand in order
    program = assert_matches_torch(torch.ops.aten.as_strided.default, torch.randn(2, 8, 1, 1, generator=g),
                                   [2, 8, 1, 1], [8, 1, 8, 8])
    assert {e["op"] for e in program["eqns"]} <= {"reshape"}
    # overlapping windows of an expanded operand
    x = torch.randn(5, 1, generator=g).expand(5, 3)
    program = assert_matches_torch(torch.ops.aten.as_strided.default, x, [3, 2], [1, 1])
    assert "gather" in [e["op"] for e in program["eqns"]]


def test_as_strided_past_its_operands_storage_is_an_error_not_a_wrong_program():
    with pytest.raises(UnsupportedAtenOp, match="reads storage its operand does not cover"):
        assert_matches_torch(torch.ops.aten.as_strided.default, torch.randn(4, 6)[:2], [3, 6], [6, 1])


def test_an_op_outside_the_table_is_an_error_naming_the_op_and_node():
    with pytest.raises(UnsupportedAtenOp, match=re.escape("ATen op aten.cummax.default (FX node 'cummax')")):
        capture_torch(lambda a: torch.cummax(a, 0)[0] + 1, torch.randn(3, 3))


def test_selecting_max_pool_indices_is_an_error_not_a_wrong_program():
    def pool_indices(x):
        return torch.nn.functional.max_pool2d(x, 2, return_indices=True)[1]

    with pytest.raises(UnsupportedAtenOp, match="the indices output of aten.max_pool2d_with_indices"):
        capture_torch(pool_indices, torch.randn(1, 1, 4, 4))
