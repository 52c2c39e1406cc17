"""Weight-only work split off and run once per weight set: the split computes what the whole
program computes, and the precomputed part reruns exactly when the weights may differ."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bench.models.registry import capture_model
from lowering.precompute import PrecomputedProgram, split_weight_work
from wire.capture import capture
from wire.execute import program_to_callable


def test_the_split_moves_weight_only_work_out_and_computes_the_same():
    program, args = capture_model("matmul_chain")
    program["inputs"][0]["role"] = "weight"  # make the whole left part of the chain weight-only
    ahead, per_call = split_weight_work(program)
    assert ahead["eqns"] and len(per_call["eqns"]) < len(program["eqns"])
    values = program_to_callable(ahead)(*args)
    direct, split = program_to_callable(program)(*args), program_to_callable(per_call)(*args, *values)
    assert all(abs(a - b).max() <= 1e-3 * abs(a).max() for a, b in zip(direct, split))


def _program():
    x, w1, w2 = np.ones((4, 16), np.float32), np.full((16, 16), 0.1, np.float32), np.full((16, 16), 0.2, np.float32)
    return capture(lambda x, w1, w2: jnp.tanh(x @ (w1 @ w2)), x, w1, w2, weight_argnums=(1, 2)), (x, w1, w2)


def test_the_weight_only_part_reruns_only_for_other_weights():
    program, (x, w1, w2) = _program()
    run = PrecomputedProgram.of(program)
    w1, w2 = jnp.asarray(w1), jnp.asarray(w2)
    for _ in range(3):
        np.testing.assert_allclose(run(x, w1, w2)[0], jnp.tanh(x @ (w1 @ w2)), rtol=1e-5)
    assert run.precompute_runs == 1
    w3 = w2 * 2  # another weight set
    np.testing.assert_allclose(run(x, w1, w3)[0], jnp.tanh(x @ (w1 @ w3)), rtol=1e-5)
    assert run.precompute_runs == 2


def test_numpy_weights_are_recomputed_every_call_as_they_may_change_in_place():
    program, (x, w1, w2) = _program()
    run = PrecomputedProgram.of(program)
    run(x, w1, w2)
    w1 *= 3  # the same object, other values
    np.testing.assert_allclose(run(x, w1, w2)[0], np.tanh(x @ (w1 @ w2)), rtol=1e-5)
    assert run.precompute_runs == 2


def test_inside_a_trace_nothing_is_kept():
    program, (x, w1, w2) = _program()
    run = PrecomputedProgram.of(program)
    traced = jax.jit(lambda *a: run(*a)[0])
    np.testing.assert_allclose(traced(x, jnp.asarray(w1), jnp.asarray(w2)), np.tanh(x @ (w1 @ w2)), rtol=1e-5)
    assert run.last is None  # a tracer's values would escape their trace


def test_programs_without_weights_or_weight_only_work_get_none():
    program, _ = _program()
    assert (
        PrecomputedProgram.of({**program, "inputs": [{**s, "role": "activation"} for s in program["inputs"]]}) is None
    )
    plain = capture(lambda x, w: x @ w, np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), weight_argnums=(1,))
    assert PrecomputedProgram.of(plain) is None  # the weight is read only together with x
