"""The HTTP app through FastAPI's TestClient: the optimize route, every error status, hardware and
health endpoints, and the OpenAPI contract."""
from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from wire_examples import MATMUL_SCALE as TINY

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from costmodel.profile import list_profiles
from service.http.api_models import OptimizeRequest
from service.http.app import create_app
from service.http.settings import Settings
from service.optimizer import pipeline
from wire.capture import capture


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), raise_server_exceptions=False)


def tiny(**changes) -> dict:
    program = copy.deepcopy(TINY)
    program.update(changes)
    return program


def test_optimize_answers_every_response_field(client):
    r = client.post("/v1/optimize", json={"program": TINY, "options": {"validate": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) >= {"id", "program", "kernels", "estimate", "validation", "report", "cache"}
    assert body["validation"]["status"] == "passed"
    assert body["estimate"]["hardware"] == "optu-v1"
    assert {"naive", "baseline", "optimized", "speedup_vs_baseline", "lower_bound"} <= set(body["estimate"])


def test_pipeline_sees_exactly_the_json_program_the_client_sent(client):
    body = json.dumps({"program": TINY})
    r = client.post("/v1/optimize", content=body, headers={"content-type": "application/json"})
    assert r.json()["id"] == pipeline.optimize(json.loads(body)["program"])["id"]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_request_model_round_trips_captured_programs_unchanged(name):
    fn, args = ZOO[name]()
    body = json.dumps({"program": capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])})
    parsed = OptimizeRequest.model_validate_json(body).program
    assert parsed.model_dump(mode="json", by_alias=True) == json.loads(body)["program"]


def test_malformed_json_is_400(client):
    r = client.post("/v1/optimize", content=b'{"program": [', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["detail"]


def test_body_without_json_content_type_is_400(client):
    r = client.post("/v1/optimize", content=json.dumps({"program": TINY}), headers={"content-type": "text/plain"})
    assert r.status_code == 400 and "application/json" in r.json()["detail"]


def test_unknown_format_version_is_400_naming_it(client):
    r = client.post("/v1/optimize", json={"program": tiny(format="optu.jaxpr/v2")})
    assert r.status_code == 400
    assert "optu.jaxpr/v2" in r.json()["detail"] and "optu.jaxpr/v1" in r.json()["detail"]


def test_undefined_variable_is_422_naming_eqn_and_field(client):
    program = tiny()
    program["eqns"][1]["in"][1] = "nope"
    r = client.post("/v1/optimize", json={"program": program})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert (detail["eqn"], detail["field"]) == (1, "in[1]") and "nope" in detail["message"]


def test_use_before_definition_cycle_is_422(client):
    program = tiny()
    program["eqns"][0]["in"][0] = "e"  # e is defined by the later equation: a cycle
    r = client.post("/v1/optimize", json={"program": program})
    assert r.status_code == 422 and r.json()["detail"]["eqn"] == 0


def test_shape_mismatch_is_422_naming_eqn_and_field(client):
    program = tiny()
    program["eqns"][0]["out"][0]["shape"] = [4, 15]
    r = client.post("/v1/optimize", json={"program": program})
    assert r.status_code == 422
    assert (r.json()["detail"]["eqn"], r.json()["detail"]["field"]) == (0, "out[0]")


def test_schema_error_names_the_field(client):
    program = tiny()
    del program["eqns"][1]["out"]
    r = client.post("/v1/optimize", json={"program": program})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "program", "eqns", 1, "out"]


def test_too_many_equations_is_422_counting_nested_bodies():
    fn, args = ZOO["lstm_scan"]()
    program = capture(fn, *args)
    assert len(program["eqns"]) < 5  # only the scan body makes it large
    small = TestClient(create_app(Settings(max_equations=5)))
    r = small.post("/v1/optimize", json={"program": program})
    assert r.status_code == 422 and r.json()["detail"]["field"] == "program.eqns"
    assert "limit is 5" in r.json()["detail"]["message"]


def test_oversize_body_is_413_by_header_and_by_actual_size():
    small = TestClient(create_app(Settings(max_body_bytes=300)))
    r = small.post("/v1/optimize", json={"program": tiny()})
    assert r.status_code == 413 and "300" in r.json()["detail"]
    # A chunked body declares no Content-Length; the bytes actually received are counted.
    r = small.post("/v1/optimize", content=(b"x" * 200 for _ in range(5)),
                   headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_body_under_the_limit_passes_the_size_check():
    body = json.dumps({"program": TINY}).encode()
    r = TestClient(create_app(Settings(max_body_bytes=len(body)))).post(
        "/v1/optimize", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("name", ["nope", "../costmodel/profiles/optu-v1", "/etc/passwd"])
def test_unknown_hardware_name_is_404_naming_it_and_never_a_path(client, name):
    r = client.post("/v1/optimize", json={"program": TINY, "hardware": name})
    assert r.status_code == 404 and repr(name) in r.json()["detail"]


def test_invalid_inline_profile_is_422_naming_the_field(client):
    profile = client.get("/v1/hardware/optu-v1").json()
    profile["gemm"]["rows"] = -1
    r = client.post("/v1/optimize", json={"program": TINY, "hardware": profile})
    assert r.status_code == 422 and r.json()["detail"]["field"] == "hardware.gemm.rows"


@pytest.mark.parametrize("section, field", [("memory", "hbm_bw_bytes_per_s"), ("memory", "sram_bw_bytes_per_s"),
                                            ("gemm", "clock_hz"), ("vector", "flops_per_s")])
def test_a_profile_that_leaves_a_resource_without_a_floor_is_422_naming_the_field(client, section, field):
    """A zero rate makes that resource's minimum undefined: refused, never a bound of 0 or inf."""
    profile = client.get("/v1/hardware/optu-v1").json()
    profile[section][field] = 0
    r = client.post("/v1/optimize", json={"program": TINY, "hardware": profile})
    assert r.status_code == 422 and r.json()["detail"]["field"] == f"hardware.{section}.{field}"


def test_inline_profile_is_used(client):
    profile = client.get("/v1/hardware/optu-v1").json() | {"name": "custom"}
    r = client.post("/v1/optimize", json={"program": TINY, "hardware": profile})
    assert r.status_code == 200 and r.json()["estimate"]["hardware"] == "custom"


@pytest.mark.parametrize("body, loc", [
    ({"program": TINY, "options": {"fp_mode": "fast"}}, ["body", "options", "fp_mode"]),
    ({"program": TINY, "options": {"iter_limit": -1}}, ["body", "options", "iter_limit"]),
    ({"program": TINY, "option": {}}, ["body", "option"]),
    ({"hardware": "optu-v1"}, ["body", "program"]),
])
def test_invalid_request_fields_are_422_naming_them(client, body, loc):
    r = client.post("/v1/optimize", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc


@pytest.mark.parametrize("content", [b"", b"null", b"[1]", b'"x"', b"[" * 100_000, b'{"program": null}',
                                     b'{"program": {"format": "optu.jaxpr/v1"}}', b"\xff\xfe"])
def test_garbage_bodies_are_4xx(client, content):
    r = client.post("/v1/optimize", content=content, headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, r.text


# Python's json (and so the server) accepts NaN/Infinity tokens, so they are fair game too.
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 40) | st.floats()
                     | st.text(max_size=6), lambda c: st.lists(c, max_size=3)
                     | st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=6)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.integers(0, 6), min_size=1, max_size=4), value=_JSON)
def test_a_mutated_program_never_makes_the_server_fail(client, path, value):
    program = tiny()
    node = program
    for step in path[:-1]:  # walk down the program choosing children by index, then replace one
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        if not children or not isinstance(children[step % len(children)][1], (dict, list)):
            break
        node = children[step % len(children)][1]
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    if keys:
        node[keys[path[-1] % len(keys)]] = value
    r = client.post("/v1/optimize", content=json.dumps({"program": program}),
                    headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 404, 422), r.text


def test_non_finite_numbers_echoed_in_a_422_still_render():
    body = json.dumps({"program": TINY, "options": {"iter_limit": float("nan")}})
    r = TestClient(create_app(), raise_server_exceptions=False).post(
        "/v1/optimize", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "options", "iter_limit"]


def test_hardware_list_names_every_profile_with_its_description(client):
    body = client.get("/v1/hardware").json()
    assert [p["name"] for p in body] == list_profiles()
    assert all(p["description"] for p in body)


def test_hardware_profile_by_name_and_404_naming_unknown(client):
    assert client.get("/v1/hardware/optu-v1").json()["name"] == "optu-v1"
    r = client.get("/v1/hardware/nope")
    assert r.status_code == 404 and "'nope'" in r.json()["detail"]


@pytest.mark.parametrize("name", list_profiles())
def test_a_profile_shows_where_each_number_comes_from(client, name):
    profile = client.get(f"/v1/hardware/{name}").json()
    labels = profile["provenance"]
    numbers = {f"{section}.{key}" if section else key for section, fields in
               [("", profile), *((s, profile[s]) for s in ("gemm", "vector", "memory", "kernel")),
                ("vector.op_weights", profile["vector"]["op_weights"])]
               for key, value in fields.items() if isinstance(value, (int, float))}
    assert numbers and numbers <= set(labels)
    assert all(bool(label["source"]) != bool(label["assumed"] and label["reason"]) for label in labels.values())
    if name == "optu-v1":
        assert labels["kernel.max_gemms"]["assumed"] and labels["gemm.weight_load_s"]["source"]


def test_health_and_readiness(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_readiness_fails_when_the_default_profile_is_missing():
    r = TestClient(create_app(Settings(default_hardware="missing"))).get("/readyz")
    assert r.status_code == 503 and "missing" in r.json()["reason"]


def test_openapi_documents_the_optimize_request(client):
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/optimize"]["post"]
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/OptimizeRequest")
    request = spec["components"]["schemas"]["OptimizeRequest"]
    assert set(request["properties"]) == {"program", "hardware", "options"}
    assert "validate" in spec["components"]["schemas"]["OptimizeOptions"]["properties"]
    assert {"400", "413", "422"} <= set(post["responses"])
    assert client.get("/docs").status_code == 200


def test_openapi_describes_every_field_of_the_optimize_response(client):
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    ok = spec["paths"]["/v1/optimize"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    seen, pending, undocumented = set(), [ok["$ref"].rsplit("/", 1)[1]], []
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for field, prop in schemas[name].get("properties", {}).items():
            if not prop.get("description"):
                undocumented.append(f"{name}.{field}")
            pending += [ref.rsplit("/", 1)[1] for ref in _refs(prop)]
    assert {"OptimizeResponse", "Kernel", "CostEstimate", "Validation", "Report", "EgraphStats"} <= seen
    assert undocumented == []


def _refs(schema) -> list[str]:
    """Every $ref inside a JSON schema fragment."""
    if isinstance(schema, dict):
        return [schema["$ref"]] if "$ref" in schema else [r for v in schema.values() for r in _refs(v)]
    return [r for v in schema for r in _refs(v)] if isinstance(schema, list) else []


def test_bare_nan_token_in_a_program_is_a_422_naming_it_not_silently_respelled(client):
    program = {"format": "optu.jaxpr/v1", "inputs": [{"name": "a", "shape": [2], "dtype": "float32"}],
               "eqns": [{"op": "mul", "in": ["a", {"lit": float("nan"), "dtype": "float32"}],
                         "out": [{"name": "b", "shape": [2], "dtype": "float32"}]}],
               "outputs": ["b"]}
    body = json.dumps({"program": program})  # Python writes the bare token NaN
    assert "NaN" in body
    response = client.post("/v1/optimize", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert "nan" in json.dumps(response.json()["detail"]).lower()


def test_hardware_overrides_change_the_estimate_and_unknown_fields_are_named(client):
    program = {"format": "optu.jaxpr/v1",
               "inputs": [{"name": "a", "shape": [64, 64], "dtype": "float32"},
                          {"name": "b", "shape": [64, 64], "dtype": "float32"}],
               "eqns": [{"op": "dot_general", "in": ["a", "b"], "out": [{"name": "c", "shape": [64, 64],
                                                                        "dtype": "float32"}],
                         "params": {"dimension_numbers": [[[1], [0]], [[], []]]}}],
               "outputs": ["c"]}
    default = client.post("/v1/optimize", json={"program": program}).json()
    slow = client.post("/v1/optimize", json={"program": program, "hardware": {
        "base": "optu-v1", "overrides": {"gemm.weight_load_s": 1e-3}}})
    assert slow.status_code == 200
    assert slow.json()["estimate"]["optimized"]["time_s"] > 10 * default["estimate"]["optimized"]["time_s"]
    bad = client.post("/v1/optimize", json={"program": program, "hardware": {"overrides": {"gemm.nope": 1}}})
    assert bad.status_code == 422 and "gemm.nope" in json.dumps(bad.json())


def test_the_apps_own_limits_reach_the_optimizer(tmp_path):
    """The app passes its settings' defaults and caps in the options; nothing below reads them."""
    strict = TestClient(create_app(Settings(workers=0, cache_dir=str(tmp_path), max_iter_limit=1,
                                            default_time_limit_s=7.0)))
    fn, args = ZOO["rnn_unrolled"]()  # saturates in 9 iterations when let
    r = strict.post("/v1/optimize", json={"program": capture(fn, *args), "options": {"iter_limit": 50}})
    assert r.status_code == 200, r.text
    assert r.json()["report"]["egraph"]["iterations"] == 1


def test_only_the_app_the_client_and_the_cli_read_process_settings():
    readers = set()
    for path in Path(pipeline.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Name) and n.id == "get_settings" for n in ast.walk(tree)):
            readers.add(path.name)
    assert readers <= {"app.py", "client.py", "cli.py", "settings.py"}, readers


@pytest.mark.integration  # a fresh interpreter: what importing the module does, alone
def test_importing_the_app_module_builds_no_app_and_creates_no_directory(tmp_path):
    import os
    import subprocess
    import sys

    cache = tmp_path / "cache"
    code = "import service.http.app as m; assert not hasattr(m, 'app'), 'an app made at import'"
    env = {**os.environ, "OPTU_CACHE_DIR": str(cache), "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=tmp_path, env=env)
    assert not cache.exists()
    create_app(Settings(cache_dir=str(cache), workers=0))  # the factory is what makes one
    assert cache.is_dir()
