"""The kernel program of an optimize response is runnable: each kernel as its own jitted function,
run in order, reproduces the original program's outputs on the zoo."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from lowering.runnable import KernelRunner
from service.optimizer.pipeline import optimize
from validation.compare import output_error, tolerance_for
from wire.capture import capture
from wire.execute import program_to_callable

pytestmark = pytest.mark.slow  # whole programs through the pipeline


@pytest.mark.parametrize("name", sorted(ZOO))
def test_running_the_kernel_program_kernel_by_kernel_reproduces_the_original(name):
    fn, args = ZOO[name]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    response = optimize(program, "optu-v1", {"validate": False})
    runner = KernelRunner.from_response(response)
    assert len(runner.steps) == len(response["kernels"]) + len(response["precompute_kernels"])
    inputs = jax.tree_util.tree_leaves(args)
    expected = program_to_callable(program)(*inputs)
    got = runner(*inputs)
    assert len(got) == len(expected)
    for reference, result in zip(expected, got):
        reference, result = np.asarray(reference), np.asarray(result)
        assert result.shape == reference.shape and result.dtype == reference.dtype
        assert output_error(reference, result) <= tolerance_for(str(reference.dtype), "real")


def test_every_equation_runs_in_exactly_one_kernel_or_is_a_view_folded_into_its_readers():
    fn, args = ZOO["transformer_layer"]()
    response = optimize(capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["transformer_layer"]), "optu-v1",
                        {"validate": False})
    eqns = response["program"]["eqns"]
    placed = [i for k in [*response["kernels"], *response["precompute_kernels"]] for i in k["eqns"]]
    views = {"reshape", "broadcast_in_dim", "squeeze", "expand_dims", "slice", "bitcast_convert_type"}
    assert set(range(len(eqns))) == set(placed)
    assert all(eqns[i]["op"] in views for i in set(placed) if placed.count(i) > 1)
