"""The kernel-by-kernel debugger: a hand-broken optimized program is caught at the kernel that
computes the wrong op (earlier kernels agree exactly), a faithful one has no divergent kernel, and
the explained listing names the rules that shaped a rewritten kernel."""
from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.profile import resolve_profile
from lowering.kernels import NAIVE, build_kernel_program
from service.optimizer.pipeline import optimize
from validation.inputs import random_inputs
from validation.kernel_debug import debug_kernels, every_value
from validation.listing import explained_listing
from wire.capture import capture

pytestmark = pytest.mark.slow  # whole models through capture and the pipeline

ARGS = (np.ones((16, 32), np.float32), np.ones((32, 32), np.float32), np.ones((32, 8), np.float32),
        np.ones((32,), np.float32))


def _layer(a, w1, w2, b):
    return jnp.tanh(a @ w1 + b) @ w2


def _naive_kernels(program):
    return [k.to_dict() for k in build_kernel_program(program, resolve_profile("optu-v1"), NAIVE).kernels]


def test_the_first_divergent_kernel_is_the_one_computing_a_wrong_op_and_earlier_ones_agree():
    original = capture(_layer, *ARGS)
    broken = copy.deepcopy(original)
    index = next(i for i, e in enumerate(broken["eqns"]) if e["op"] == "tanh")
    broken["eqns"][index]["op"] = "sin"  # same type, another function
    report = debug_kernels(original, broken, _naive_kernels(broken))
    first = report["first_divergent"]
    assert first is not None and first["ops"] == ["sin"]
    assert first["outputs"][0]["stands_for"] == original["eqns"][index]["out"][0]["name"]
    earlier = [k for k in report["kernels"] if k["id"] < first["id"]]
    assert earlier and all(k["max_rel_error"] == 0.0 and not k["diverges"] for k in earlier)
    assert report["kernels"][-1]["diverges"]  # what reads the wrong value diverges too
    assert f"kernel {first['id']} (sin)" in report["summary"]


def test_a_faithful_optimization_has_no_divergent_kernel_and_every_output_maps():
    original = capture(lambda a, w1, w2, b: jnp.tanh((a * 1.0) @ w1 + b) @ w2 + 0.0, *ARGS)
    response = optimize(original, "optu-v1")
    report = debug_kernels(original, response["program"], response["kernels"], response["report"]["rewrites"])
    assert report["first_divergent"] is None and report["unmapped"] == []
    assert all(o["max_rel_error"] <= o["tolerance"] for k in report["kernels"] for o in k["outputs"])


def test_the_explained_listing_names_the_rules_that_removed_ops_from_a_kernel():
    original = capture(lambda a, w1, w2, b: jnp.tanh((a * 1.0) @ w1 + b) @ w2, *ARGS)
    response = optimize(original, "optu-v1")
    assert "mul-one" in response["report"]["rewrites"]
    text = explained_listing(original, response)
    rewrites = [line for line in text.splitlines() if line.strip().startswith("rewrites")]
    assert len(rewrites) == len(response["kernels"]) + len(response["precompute_kernels"])
    assert any("mul-one" in line for line in rewrites)
    assert text.startswith(response["listing"].splitlines()[0])  # the listing, with the rewrites added


def test_an_unchanged_kernel_is_explained_as_written():
    original = capture(_layer, *ARGS)
    response = optimize(original, "optu-v1", {"rules": False})
    text = explained_listing(original, response)
    assert "none: it computes the original as written" in text


def test_the_optimizers_provenance_pairs_values_that_are_equal():
    original = capture(lambda a, w1, w2, b: jnp.tanh((a * 1.0) @ w1 + b) @ (w2 * 2.0), *ARGS)
    response = optimize(original, "optu-v1")
    provenance = response["provenance"]
    assert len(provenance) >= 2 and set(provenance.values()) <= {o["name"] for e in original["eqns"] for o in e["out"]}
    args = random_inputs(original, 0, True)
    reference, candidate = every_value(original, args), every_value(response["program"], args)
    for value, stands in provenance.items():  # one e-class: one value (the rules are sound)
        np.testing.assert_allclose(candidate[value], reference[stands], rtol=1e-9, atol=1e-12)
