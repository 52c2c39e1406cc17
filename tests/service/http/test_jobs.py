"""The job API on the app in-process (no worker pool: jobs run on threads): submit answers 202
at once, the job's state and progress can be polled, its result is what /v1/optimize answers,
the same request names the same job, and bad input is refused at submit, not failed later."""
from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient
from polling import poll_until
from prometheus_text import sample
from wire_examples import MATMUL_SCALE as PROGRAM
from wire_examples import VALIDATED, sum_program

from service.http.app import create_app
from service.http.settings import Settings


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path), job_queue_depth=1))) as client:
        yield client


def wait_state(client, job_id: str, states: set[str]) -> dict:
    return poll_until(lambda: client.get(f"/v1/jobs/{job_id}").json(), lambda s: s["state"] in states)


def test_a_job_succeeds_with_what_optimize_answers_and_the_same_request_is_the_same_job(client):
    submitted = client.post("/v1/jobs", json={"program": PROGRAM})
    assert submitted.status_code == 202, submitted.text
    job = submitted.json()
    assert job["status_url"] == f"/v1/jobs/{job['id']}" and job["state"] in ("queued", "running", "succeeded")
    done = wait_state(client, job["id"], {"succeeded", "failed", "cancelled"})
    assert done["state"] == "succeeded" and done["progress"]["stage"] is not None
    result = client.get(job["result_url"]).json()
    assert result["id"] == job["id"] and result["validation"]["status"] in VALIDATED
    direct = client.post("/v1/optimize", json={"program": PROGRAM}).json()
    assert direct["cache"] == "hit" and direct["program"] == result["program"]
    again = client.post("/v1/jobs", json={"program": copy.deepcopy(PROGRAM)}).json()
    assert again["id"] == job["id"] and again["state"] == "succeeded"


def test_a_running_job_reports_progress_and_is_cancelled_and_a_full_queue_answers_429(client):
    # without a pool a cancelled search stops after its current saturation step: a short limit bounds that
    slow = {"program": sum_program(200, 16), "options": {"time_limit_s": 3, "iter_limit": 100, "node_limit": 10**6}}
    job = client.post("/v1/jobs", json=slow).json()
    running = wait_state(client, job["id"], {"running"})
    assert running["progress"]["stage"] is not None and running["progress"]["elapsed_s"] >= 0
    full = client.post("/v1/jobs", json={"program": PROGRAM})  # the queue holds one job
    assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
    assert client.get(job["result_url"]).status_code == 409  # not finished: no result yet
    cancelled = client.delete(f"/v1/jobs/{job['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 409  # already finished
    assert client.post("/v1/jobs", json={"program": PROGRAM}).status_code == 202  # room again
    metrics = client.get("/metrics").text
    assert sample(metrics, "optu_job_duration_seconds_count", state="cancelled") == 1
    assert sample(metrics, "optu_workers") == 0  # no pool here: jobs run on threads


def test_bad_input_is_refused_at_submit_and_unknown_jobs_are_404(client):
    broken = copy.deepcopy(PROGRAM)
    broken["eqns"][0]["out"][0]["shape"] = [3, 3]
    refused = client.post("/v1/jobs", json={"program": broken})
    assert refused.status_code == 422 and refused.json()["detail"]["eqn"] == 0
    assert client.post("/v1/jobs", json={"program": PROGRAM, "options": {"fp_mode": "fast"}}).status_code == 422
    assert client.post("/v1/jobs", json={"program": PROGRAM, "hardware": "nope"}).status_code == 404
    for path in ("/v1/jobs/nope", "/v1/jobs/nope/result"):
        assert client.get(path).status_code == 404
    assert client.delete("/v1/jobs/nope").status_code == 404
