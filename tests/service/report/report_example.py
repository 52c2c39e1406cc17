"""A small network whose optimized program has several kernels, weight-only work and rewrites:
what the report tests draw."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wire.capture import capture

# gpu-roofline runs one GEMM per kernel, so the program keeps several kernels after fusion.
HARDWARE = "gpu-roofline"
WEIGHTS = (1, 2, 3, 4)
SHAPES = [(64, 256), (256, 512), (512, 256), (256, 32), (512,)]


def network(x, w1, w2, w3, gain):
    hidden = jnp.tanh(x @ w1)
    hidden = (hidden - jnp.mean(hidden, axis=-1, keepdims=True)) * gain
    attention = jax.nn.softmax(hidden @ w2, axis=-1)
    return (attention @ w3) * 0.5 + x[:, :32]


def example_arguments() -> list[np.ndarray]:
    return [np.ones(shape, np.float32) for shape in SHAPES]


def example_program() -> dict:
    wire = capture(network, *example_arguments())
    for index in WEIGHTS:
        wire["inputs"][index]["role"] = "weight"
    return wire
