"""Observability: Prometheus series after a few requests, per-app registries, and the JSON
access log line carrying the request id."""
from __future__ import annotations

import io
import json
import logging
import re

import pytest
from fastapi.testclient import TestClient
from prometheus_text import sample
from wire_examples import NEGATE as PROGRAM

from service.http.app import create_app
from service.http.metrics import JsonFormatter
from service.http.settings import Settings


@pytest.fixture
def client(tmp_path):
    return TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path))), raise_server_exceptions=False)


def test_metrics_expose_requests_latency_stages_cache_queue_and_restarts(client):
    for _ in range(2):  # a miss, then a hit
        assert client.post("/v1/optimize", json={"program": PROGRAM}).status_code == 200
    assert client.get("/v1/hardware/optu-v1").status_code == 200
    assert client.get("/v1/hardware/no-such").status_code == 404
    client.app.state.metrics.set_queue_depth(3)
    client.app.state.metrics.inc_worker_restarts()
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert sample(text, "optu_requests_total", route="/v1/optimize", method="POST", status="200") == 2
    # Routes are labelled by template, so arbitrary names cannot mint new series.
    assert sample(text, "optu_requests_total", route="/v1/hardware/{name}", method="GET", status="404") == 1
    assert sample(text, "optu_cache_lookups_total", result="hit") == 1
    assert sample(text, "optu_cache_lookups_total", result="miss") == 1
    assert sample(text, "optu_optimize_latency_seconds_count", cache="hit") == 1
    assert sample(text, "optu_optimize_latency_seconds_bucket", cache="miss", le="+Inf") == 1
    for stage in ("typecheck", "saturate", "extract", "validate"):  # only the computed response
        assert sample(text, "optu_stage_seconds_count", stage=stage) == 1
    assert sample(text, "optu_queue_depth") == 3
    assert sample(text, "optu_worker_restarts_total") == 1


def test_each_app_has_its_own_registry(client, tmp_path):
    other = TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path / "other"))))
    client.get("/healthz")
    assert sample(client.get("/metrics").text, "optu_requests_total", route="/healthz", method="GET",
                  status="200") == 1
    assert "/healthz" not in other.get("/metrics").text


@pytest.fixture
def access_log():
    """The access log's lines, rendered by the service's own formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("optu.access")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_one_json_log_line_per_request_with_its_id(client, access_log):
    r = client.post("/v1/optimize", json={"program": PROGRAM}, headers={"X-Request-ID": "req-42"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "req-42"
    lines = [json.loads(line) for line in access_log.getvalue().splitlines()]
    assert len(lines) == 1
    line = lines[0]
    assert line["request_id"] == "req-42" and line["route"] == "/v1/optimize" and line["status"] == 200
    assert line["cache"] == "miss" and line["latency_s"] > 0 and line["level"] == "INFO"


def test_a_missing_or_unusable_request_id_is_generated(client, access_log):
    for headers in ({}, {"X-Request-ID": "x" * 500}):
        r = client.get("/v1/hardware/no-such", headers=headers)
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    lines = [json.loads(line) for line in access_log.getvalue().splitlines()]
    assert [(line["status"], line["cache"]) for line in lines] == [(404, None), (404, None)]
