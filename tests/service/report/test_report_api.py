"""The report API on the app in-process: a result /v1/optimize or a job returned is reportable by
its id, a deadline's stopgap too (it is kept apart from the cache's hits), and an unknown id is a
404 that says what ids are."""
from __future__ import annotations

import copy
import re

import pytest
from fastapi.testclient import TestClient
from polling import poll_until
from report_example import HARDWARE

from service.http.app import create_app
from service.http.cache import SQLiteCache
from service.http.settings import Settings

TITLE = r"<title>[kp]\d+</title>"  # a kernel's box in a dataflow graph


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path)))) as client:
        yield client


@pytest.mark.integration
def test_an_optimize_result_is_reported_by_its_id_and_an_unknown_id_is_a_404(client, program):
    answer = client.post("/v1/optimize", json={"program": program, "hardware": HARDWARE}).json()
    reply = client.get(f"/v1/results/{answer['id']}/report")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    assert answer["id"] in reply.text and all(f"<title>k{k['id']}</title>" in reply.text for k in answer["kernels"])
    missing = client.get(f"/v1/results/{'0' * 64}/report")
    assert missing.status_code == 404 and "no result with id '000" in missing.json()["detail"]


@pytest.mark.integration
def test_a_jobs_result_is_reported_and_an_unknown_job_is_a_404(client, program):
    job = client.post("/v1/jobs", json={"program": program, "hardware": HARDWARE}).json()
    done = poll_until(lambda: client.get(job["status_url"]).json(),
                      lambda s: s["state"] in ("succeeded", "failed", "cancelled"))
    assert done["state"] == "succeeded", done
    reply = client.get(f"/v1/jobs/{job['id']}/report")
    assert reply.status_code == 200 and job["id"] in reply.text
    by_id = client.get(f"/v1/results/{job['id']}/report")  # the same result, stored under its id
    assert by_id.status_code == 200 and sorted(re.findall(TITLE, by_id.text)) == sorted(re.findall(TITLE, reply.text))
    assert client.get("/v1/jobs/nope/report").status_code == 404


def test_a_deadline_stopgap_is_kept_for_reports_but_never_answered_as_a_hit(tmp_path, response):
    cache = SQLiteCache(tmp_path)
    stopgap = copy.deepcopy(response)
    stopgap["report"]["egraph"]["stop_reason"] = "time_limit"
    cache.put(stopgap["id"], stopgap)
    assert cache.get(stopgap["id"]) is None  # a retry with more time computes afresh
    assert cache.stored(stopgap["id"]) == stopgap
    cache.put(response["id"], response)  # the full answer, once computed, is what a report shows
    assert cache.stored(response["id"]) == response and cache.get(response["id"])["cache"] == "hit"
    assert cache.stored("f" * 64) is None
