"""Example arguments for every ATen overload the capture table lowers (elementwise ones are drawn
by hypothesis in test_torch_elementwise.py): name -> a function of a torch Generator giving
(args, kwargs)."""
from __future__ import annotations

import torch

F32, I64 = torch.float32, torch.int64


def randn(g, *shape, dtype=F32):
    return torch.randn(*shape, generator=g, dtype=dtype)


def positive(g, *shape):
    return torch.rand(*shape, generator=g) + 0.5


def ints(g, high, *shape, low=0):
    return torch.randint(low, high, shape, generator=g)


def encoder_layer(g, norm_first: bool, gelu: bool, mask=None, mask_type=None) -> tuple:
    """The arguments of TransformerEncoderLayer's fast path: width 8, 2 heads, feed-forward 16."""
    return (randn(g, 2, 5, 8), 8, 2, randn(g, 24, 8) / 3, randn(g, 24), randn(g, 8, 8) / 3, randn(g, 8), gelu,
            norm_first, 1e-5, randn(g, 8), randn(g, 8), randn(g, 8), randn(g, 8), randn(g, 16, 8) / 3, randn(g, 16),
            randn(g, 8, 16) / 4, randn(g, 8), mask, mask_type)


CASES = {
    # matrix products and nn
    "aten.mm.default": lambda g: ((randn(g, 3, 5), randn(g, 5, 4)), {}),
    "aten.bmm.default": lambda g: ((randn(g, 2, 3, 5), randn(g, 2, 5, 4)), {}),
    "aten.addmm.default": lambda g: ((randn(g, 4), randn(g, 3, 5), randn(g, 5, 4)), {"beta": 0.5, "alpha": 2.0}),
    "aten.baddbmm.default": lambda g: ((randn(g, 2, 3, 4), randn(g, 2, 3, 5), randn(g, 2, 5, 4)), {}),
    "aten.convolution.default": lambda g: (
        (randn(g, 2, 4, 9, 8), randn(g, 6, 2, 3, 2), randn(g, 6), [2, 1], [1, 0], [1, 2], False, [0], 2),
        {},
    ),
    "aten._native_batch_norm_legit_no_training.default": lambda g: (
        (randn(g, 2, 3, 4, 4), randn(g, 3), randn(g, 3), randn(g, 3), positive(g, 3), 0.1, 1e-5),
        {},
    ),
    "aten.native_layer_norm.default": lambda g: ((randn(g, 2, 3, 8), [3, 8], randn(g, 3, 8), randn(g, 3, 8), 1e-5), {}),
    "aten.native_group_norm.default": lambda g: ((randn(g, 2, 6, 5), randn(g, 6), randn(g, 6), 2, 6, 5, 3, 1e-5), {}),
    "aten.max_pool2d_with_indices.default": lambda g: (
        (randn(g, 2, 3, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1], True),
        {},
    ),
    "aten.max_pool3d_with_indices.default": lambda g: ((randn(g, 1, 2, 4, 5, 4), [2, 2, 2]), {}),
    "aten.avg_pool2d.default": lambda g: ((randn(g, 2, 3, 7, 7), [3, 3], [2, 2], [1, 1], True, False), {}),
    "aten.avg_pool1d.default": lambda g: ((randn(g, 2, 3, 9), [3], [2], [1]), {}),
    "aten.avg_pool3d.default": lambda g: ((randn(g, 1, 2, 4, 4, 4), [2, 2, 2]), {}),
    "aten._adaptive_avg_pool2d.default": lambda g: ((randn(g, 2, 3, 7, 5), [3, 2]), {}),
    "aten.adaptive_avg_pool1d.default": lambda g: ((randn(g, 2, 3, 7), [3]), {}),
    "aten.upsample_nearest2d.vec": lambda g: ((randn(g, 1, 2, 3, 5), [7, 10], None), {}),
    "aten.upsample_nearest1d.vec": lambda g: ((randn(g, 1, 2, 5), None, [2.0]), {}),
    "aten.upsample_bilinear2d.vec": lambda g: ((randn(g, 1, 2, 3, 5), [6, 9], False, None), {}),
    "aten.upsample_linear1d.vec": lambda g: ((randn(g, 1, 2, 5), [8], True, None), {}),
    "aten.embedding.default": lambda g: ((randn(g, 10, 4), ints(g, 10, 2, 3)), {}),
    # torch.nn's fused inference paths
    "aten._transformer_encoder_layer_fwd.default": lambda g: (encoder_layer(g, norm_first=False, gelu=False), {}),
    "aten._native_multi_head_attention.default": lambda g: (
        (
            randn(g, 2, 5, 8),
            randn(g, 2, 5, 8),
            randn(g, 2, 5, 8),
            8,
            2,
            randn(g, 24, 8) / 3,
            randn(g, 24),
            randn(g, 8, 8) / 3,
            randn(g, 8),
            torch.tensor([[False] * 4 + [True], [False] * 5]),
        ),
        {"mask_type": 1},
    ),
    "aten._embedding_bag.default": lambda g: (
        (randn(g, 10, 4), ints(g, 10, 9), torch.tensor([0, 2, 2, 6]), False, 1),
        {"padding_idx": 3},
    ),
    "aten._embedding_bag_forward_only.default": lambda g: (
        (randn(g, 10, 4), ints(g, 10, 9), torch.tensor([0, 4, 9]), False, 0, False, randn(g, 9), True),
        {},
    ),
    # views and movement
    "aten.view.default": lambda g: ((randn(g, 2, 6), [3, -1]), {}),
    "aten._unsafe_view.default": lambda g: ((randn(g, 2, 6), [12]), {}),
    "aten.reshape.default": lambda g: ((randn(g, 2, 6), [4, 3]), {}),
    "aten.permute.default": lambda g: ((randn(g, 2, 3, 4), [2, 0, 1]), {}),
    "aten.transpose.int": lambda g: ((randn(g, 2, 3, 4), 0, -1), {}),
    "aten.t.default": lambda g: ((randn(g, 2, 3),), {}),
    "aten.expand.default": lambda g: ((randn(g, 3, 1), [2, 3, 4]), {}),
    "aten.unsqueeze.default": lambda g: ((randn(g, 2, 3), -1), {}),
    "aten.squeeze.dims": lambda g: ((randn(g, 2, 1, 3, 1), [1, 2]), {}),
    "aten.squeeze.dim": lambda g: ((randn(g, 2, 1, 3), 1), {}),
    "aten.squeeze.default": lambda g: ((randn(g, 1, 2, 1),), {}),
    "aten.slice.Tensor": lambda g: ((randn(g, 4, 9), 1, -7, 100, 2), {}),
    "aten.select.int": lambda g: ((randn(g, 4, 5), 1, -2), {}),
    "aten.cat.default": lambda g: (([randn(g, 2, 3), randn(g, 2, 1), torch.empty(0)], 1), {}),
    "aten.split_with_sizes.default": lambda g: ((randn(g, 7, 2), [3, 4]), {}),
    "aten.split.Tensor": lambda g: ((randn(g, 2, 7), 3, 1), {}),
    "aten.unbind.int": lambda g: ((randn(g, 3, 2), 0), {}),
    "aten.constant_pad_nd.default": lambda g: ((randn(g, 2, 3, 4), [1, 2, -1, 1], 0.5), {}),
    "aten.flip.default": lambda g: ((randn(g, 2, 3, 4), [0, 2]), {}),
    "aten.roll.default": lambda g: ((randn(g, 3, 4), [1, -2], [0, 1]), {}),
    "aten.repeat.default": lambda g: ((randn(g, 2, 3), [2, 1, 2]), {}),
    "aten.slice_scatter.default": lambda g: ((randn(g, 5, 4), randn(g, 2, 4), 0, 1, 5, 2), {}),
    "aten.select_scatter.default": lambda g: ((randn(g, 5, 4), randn(g, 5), 1, -1), {}),
    "aten.as_strided.default": lambda g: ((randn(g, 4, 6).t(), [3, 2], [2, 5], 1), {}),
    "aten.tril.default": lambda g: ((randn(g, 4, 5), -1), {}),
    "aten.triu.default": lambda g: ((randn(g, 2, 4, 5), 1), {}),
    # creation
    "aten.full.default": lambda g: (([2, 3], 1.5), {"dtype": F32}),
    "aten.new_full.default": lambda g: ((randn(g, 2), [3], 7), {"dtype": I64}),
    "aten.full_like.default": lambda g: ((randn(g, 2, 3), -2.0), {}),
    "aten.fill.Scalar": lambda g: ((ints(g, 5, 3), 4), {}),
    "aten.zeros_like.default": lambda g: ((randn(g, 2, 3),), {}),
    "aten.zeros.default": lambda g: (([2, 3],), {"dtype": I64}),
    "aten.empty.memory_format": lambda g: (([0, 3],), {}),
    "aten.empty_like.default": lambda g: ((randn(g, 0, 2),), {}),
    "aten.new_zeros.default": lambda g: ((randn(g, 2), [4]), {}),
    "aten.new_empty.default": lambda g: ((randn(g, 2), [0]), {}),
    "aten.empty_strided.default": lambda g: (([0, 2], [2, 1]), {}),
    "aten.ones_like.default": lambda g: ((ints(g, 5, 3),), {}),
    "aten.new_ones.default": lambda g: ((randn(g, 2), [2, 2]), {}),
    "aten.ones.default": lambda g: (([3],), {"dtype": torch.bool}),
    "aten.scalar_tensor.default": lambda g: ((2.5,), {"dtype": torch.float64}),
    "aten.arange.start_step": lambda g: ((-3, 10, 2), {"dtype": I64}),
    "aten.arange.start": lambda g: ((0.5, 4.0), {}),
    "aten.arange.default": lambda g: ((6,), {}),
    # reductions and scans
    "aten.sum.dim_IntList": lambda g: ((randn(g, 2, 3, 4), [0, 2], True), {}),
    "aten.sum.default": lambda g: ((ints(g, 9, 3, 4),), {}),
    "aten.mean.dim": lambda g: ((randn(g, 2, 3, 4), [-1]), {}),
    "aten.mean.default": lambda g: ((randn(g, 2, 3),), {}),
    "aten.prod.dim_int": lambda g: ((positive(g, 3, 4), 1, True), {}),
    "aten.prod.default": lambda g: ((positive(g, 3, 2),), {}),
    "aten.var.correction": lambda g: ((randn(g, 3, 5), [1]), {"correction": 1, "keepdim": True}),
    "aten.var.dim": lambda g: ((randn(g, 3, 5), [0], False), {}),
    "aten.amax.default": lambda g: ((randn(g, 3, 5), [1]), {}),
    "aten.amin.default": lambda g: ((randn(g, 3, 5), [0, 1], True), {}),
    "aten.max.default": lambda g: ((randn(g, 3, 5),), {}),
    "aten.min.default": lambda g: ((ints(g, 99, 3, 5),), {}),
    "aten.max.dim": lambda g: ((randn(g, 3, 5), 1, True), {}),
    "aten.min.dim": lambda g: ((randn(g, 3, 5), 0), {}),
    "aten.argmax.default": lambda g: ((randn(g, 3, 5), 1), {}),
    "aten.argmin.default": lambda g: ((randn(g, 3, 5),), {}),
    "aten.any.dim": lambda g: ((randn(g, 3, 5) > 1, 1), {}),
    "aten.any.dims": lambda g: ((ints(g, 3, 3, 5), [0, 1]), {}),
    "aten.any.default": lambda g: ((randn(g, 3) > 0,), {}),
    "aten.all.dim": lambda g: ((randn(g, 3, 5) > -1, 0, True), {}),
    "aten.all.dims": lambda g: ((randn(g, 3, 5) > -1, [1]), {}),
    "aten.all.default": lambda g: ((ints(g, 3, 4, low=1),), {}),
    "aten.cumsum.default": lambda g: ((randn(g, 3, 5), 1), {}),
    "aten.cumprod.default": lambda g: ((positive(g, 3, 5), 0), {}),
    "aten._softmax.default": lambda g: ((randn(g, 3, 5), -1, False), {}),
    "aten._log_softmax.default": lambda g: ((randn(g, 3, 5), 0, False), {}),
    "aten.linalg_vector_norm.default": lambda g: ((randn(g, 3, 5, 2), 2, [0, 2], True), {}),
    "aten.logsumexp.default": lambda g: ((randn(g, 3, 5), [1]), {}),
    # indexing
    "aten.index.Tensor": lambda g: ((randn(g, 4, 5, 6), [None, ints(g, 5, 3, low=-5), ints(g, 6, 1)]), {}),
    "aten._unsafe_index.Tensor": lambda g: ((randn(g, 4, 5), [ints(g, 4, 2, 3)]), {}),
    "aten.index_select.default": lambda g: ((randn(g, 4, 5), 1, ints(g, 5, 7)), {}),
    "aten.gather.default": lambda g: ((randn(g, 4, 5), 1, ints(g, 5, 3, 2)), {}),
    "aten.scatter.src": lambda g: (
        (randn(g, 4, 5), 0, torch.randperm(4, generator=g)[:3].reshape(3, 1).expand(3, 2), randn(g, 3, 5)),
        {},
    ),
    "aten.scatter.value": lambda g: ((randn(g, 4, 5), 1, torch.tensor([[0, 3], [1, 2]]), 9.0), {}),
    "aten.scatter_add.default": lambda g: ((randn(g, 4, 5), 0, ints(g, 4, 6, 5), randn(g, 6, 5)), {}),
    "aten.index_put.default": lambda g: ((randn(g, 4, 5), [torch.tensor([0, 2, 2])], randn(g, 5), True), {}),
    "aten.topk.default": lambda g: ((randn(g, 3, 7), 3, 1, False), {}),
    "aten.sort.default": lambda g: ((randn(g, 3, 7), 0, True), {}),
    "aten.sort.stable": lambda g: ((ints(g, 4, 3, 7),), {"stable": True, "dim": 1}),
    "aten.where.self": lambda g: ((randn(g, 3, 1) > 0, randn(g, 3, 4), ints(g, 5, 4)), {}),
    "aten.where.ScalarSelf": lambda g: ((randn(g, 3, 4) > 0, 2.0, randn(g, 3, 4)), {}),
    "aten.where.ScalarOther": lambda g: ((randn(g, 3, 4) > 0, randn(g, 3, 4), -1.0), {}),
    "aten.where.Scalar": lambda g: ((randn(g, 3, 4) > 0, 1.0, 0.0), {}),
    "aten.pow.Scalar": lambda g: ((2.0, randn(g, 3, 4)), {}),
    "aten.clamp.default": lambda g: ((randn(g, 3, 4), -0.5, 0.5), {}),
    "aten.clamp.Tensor": lambda g: ((randn(g, 3, 4), randn(g, 4) - 1, randn(g, 3, 1) + 1), {}),
    "aten._to_copy.default": lambda g: ((randn(g, 3, 4) * 9,), {"dtype": I64}),
    "aten.clone.default": lambda g: ((randn(g, 3, 4),), {}),
    "aten.alias.default": lambda g: ((randn(g, 3, 4),), {}),
    "aten.lift_fresh_copy.default": lambda g: ((randn(g, 3, 4),), {}),
    "aten.detach.default": lambda g: ((randn(g, 3, 4),), {}),
}
