"""Bearer-token auth: /v1/* closed without the configured token, health/metrics/docs open."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from wire_examples import NEGATE as PROGRAM

from service.http.app import create_app
from service.http.settings import Settings


@pytest.fixture
def client(tmp_path):
    app = create_app(Settings(api_token="s3cret", workers=0, cache_dir=str(tmp_path)))
    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer s3cre"},
                                     {"Authorization": "Basic s3cret"}, {"Authorization": "s3cret"},
                                     {"Authorization": "Bearer"}])
@pytest.mark.parametrize("method,path", [("GET", "/v1/hardware"), ("GET", "/v1/hardware/optu-v1"),
                                         ("POST", "/v1/optimize"), ("POST", "/v1/sweep")])
def test_v1_routes_refuse_a_missing_or_wrong_token(client, headers, method, path):
    r = client.request(method, path, headers=headers, json={"program": PROGRAM})
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"


def test_the_right_token_opens_v1(client):
    auth = {"Authorization": "Bearer s3cret"}
    assert client.get("/v1/hardware", headers=auth).status_code == 200
    assert client.get("/v1/hardware/optu-v1", headers={"authorization": "bearer s3cret"}).status_code == 200
    r = client.post("/v1/optimize", headers=auth, json={"program": PROGRAM})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"])
def test_health_metrics_and_docs_stay_open(client, path):
    assert client.get(path).status_code == 200


def test_no_token_configured_means_open(tmp_path):
    client = TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path))))
    assert client.get("/v1/hardware").status_code == 200
