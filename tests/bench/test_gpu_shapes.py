"""GPU-sized bench shapes: the least power-of-two growth of a model's activations that makes a call
long enough, along an axis that adds rows of work, never loop steps."""
from __future__ import annotations

from bench.gpu_shapes import _scaled, gpu_sized
from bench.models.registry import build, capture_model
from costmodel.profile import load_profile
from lowering.baseline import baseline_kernels
from wire.capture import capture

GPU = load_profile("gpu-roofline")


def _estimate(program) -> float:
    return baseline_kernels(program, GPU).total.time_s


def _activation_shapes(program) -> list[list[int]]:
    return [s["shape"] for s in program["inputs"] if s.get("role") != "weight"]


def test_activations_grow_by_the_least_power_of_two_that_makes_the_call_long_enough():
    small, _ = capture_model("mlp2")
    wanted = 6 * _estimate(small)
    program, factor = gpu_sized("mlp2", wanted)
    assert factor > 1 and _estimate(program) >= wanted
    fn, args, weight_argnums = build("mlp2")
    activations = frozenset(i for i in range(len(args)) if i not in weight_argnums)
    half = capture(fn, *_scaled(args, activations, 0, factor // 2), weight_argnums=weight_argnums)
    assert _estimate(half) < wanted
    assert _activation_shapes(program)[0][0] == factor * _activation_shapes(small)[0][0]


def test_a_model_already_long_enough_keeps_its_shapes():
    small, _ = capture_model("mlp2")
    assert gpu_sized("mlp2", 0.0) == (small, 1)


def test_a_matrix_the_activation_multiplies_keeps_its_size():
    small, _ = capture_model("matmul_chain_12")
    program, factor = gpu_sized("matmul_chain_12", 4 * _estimate(small))
    (x, other), (x0, other0) = _activation_shapes(program)[:2], _activation_shapes(small)[:2]
    assert factor > 1 and x == [x0[0] * factor, *x0[1:]] and other == other0


def test_a_recurrent_model_that_fixes_its_batch_gets_no_more_steps():
    small, _ = capture_model("lstm_scan")
    assert gpu_sized("lstm_scan", 1e-3) == (small, 1)  # its steps would lengthen the loop, not the kernels
