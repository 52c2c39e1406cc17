"""The job API on the shared queue (OPTU_QUEUE_URL on the machine's Redis), with no worker taking
jobs: jobs wait queued, the same request is the same job, the queue-depth limit answers 429,
a queued job is cancelled, and the metrics read the queue. (Real workers: tests/service/jobqueue.)"""
from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient
from prometheus_text import sample
from wire_examples import MATMUL_SCALE as PROGRAM
from wire_examples import sum_program

from service.http.app import create_app
from service.http.settings import Settings


@pytest.fixture
def client(queue_url, tmp_path):
    settings = Settings(workers=0, cache_dir=str(tmp_path), queue_url=queue_url, job_queue_depth=2)
    with TestClient(create_app(settings)) as client:
        yield client


def test_jobs_wait_queued_for_a_worker_and_the_depth_limit_answers_429(client):
    first = client.post("/v1/jobs", json={"program": PROGRAM})
    assert first.status_code == 202 and first.json()["state"] == "queued"
    same = client.post("/v1/jobs", json={"program": copy.deepcopy(PROGRAM)}).json()
    assert same["id"] == first.json()["id"] and same["state"] == "queued"
    second = client.post("/v1/jobs", json={"program": sum_program(4, 8)})
    assert second.status_code == 202
    full = client.post("/v1/jobs", json={"program": sum_program(4, 12)})
    assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
    metrics = client.get("/metrics").text
    assert sample(metrics, "optu_jobs_queued") == 2 and sample(metrics, "optu_jobs_running") == 0
    assert sample(metrics, "optu_workers") == 0 and sample(metrics, "optu_job_redeliveries_total") == 0
    job_id = second.json()["id"]
    assert client.get(f"/v1/jobs/{job_id}/result").status_code == 409
    cancelled = client.delete(f"/v1/jobs/{job_id}").json()
    assert cancelled["state"] == "cancelled" and cancelled["error"] == "cancelled by the client"
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 409
    assert client.post("/v1/jobs", json={"program": sum_program(4, 12)}).status_code == 202  # room again
    metrics = client.get("/metrics").text
    assert sample(metrics, "optu_job_duration_seconds_count", state="cancelled") == 1


def test_a_cached_result_finishes_its_job_at_once(client):
    direct = client.post("/v1/optimize", json={"program": PROGRAM}).json()  # computed here, cached
    job = client.post("/v1/jobs", json={"program": PROGRAM}).json()
    assert job["id"] == direct["id"] and job["state"] == "succeeded"
    assert client.get(f"/v1/jobs/{job['id']}/result").json()["program"] == direct["program"]


def test_bad_input_is_refused_at_submit_and_unknown_jobs_are_404(client):
    broken = copy.deepcopy(PROGRAM)
    broken["eqns"][0]["out"][0]["shape"] = [3, 3]
    refused = client.post("/v1/jobs", json={"program": broken})
    assert refused.status_code == 422 and refused.json()["detail"]["eqn"] == 0
    for path in ("/v1/jobs/nope", "/v1/jobs/nope/result"):
        assert client.get(path).status_code == 404
    assert client.delete("/v1/jobs/nope").status_code == 404


def test_an_unreachable_queue_answers_503_not_500(tmp_path):
    settings = Settings(workers=0, cache_dir=str(tmp_path), queue_url="redis://127.0.0.1:1/0")
    with TestClient(create_app(settings)) as client:
        answer = client.post("/v1/jobs", json={"program": PROGRAM})
        assert answer.status_code == 503 and "OPTU_QUEUE_URL" in answer.json()["detail"]
        assert "Retry-After" in answer.headers
        assert client.get("/metrics").status_code == 200  # the gauges read NaN, the scrape still works
        assert client.get("/readyz").status_code == 503 and "OPTU_QUEUE_URL" in client.get("/readyz").json()["reason"]
