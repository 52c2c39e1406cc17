"""The kernel check times both kinds of a program's kernels against a profile's estimates."""
from __future__ import annotations

import jax

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.optimizer.kernel_check import check_kernels
from wire.capture import capture


def test_the_kernel_check_times_both_programs_kernels_and_they_differ():
    fn, args = ZOO["rnn_unrolled"]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["rnn_unrolled"])
    checked = check_kernels([("rnn", program, jax.tree_util.tree_leaves(args))], "cpu-host", passes=1,
                            budget_per_kernel_s=0.01)
    assert checked["baseline"]["kernels"] > 0 and checked["optimized"]["kernels"] > 0
    assert checked["baseline"]["kernels"] != checked["optimized"]["kernels"]  # the optimizer changed the kernels
    assert (
        -1 <= checked["optimized"]["spearman"] <= 1 and checked["optimized"]["median_ratio_estimate_over_measured"] > 0
    )
