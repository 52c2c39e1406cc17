"""POST /v1/debug on a real server: a hand-broken optimized program is answered with the kernel that
computes the wrong op; programs whose signatures differ get a 422 naming the field."""
from __future__ import annotations

import copy

import httpx
import jax.numpy as jnp
import numpy as np
import pytest

from wire.capture import capture

pytestmark = pytest.mark.integration  # a real server

ARGS = (np.ones((8, 16), np.float32), np.ones((16, 4), np.float32))


def _layer(a, w):
    return jnp.tanh(a) @ w


def test_the_first_divergent_kernel_of_a_broken_program_is_answered(server_url):
    original = capture(_layer, *ARGS)
    broken = copy.deepcopy(original)
    next(e for e in broken["eqns"] if e["op"] == "tanh")["op"] = "sin"
    reply = httpx.post(f"{server_url}/v1/debug", json={"original": original, "optimized": broken}, timeout=120)
    assert reply.status_code == 200, reply.text
    report = reply.json()
    assert "sin" in report["first_divergent"]["ops"] and report["validation"]["status"] == "failed"
    assert report["first_divergent"]["outputs"][0]["stands_for"] == original["outputs"][0]


def test_programs_with_different_signatures_get_a_422_naming_the_field(server_url):
    original = capture(_layer, *ARGS)
    other = capture(lambda a, w: jnp.tanh(a) @ w[:, :2], *ARGS)
    reply = httpx.post(f"{server_url}/v1/debug", json={"original": original, "optimized": other}, timeout=120)
    assert reply.status_code == 422
    detail = reply.json()["detail"]
    assert detail["field"] == "optimized.outputs[0]" and "float32[8, 2]" in detail["message"]


def test_an_unknown_rule_to_exclude_gets_a_422_naming_it(server_url):
    original = capture(_layer, *ARGS)
    reply = httpx.post(f"{server_url}/v1/debug", json={"original": original, "optimized": original,
                                                         "options": {"exclude_rules": ["no-such-rule"]}}, timeout=120)
    assert reply.status_code == 422 and "no-such-rule" in reply.text


def test_a_kernel_naming_a_value_the_program_lacks_gets_a_422_naming_it(server_url):
    original = capture(_layer, *ARGS)
    kernels = [{"id": 0, "kind": "fused", "ops": ["tanh", "dot_general"], "inputs": ["nowhere"],
                "outputs": [original["outputs"][0]]}]
    reply = httpx.post(f"{server_url}/v1/debug", json={"original": original, "optimized": original,
                                                         "kernels": kernels}, timeout=120)
    assert reply.status_code == 422
    assert reply.json()["detail"]["field"] == "kernels[0].inputs" and "nowhere" in reply.json()["detail"]["message"]
