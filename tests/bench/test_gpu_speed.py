"""The GPU clock check's steps on this CPU: the exported programs are the ones optimized, compute
what the wire programs compute, and are timed and summarized as the GPU machine will."""
from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

from bench import gpu_speed
from bench.report import spearman
from bench.models.registry import capture_model
from lowering.precompute import split_weight_work
from service.optimizer.pipeline import optimize
from wire.execute import program_to_callable

pytestmark = pytest.mark.integration

MODELS = ["mlp2", "matmul_chain"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    gpu_speed.prepare(MODELS, out, min_call_s=0)  # as registered: this CPU runs them
    return out


def test_each_model_is_exported_as_written_and_as_returned_with_its_estimate(exports):
    cases = {c["model"]: c for c in json.loads((exports / "manifest.json").read_text())["cases"]}
    assert sorted(cases) == sorted(MODELS)
    for name, case in cases.items():
        program, _ = capture_model(name)
        estimate = optimize(program, "gpu-roofline", {"validate": False})["estimate"]
        assert case["estimated"]["speedup"] == estimate["speedup_vs_baseline"]
        assert case["estimated"]["dispatch_s"] == estimate["dispatch_s"] > 0
        for role in ("original", "returned"):
            assert (exports / case[role]["per_call"]).is_file()
            assert case[role]["inputs"] == [{"shape": s["shape"], "dtype": s["dtype"]} for s in program["inputs"]]


def test_an_exported_program_computes_what_its_wire_program_computes(exports):
    """The weight-only part run ahead, then the per-call part: the original program's outputs."""
    case = json.loads((exports / "manifest.json").read_text())["cases"][0]
    program, _ = capture_model(case["model"])
    inputs = gpu_speed._inputs(case["original"]["inputs"], seed=3)
    exported = gpu_speed._runner(case["original"], exports, inputs)()
    expected = program_to_callable(program)(*inputs)
    assert len(exported) == len(expected)
    for got, want in zip(exported, expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert split_weight_work(program)[0]["outputs"], "the check means little without weight-only work"


def test_timing_on_this_cpu_gives_a_row_per_model_and_the_rank_correlation(exports, tmp_path):
    result = gpu_speed.time_programs(exports, tmp_path / "result.json", budget_s=0.05, rounds=2, require_gpu=False)
    assert json.loads((tmp_path / "result.json").read_text()) == json.loads(json.dumps(result))
    assert [r["model"] for r in result["rows"]] == MODELS
    for row in result["rows"]:
        assert row["original_s"] > 0 and row["returned_s"] > 0
        assert row["measured_speedup"] == row["original_s"] / row["returned_s"]
        assert row["pallas_speedup"] == row["original_s"] / row["pallas_s"]
    assert result["summary"]["models"] == 2 and math.isnan(result["summary"]["spearman"])  # two models: no rank
    assert "| mlp2" in gpu_speed.table(result)


def test_timing_refuses_a_machine_without_a_gpu_unless_told_it_is_a_dry_run(exports):
    if jax.default_backend() == "gpu":
        pytest.fail("this suite runs on CPU machines")
    with pytest.raises(SystemExit, match="no GPU"):
        gpu_speed.time_programs(exports, None)


@pytest.mark.parametrize("xs, ys, expected", [
    ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    ([1, 2, 3, 4], [1, 3, 2, 4], 0.8),
    ([1, 1, 2, 3], [5, 6, 7, 8], 0.9486832980505138),  # tied xs share the mean rank
])
def test_spearman_is_the_correlation_of_ranks(xs, ys, expected):
    assert spearman(xs, ys) == pytest.approx(expected)


def test_spearman_is_undefined_below_three_pairs_or_on_a_constant_side():
    assert math.isnan(spearman([1, 2], [2, 1]))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_the_pallas_program_is_written_as_wire_programs_that_compute_the_returned_one(exports):
    """Its kernels' Pallas form, run here in interpret mode: the returned program's outputs (the
    same algebra, so float32 agrees to rounding at the outputs' scale)."""
    for case in json.loads((exports / "manifest.json").read_text())["cases"]:
        assert case["pallas"]["per_call"].endswith(".json") and case["pallas_kernels"] >= 0
        program, _ = capture_model(case["model"])
        returned = optimize(program, "gpu-roofline", {"validate": False})["program"]
        inputs = gpu_speed._inputs(case["original"]["inputs"], seed=4)
        got = gpu_speed._runner(case["pallas"], exports, inputs)()
        for g, want in zip(got, program_to_callable(returned)(*inputs)):
            scale = float(np.max(np.abs(np.asarray(want))))
            np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-5, atol=1e-5 * scale)
    assert any(c["pallas_kernels"] for c in json.loads((exports / "manifest.json").read_text())["cases"]), \
        "the check means little when no model carries a Pallas kernel"
