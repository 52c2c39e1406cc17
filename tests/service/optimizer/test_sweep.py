"""Hardware what-if sweeps: the chosen program changes with the hardware, the HTTP route and the
CLI answer it, and bad grids are 422s naming the field."""
from __future__ import annotations

import functools
import itertools
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from costmodel.profile import ProfileError, load_profile
from service.cli import main
from service.http.app import create_app
from service.optimizer.options import OptimizeOptions
from service.optimizer.sweep import MAX_POINTS, sweep
from wire.capture import capture

NO_VALIDATION = {"validate": False}  # as a request sends it
UNVALIDATED = OptimizeOptions.model_validate(NO_VALIDATION)
OPTU_V1 = load_profile("optu-v1")


@functools.cache
def chain(*dims: int) -> dict:
    """(a @ b) @ c over activations only (no weight is precomputed, so both orders pay per call)."""
    rng = np.random.default_rng(0)
    mats = [(rng.normal(size=(m, n)) / np.sqrt(m)).astype(np.float32) for m, n in itertools.pairwise(dims)]
    return capture(lambda a, b, c: (a @ b) @ c, *mats)


# Re-association pays only when the cores are wide enough (16x128x1024 -> 1024-wide B is cheaper
# to stream than to tile with 64 rows) or when weight loads are nearly free.
ROWS_FLIP = chain(16, 128, 1024, 128)
LOAD_FLIP = chain(128, 256, 1024, 256)


def test_core_size_changes_the_chosen_matmul_order():
    result = sweep(ROWS_FLIP, OPTU_V1, {"gemm.rows": [64, 128, 256]}, UNVALIDATED)
    points = result["points"]
    assert [p["overrides"] for p in points] == [{"gemm.rows": r} for r in (64, 128, 256)]
    assert points[0]["gemms"] == ["16x128x1024", "16x1024x128"]  # left to right, as written
    assert points[1]["gemms"] == points[2]["gemms"] == ["128x1024x128", "16x128x128"]  # b @ c first
    assert points[0]["program_digest"] != points[1]["program_digest"] == points[2]["program_digest"]
    assert result["distinct_programs"] == 2
    assert points[1]["estimate"]["speedup_vs_baseline"] > 1.0
    assert all("matmul-assoc-right" in p["rewrites"] for p in points)  # available everywhere


def test_weight_reprogramming_time_changes_the_chosen_matmul_order():
    result = sweep(LOAD_FLIP, OPTU_V1, {"gemm.weight_load_s": [2e-6, 1e-5, 1e-9]}, UNVALIDATED)
    digests = [p["program_digest"] for p in result["points"]]
    assert digests[0] == digests[1] != digests[2]  # only near-free weight loads flip the order
    times = [p["estimate"]["optimized"]["time_s"] for p in result["points"]]
    assert times[1] > times[0] > times[2]


def test_two_parameter_grid_varies_the_first_slowest():
    result = sweep(ROWS_FLIP, OPTU_V1, {"gemm.rows": [64, 128], "gemm.weight_load_s": [2e-6, 1e-9]},
                   UNVALIDATED)
    assert [tuple(p["overrides"].values()) for p in result["points"]] == [
        (64, 2e-6), (64, 1e-9), (128, 2e-6), (128, 1e-9)]


@pytest.mark.parametrize("params, field", [
    ({"gemm.bogus": [1]}, "params.gemm.bogus"),
    ({"gemm.rows": [64, -1]}, "params.gemm.rows"),
    ({"gemm.rows": [64], "gemm.cols": [64], "gemm.cores": [1]}, "params"),
    ({"gemm.rows": list(range(1, MAX_POINTS + 2))}, "params"),
    ({}, "params"),
])
def test_bad_grids_raise_a_profile_error_naming_the_field(params, field):
    with pytest.raises(ProfileError) as err:
        sweep(ROWS_FLIP, OPTU_V1, params, UNVALIDATED)
    assert err.value.field == field


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), raise_server_exceptions=False)


def test_sweep_route_answers_every_point(client):
    r = client.post("/v1/sweep", json={"program": ROWS_FLIP, "hardware": "optu-v1",
                                       "params": {"gemm.rows": [64, 128]}, "options": NO_VALIDATION})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["points"]) == 2 and body["distinct_programs"] == 2
    assert {"overrides", "estimate", "kernels", "rewrites", "program_digest"} <= set(body["points"][0])


@pytest.mark.parametrize("params, field", [
    ({"gemm.bogus": [1, 2]}, "params.gemm.bogus"),
    ({"gemm.rows": list(range(1, 6)), "gemm.cols": list(range(1, 7))}, "params"),
])
def test_sweep_route_rejects_bad_grids_with_422_naming_the_field(client, params, field):
    r = client.post("/v1/sweep", json={"program": ROWS_FLIP, "params": params})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["field"] == field


@pytest.mark.parametrize("params", [{}, {"gemm.rows": [64], "gemm.cols": [64], "gemm.cores": [1]},
                                    {"gemm.rows": []}])
def test_sweep_grids_the_schema_rules_out_are_refused_by_the_request_model(client, params):
    # one or two fields, each with at least one value: the OpenAPI schema says so (minProperties...)
    r = client.post("/v1/sweep", json={"program": ROWS_FLIP, "params": params})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", "params"]


def test_sweep_route_rejects_non_numeric_values(client):
    r = client.post("/v1/sweep", json={"program": ROWS_FLIP, "params": {"gemm.rows": ["wide"]}})
    assert r.status_code == 422


def test_cli_sweep_prints_one_row_per_point(tmp_path, capsys):
    path = tmp_path / "chain.json"
    path.write_text(json.dumps({"program": ROWS_FLIP, "options": NO_VALIDATION}))
    assert main(["sweep", str(path), "--param", "gemm.rows=64,128,256", "--hardware", "optu-v1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["gemm.rows", "optimized", "baseline", "speedup"]
    assert [line.split()[0] for line in lines[1:4]] == ["64", "128", "256"]
    assert "16x1024x128" in lines[1] and "128x1024x128" in lines[2]
    assert lines[4].startswith("2 distinct program(s) over 3 point(s)")


def test_cli_sweep_reports_an_unknown_field(tmp_path, capsys):
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(ROWS_FLIP))
    assert main(["sweep", str(path), "--param", "gemm.bogus=1,2"]) == 2  # bad input (documented exit codes)
    assert "gemm.bogus" in capsys.readouterr().err
