"""Schemathesis against the live loopback server's OpenAPI schema: generated requests to the
optimize and hardware routes never get a 5xx."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.integration  # a real server or subprocess

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency: pip install -e '.[dev]'")
from schemathesis.checks import not_a_server_error  # noqa: E402

ROUTES = ("/v1/optimize", "/v1/hardware", "/v1/hardware/{name}")


def _operations(server_url: str) -> dict[str, object]:
    schema = schemathesis.openapi.from_url(server_url + "/openapi.json", wait_for_schema=30)
    ops = {}
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path in ROUTES:
            ops[f"{op.method.upper()} {op.path}"] = op
    return ops


@pytest.mark.parametrize("route", ["POST /v1/optimize", "GET /v1/hardware", "GET /v1/hardware/{name}"])
def test_generated_requests_never_get_a_server_error(server_url, route):
    operation = _operations(server_url)[route]

    # pytest's schemathesis plugin does not load under this pytest; drive hypothesis directly.
    @settings(max_examples=40 if "optimize" in route else 15, deadline=None, derandomize=True,
              database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def check(case):
        case.call_and_validate(checks=[not_a_server_error], timeout=60)

    check()
