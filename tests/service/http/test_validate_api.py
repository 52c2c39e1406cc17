"""Translation validation as a service: POST /v1/validate on a real server, `optu validate` and
`service.client.validate` give one verdict; programs that cannot be compared get a 422 naming the
program and field."""
from __future__ import annotations

import copy
import json

import httpx
import jax.numpy as jnp
import numpy as np
import pytest

from service.cli import main
from service.client import OptimizeError, validate, validate_programs
from wire.capture import capture

pytestmark = pytest.mark.integration  # a real server or subprocess

X = np.ones((4, 8), np.float32)


def _original(a, b):
    return jnp.tanh(a) * 2.0 + b


def _rewritten(a, b):  # the same in real arithmetic
    return (jnp.tanh(a) + jnp.tanh(a)) + b


def _wrong(a, b):
    return jnp.tanh(a) * 2.0 - b


ORIGINAL, REWRITTEN, WRONG = (capture(f, X, X) for f in (_original, _rewritten, _wrong))


def test_the_server_passes_a_rewrite_and_fails_a_wrong_program(server_url):
    body = {"original": ORIGINAL, "candidate": REWRITTEN}
    r = httpx.post(server_url + "/v1/validate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    verdict = r.json()
    assert verdict["status"] == "passed" and verdict["trials"] == 2 and verdict["reason"]
    assert verdict["tolerance"] == {"float32": 1e-4} and verdict["max_rel_error"] < 1e-9
    wrong = httpx.post(server_url + "/v1/validate", json={"original": ORIGINAL, "candidate": WRONG}, timeout=120)
    assert wrong.json()["status"] == "failed" and "output 0 differs" in wrong.json()["reason"]


def test_exact_mode_and_identical_programs(server_url):
    exact = validate_programs(ORIGINAL, REWRITTEN, server=server_url, fp_mode="exact")
    assert exact["status"] in ("passed", "failed") and exact["criterion"] == "exact"
    same = validate_programs(ORIGINAL, copy.deepcopy(ORIGINAL), server=server_url)
    assert same["status"] == "identical" and same["trials"] == 0


def test_the_client_validates_two_functions_in_process_and_over_http(server_url):
    assert validate(_original, _rewritten, X, X)["status"] == "passed"
    assert validate(_original, _wrong, X, X, server=server_url)["status"] == "failed"


def _unprocessable(server_url: str, body: dict) -> dict:
    r = httpx.post(server_url + "/v1/validate", json=body, timeout=60)
    assert r.status_code == 422, r.text
    return r.json()["detail"]


def test_different_signatures_are_a_422_naming_the_field(server_url):
    other_input = capture(lambda a, b: jnp.tanh(a) * 2.0 + b[:, :4].sum(), X, np.ones((4, 6), np.float32))
    detail = _unprocessable(server_url, {"original": ORIGINAL, "candidate": other_input})
    assert detail["field"] == "candidate.inputs[1]" and "float32[4, 6]" in detail["message"]
    two_outputs = capture(lambda a, b: (_original(a, b), a), X, X)
    detail = _unprocessable(server_url, {"original": ORIGINAL, "candidate": two_outputs})
    assert detail["field"] == "candidate.outputs"


def test_a_program_that_does_not_type_check_is_a_422_naming_which(server_url):
    broken = copy.deepcopy(REWRITTEN)
    broken["eqns"][0]["out"][0]["shape"] = [4, 9]
    detail = _unprocessable(server_url, {"original": ORIGINAL, "candidate": broken})
    assert detail["field"].startswith("candidate") and detail["eqn"] == 0
    detail = _unprocessable(server_url, {"original": broken, "candidate": ORIGINAL})
    assert detail["field"].startswith("original")


@pytest.mark.parametrize("body, where", [
    ({"original": ORIGINAL}, "candidate"),
    ({"original": ORIGINAL, "candidate": REWRITTEN, "fp_mode": "approximate"}, "fp_mode"),
    ({"original": ORIGINAL, "candidate": REWRITTEN, "seed": -1}, "seed"),
    ({"original": ORIGINAL, "candidate": REWRITTEN, "tolerance": 1.0}, "tolerance"),
])
def test_bad_fields_are_422s_naming_them(server_url, body, where):
    detail = _unprocessable(server_url, body)
    assert any(where in e["loc"] for e in detail)


def test_the_cli_exit_code_is_the_verdict(tmp_path, capsys):
    paths = {}
    for name, program in (("original", ORIGINAL), ("rewritten", REWRITTEN), ("wrong", WRONG)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(program))
    assert main(["validate", str(paths["original"]), str(paths["rewritten"])]) == 0
    assert capsys.readouterr().out.startswith("passed: ")
    assert main(["validate", str(paths["original"]), str(paths["wrong"]), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "failed"
    assert main(["validate", str(paths["original"]), str(tmp_path / "missing.json")]) == 3


def test_the_cli_says_inconclusive_with_exit_code_2(tmp_path, capsys):
    def logistic(expanded: bool):
        def fn(x):
            for _ in range(40):
                x = 3.99 * x - 3.99 * x * x if expanded else 3.99 * x * (1.0 - x)
            return x
        return fn

    x = np.full((16,), 0.3, np.float32)
    for name, expanded in (("a", False), ("b", True)):
        (tmp_path / f"{name}.json").write_text(json.dumps(capture(logistic(expanded), x)))
    assert main(["validate", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().out.startswith("inconclusive: ")


def test_in_process_signature_mismatch_raises_with_the_field():
    with pytest.raises(OptimizeError) as err:
        validate_programs(ORIGINAL, capture(lambda a: a, X))
    assert err.value.status == 422 and err.value.detail["field"] == "candidate.inputs"
