"""The OpenAPI schema is the contract: schemathesis, every check on, seeded, against a live loopback
server, over every route (its coverage, fuzzing and stateful phases): 0 failures. Its one reading
made explicit (schemathesis.toml) is held to account by the check in schemathesis_checks.py."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from service.http.devserver import running_server

HERE = Path(__file__).parent
CHECKS = HERE / "schemathesis_checks.py"


@pytest.mark.integration
def test_every_schemathesis_check_passes_on_every_route(tmp_path):
    # OPTU_WORKERS=0 optimizes on the server's threads: no pool to fill, so every 503 would be a fault.
    with running_server({"OPTU_WORKERS": "0", "OPTU_CACHE_DIR": str(tmp_path / "cache")}, quiet=True) as (url, _):
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--no-color", "--config-file", str(HERE / "schemathesis.toml"),
             "run", f"{url}/openapi.json", "--checks", "all", "--seed", "7", "--max-examples", "25",
             "--request-timeout", "120", "--generation-database", "none"],
            # its replay store lands in the working directory: the test's own, not the checkout
            cwd=tmp_path, env={**os.environ, "SCHEMATHESIS_HOOKS": str(CHECKS)},
            capture_output=True, text=True, timeout=1500)
    out = run.stdout + run.stderr
    counts = re.search(r"(\d+) generated, (\d+) passed", out)
    assert run.returncode == 0 and counts, out[-6000:]
    generated, passed = map(int, counts.groups())
    assert passed == generated >= 300, out[-3000:]  # a few hundred cases at least, all of them passing
    assert "refusals_of_valid_requests_are_located" not in out  # the added check ran and never failed


def _located_refusal_check():
    spec = importlib.util.spec_from_file_location("schemathesis_checks_under_test", CHECKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.refusals_of_valid_requests_are_located


def _case(positive: bool) -> SimpleNamespace:
    mode = SimpleNamespace(is_positive=positive)
    return SimpleNamespace(meta=SimpleNamespace(generation=SimpleNamespace(mode=mode)))


def _response(status: int, detail: object) -> SimpleNamespace:
    return SimpleNamespace(status_code=status, content=json.dumps({"detail": detail}).encode())


def test_the_added_check_fails_a_schema_valid_request_the_request_models_refuse():
    check = _located_refusal_check()
    pydantic_detail = [{"loc": ["body", "options", "rules"], "msg": "Input should be a valid boolean"}]
    with pytest.raises(AssertionError, match="request models refused it"):
        check(None, _response(422, pydantic_detail), _case(positive=True))


def test_the_added_check_passes_a_located_refusal_and_ignores_negative_cases():
    check = _located_refusal_check()
    located = {"eqn": 0, "field": "in[1]", "message": "undefined variable 'b'"}
    assert check(None, _response(422, located), _case(positive=True)) is None
    assert check(None, _response(422, [{"loc": ["body"]}]), _case(positive=False)) is None
    assert check(None, _response(200, {}), _case(positive=True)) is None
