"""`result.explain()` on a client result: the kernel listing with each kernel's estimate and a
`rewrites` line naming the rules that shaped it."""
from __future__ import annotations

import io

import jax.numpy as jnp
import numpy as np
import pytest

from service.client import optimize

pytestmark = pytest.mark.slow  # whole models through capture and the pipeline


def test_explain_prints_the_listing_with_each_kernels_rewrites():
    result = optimize(lambda x, w, v: jnp.tanh((x * 1.0) @ w) @ v, np.ones((16, 32), np.float32),
                      np.ones((32, 32), np.float32), np.ones((32, 8), np.float32))
    shown = io.StringIO()
    result.explain(file=shown)
    lines = shown.getvalue().splitlines()
    assert lines[0] == result.response["listing"].splitlines()[0]  # the lowering's own listing
    blocks = [line for line in lines if line.startswith("kernel ")]
    assert len(blocks) == len(result.kernels) and all(" us  bound=" in line for line in blocks)  # each estimate
    rewrites = [line.split(None, 1)[1] for line in lines if line.strip().startswith("rewrites")]
    assert len(rewrites) == len(result.kernels) and any("mul-one" in r.split(", ") for r in rewrites)
    named = [name for r in rewrites if not r.startswith("none") for name in r.split(", ")]
    assert set(named) <= set(result.report["rewrites"])  # only rules that fired
