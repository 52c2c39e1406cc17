"""The typed job status and request options name the keys their API models document: what the
stores build and the workers read cannot drift from the schema."""
from __future__ import annotations

import pytest

from service.http.job_routes import JobProgress, JobStatus
from service.jobqueue.states import JobProgressJSON, JobStatusJSON, job_status
from service.optimizer.options import OptimizeOptions, OptionsJSON
from tests.typed_json import model_keys, undeclared

PAIRS = [(JobStatusJSON, JobStatus), (JobProgressJSON, JobProgress), (OptionsJSON, OptimizeOptions)]


@pytest.mark.parametrize("typed, model", PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_each_typed_form_has_the_models_keys(typed, model):
    every, required = model_keys(model)
    assert set(typed.__annotations__) == every
    assert required <= set(typed.__required_keys__)  # a key the model defaults, the stores always write


@pytest.mark.parametrize("state", ["queued", "running", "succeeded"])
def test_a_status_a_store_builds_holds_the_keys_its_type_declares(state):
    status = job_status("j", state, {"stage": "saturate", "egraph_nodes": 12}, 1.5, None)
    assert undeclared(status, JobStatusJSON, "status") == []
    assert JobStatus.model_validate(status).progress.stage == ("done" if state == "succeeded" else "saturate")
