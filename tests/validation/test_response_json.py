"""The typed response names the keys the response's pydantic models document, required where they
require them, and a response the pipeline builds holds no key its types leave out: the stages'
dicts and the schema cannot drift apart."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from costmodel.formulas import Cost
from lowering import kernel_json
from service.optimizer import response as models
from service.optimizer.pipeline import optimize
from tests.typed_json import model_keys, undeclared
from validation import response_json
from wire.capture import capture

PAIRS = [(Cost, models.CostEstimate), (kernel_json.BufferJSON, models.Buffer), (kernel_json.KernelJSON, models.Kernel),
         (kernel_json.LowerBoundJSON, models.LowerBound), (kernel_json.EstimatesJSON, models.Estimates),
         (response_json.FusionEgraphJSON, models.FusionEgraph), (response_json.EgraphJSON, models.EgraphStats),
         (response_json.ExtractionJSON, models.Extraction), (response_json.EquationCountsJSON, models.EquationCounts),
         (response_json.ReportJSON, models.Report), (response_json.ResponseJSON, models.OptimizeResponse)]


@pytest.mark.parametrize("typed, model", PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_each_typed_part_has_the_models_keys_required_alike(typed, model):
    assert (set(typed.__annotations__), set(typed.__required_keys__)) == model_keys(model)


def _scan_with_matmuls(xs, w1, w2):
    def cell(h, x):
        h = jnp.tanh((h @ w1) @ w2 + x)
        return h, h
    return lax.scan(cell, jnp.zeros((4, 16), jnp.float32), xs)


def test_a_response_the_pipeline_builds_holds_only_the_keys_its_types_declare():
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(5, 4, 16)).astype(np.float32), rng.normal(size=(16, 32)).astype(np.float32),
            rng.normal(size=(32, 16)).astype(np.float32))
    response = optimize(capture(_scan_with_matmuls, *args, weight_argnums=(1, 2)), "optu-v1", {"time_limit_s": 20})
    assert response["report"]["control_flow"], "the scan's body was reported"
    assert undeclared(response, response_json.ResponseJSON, "response") == []


def test_the_check_names_a_key_the_types_leave_out():
    report = {"eqn": 0, "op": "scan", "param": "jaxpr", "validation": None, "rewrites": {}, "accepted": False,
              "reason": "unchanged", "equations": {}, "control_flow": [{"surprise": 1}]}
    assert undeclared(report, response_json.NestedReportJSON, "response") == [
        "response.control_flow[0].surprise: not declared", *(f"response.control_flow[0].{k}: missing" for k in
                                                              response_json.NestedReportJSON.__required_keys__)]
