"""The debugger on a real optimization: with a test-only unsound rule (`tanh(x) -> x`) the kernel-by-
kernel run names the kernel it built and the rule, and rule bisection finds exactly that rule;
programs with different signatures are refused naming the field; `exclude_rules` keeps a rule from
running and refuses names it does not know."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from egglog import i64, rewrite, var
from pydantic import ValidationError

from costmodel.profile import load_profile
from rewrites.registry import NamedRule
from rewrites.terms import Term
from service.optimizer.debug import bisect, debug
from service.optimizer.options import OptimizeOptions
from service.optimizer.pipeline import optimize
from tests.typed_json import undeclared
from validation.debug_json import DebugJSON
from wire.capture import capture
from wire.format import WireError

pytestmark = pytest.mark.slow  # whole models through capture and the pipeline

_x, _e = var("x", Term), var("e", i64)
TANH_IS_IDENTITY = NamedRule("test-tanh-is-identity", "test", "real", rewrite(Term.unary("tanh", _x, _e)).to(_x))
ARGS = (np.ones((16, 32), np.float32), np.ones((32, 32), np.float32), np.ones((32, 8), np.float32),
        np.ones((32,), np.float32))


def _layer(a, w1, w2, b):
    hidden = jax.nn.relu(a @ w1 + b)  # returned too: a kernel output the unsound rule does not touch
    return hidden, jnp.tanh(hidden) @ w2


def _kernels(response):
    return [*({**k, "precompute": True} for k in response["precompute_kernels"]), *response["kernels"]]


def test_the_debugger_names_the_unsound_rule_and_the_kernel_it_built():
    original = capture(_layer, *ARGS)
    response = optimize(original, "optu-v1", {"validate": False}, [TANH_IS_IDENTITY])
    assert "tanh" not in {e["op"] for e in response["program"]["eqns"]}  # the rule fired and was chosen
    report = debug(original, response["program"], load_profile("optu-v1"), OptimizeOptions(), _kernels(response),
                   response["report"]["rewrites"], bisect_rules=True, extra_rules=[TANH_IS_IDENTITY],
                   provenance=response["provenance"])
    assert report["validation"]["status"] == "failed"
    assert undeclared(report, DebugJSON, "report") == []  # the typed findings say all it holds
    first = report["first_divergent"]
    outputs = {o["stands_for"]: o for o in first["outputs"]}
    assert outputs[original["outputs"][1]]["diverges"]
    if original["outputs"][0] in outputs:  # relu's output, written by the same kernel, is right
        assert not outputs[original["outputs"][0]]["diverges"]
    assert "test-tanh-is-identity" in first["rewrites"] and "tanh" in {r["op"] for r in first["replaces"]}
    bisection = report["bisection"]
    assert bisection["status"] == "found" and bisection["rules"] == ["test-tanh-is-identity"]
    built = bisection["kernel"]
    assert "dot_general" in built["ops"] and "tanh" not in built["ops"]
    assert original["outputs"][1] in {o["stands_for"] for o in built["outputs"] if o["diverges"]}


def test_a_bisection_out_of_time_answers_the_failing_rules_it_has_marked_time_limit():
    original = capture(_layer, *ARGS)
    # the whole set, then stop
    found = bisect(original, load_profile("optu-v1"), OptimizeOptions(), [TANH_IS_IDENTITY], time_limit_s=1e-9)
    assert found["status"] == "time_limit" and found["configurations"] == 1
    assert "test-tanh-is-identity" in found["rules"] and found["kernel"] is not None


def test_programs_with_different_signatures_are_refused_naming_the_field():
    original = capture(_layer, *ARGS)
    other = capture(lambda a, w1, w2, b: _layer(a, w1, w2[:, :4], b), *ARGS)
    with pytest.raises(WireError) as err:
        debug(original, other, load_profile("optu-v1"), OptimizeOptions())
    assert err.value.field == "optimized.outputs[1]" and "float32[16, 4]" in err.value.message


def test_an_excluded_rule_does_not_run_and_an_unknown_one_is_refused():
    program = capture(lambda a, w1, w2, b: (a * 1.0) @ w1, *ARGS)
    assert "mul-one" in optimize(program, "optu-v1")["report"]["rewrites"]
    assert "mul-one" not in optimize(program, "optu-v1", {"exclude_rules": ["mul-one"]})["report"]["rewrites"]
    with pytest.raises(ValidationError, match="unknown rule.*no-such-rule"):
        optimize(program, "optu-v1", {"exclude_rules": ["no-such-rule"]})
