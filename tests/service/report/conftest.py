"""A small network whose optimized program has several kernels, weight-only work and rewrites, and
its optimize response computed in-process (once per session): what the report tests draw."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from service.optimizer.pipeline import optimize
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


@pytest.fixture(scope="session")
def program() -> dict:
    wire = capture(network, *(np.ones(shape, np.float32) for shape in SHAPES))
    for index in WEIGHTS:
        wire["inputs"][index]["role"] = "weight"
    return wire


@pytest.fixture(scope="session")
def response(program) -> dict:
    # Through JSON, as the API answers it.
    return json.loads(json.dumps(optimize(program, HARDWARE, {"time_limit_s": 10})))
