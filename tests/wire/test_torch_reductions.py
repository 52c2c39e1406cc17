"""Reductions, scans and normalisations captured into wire programs compute what PyTorch eager
does along any axis of shapes hypothesis draws."""
from __future__ import annotations

import numpy as np
import torch
from aten_harness import assert_matches_torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

aten = torch.ops.aten
# op, arguments after (x, dim): reductions keyed by a list of dims take keepdim, scans a single dim
REDUCE = {"sum.dim_IntList": True, "mean.dim": True, "amax.default": True, "amin.default": True,
          "any.dims": True, "prod.dim_int": False, "max.dim": False, "argmax.default": False, "cumsum.default": None,
          "_softmax.default": None, "_log_softmax.default": None, "var.correction": True}


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(REDUCE)), shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
       keepdim=st.booleans(), data=st.data())
def test_reductions_match_torch_along_any_axis(name, shape, keepdim, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = torch.from_numpy(np.random.default_rng(len(shape) + dim).standard_normal(shape).astype(np.float32))
    packet, overload = name.split(".")
    op = getattr(getattr(aten, packet), overload)
    if name == "any.dims":
        x = x > 0.5
    takes_list = REDUCE[name]
    if takes_list is None:  # scans and softmax: (x, dim[, half_to_float])
        args = (x, dim) if name == "cumsum.default" else (x, dim, False)
        assert_matches_torch(op, *args, rtol=1e-5, atol=1e-6)
    elif name == "var.correction":
        assert_matches_torch(op, x, [dim], correction=0, keepdim=keepdim, rtol=1e-5, atol=1e-6)
    elif takes_list:
        assert_matches_torch(op, x, [dim], keepdim, rtol=1e-5, atol=1e-6)
    else:
        assert_matches_torch(op, x.abs() + 0.5 if name == "prod.dim_int" else x, dim, keepdim, rtol=1e-5, atol=1e-6)
