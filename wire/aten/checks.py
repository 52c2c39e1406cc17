"""ATen's assertions and metadata checks. With static shapes each one that reads only metadata or
sizes is decided here, at capture: it holds (and computes nothing) or capture fails naming it. A
check on tensor values (`_assert_async`) computes nothing either: as under XLA, the compiled
program does not raise, and its values are the model's wherever the check would have passed."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from wire.aten import lowers, numpy_dtype


class AssertionFailed(ValueError):
    """A model's own assertion that is false at the captured sizes and dtypes."""


@lowers("aten._assert_tensor_metadata.default")
def _tensor_metadata(out, x, size=None, stride=None, dtype=None, **_):
    # strides, device and layout say how torch stores a value, never what it is
    if size is not None and tuple(int(d) for d in size) != tuple(x.shape):
        raise AssertionFailed(f"the model asserts a tensor of size {list(size)}; it has {list(x.shape)}")
    if dtype is not None and numpy_dtype(dtype) != np.dtype(x.dtype):
        raise AssertionFailed(f"the model asserts a tensor of dtype {dtype}; it has {np.dtype(x.dtype).name}")
    return None


@lowers("aten._assert_scalar.default", "aten._functional_assert_scalar.default")
def _assert_scalar(out, condition, message, dep_token=None):
    if not condition:
        raise AssertionFailed(f"the model's assertion fails at these sizes: {message}")
    return _token(out)


@lowers("aten.sym_constrain_range.default", "aten.sym_constrain_range_for_size.default",
        "aten._functional_sym_constrain_range.default", "aten._functional_sym_constrain_range_for_size.default")
def _constrain_range(out, size, min=None, max=None, dep_token=None):  # noqa: A002 (ATen's names)
    if (min is not None and size < min) or (max is not None and size > max):
        raise AssertionFailed(f"the model constrains a size to [{min}, {max}]; it is {size}")
    return _token(out)


@lowers("aten._assert_async.default", "aten._assert_async.msg", "aten._functional_assert_async.msg")
def _assert_values(out, x, *_, **__):
    return _token(out)


@lowers("aten._make_dep_token.default")
def _make_dep_token(out, **_):
    return _token(out)


def _token(out):
    """What an assertion returns: nothing, or the functional forms' ordering token (no value reads it)."""
    return None if out.all == (None,) else jnp.zeros(out.shape, out.dtype)
