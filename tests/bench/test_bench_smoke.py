"""The benchmark scripts run end to end on a quick subset and write what they promise.

Structure and validity only: timings vary with the machine and are never asserted."""
from __future__ import annotations

import json

import pytest

from bench import cpu_speed, run, scaling
from bench.models.registry import LARGE, MODELS, SMALL, build
from bench.report import geomean, update_readme

QUICK = ["mlp2", "matmul_chain", "rnn_unrolled"]


def test_the_registry_holds_the_zoo_and_the_issue_workloads():
    assert set(SMALL) | set(LARGE) == set(MODELS) and len(MODELS) >= 12
    for name in ("bert_1_layer", "bert_12_layers", "gpt_decode_step", "grouped_query_attention",
                 "mlp_mixer_block", "nasrnn", "lstm_scan_large", "resnext_block", "mlp_train_step_large",
                 "matmul_chain_12", "matmul_chain_80"):
        assert name in LARGE
    fn, args, weights = build("mlp2")
    assert callable(fn) and weights == (1, 2, 3, 4)
    with pytest.raises(KeyError, match="unknown model"):
        build("no_such_model")


def test_quality_benchmark_reports_every_number_and_writes_its_files(tmp_path):
    out = tmp_path / "latest.json"
    result = run.main(["--models", *QUICK, "--out", str(out), "--no-readme"])
    saved = json.loads(out.read_text())
    assert [r["model"] for r in saved["models"]] == QUICK
    assert {"python", "jax", "egglog", "processor", "commit"} <= set(saved["machine"])
    for row in result["models"]:
        assert "error" not in row, row.get("traceback")
        for point in ("naive", "baseline", "optimized"):
            assert row[point]["time_s"] > 0 and row[point]["energy_j"] > 0 and row[point]["hbm_bytes"] > 0
        assert row["validation"]["status"] == "passed" and row["validation"]["tolerance_float32"] > 0
        assert row["speedup_vs_baseline"] >= 1.0  # by the optimizer's own estimate
        assert row["optimized"]["kernels"] >= 1 and {"saturate", "extract", "validate"} <= set(row["timings_s"])
    summary = result["summary"]
    assert summary["errors"] == 0 and summary["geomean_speedup_vs_baseline"] >= 1.0
    table = run.table(result["models"], "optu-v1", saved["machine"], summary)
    assert all(f"| {name} |" in table for name in QUICK)


def test_a_failing_model_becomes_a_row_with_its_error():
    row = run.bench_safely("no_such_model", "optu-v1")
    assert "unknown model" in row["error"]
    assert "error:" in run.table([row], "optu-v1", run.machine(), run.summarize([row]))


def test_scaling_benchmark_reports_per_layer_growth_and_the_chain_optimum(tmp_path):
    out = tmp_path / "scaling.json"
    result = scaling.main(["--tiny", "--layers", "1", "2", "--chain", "5", "--chain-limits", "1",
                           "--out", str(out), "--no-readme"])
    points = result["bert"]["points"]
    assert [p["layers"] for p in points] == [1, 2] and json.loads(out.read_text())["bert"]["points"]
    for p in points:
        assert p["enodes"] > 0 and p["per_layer"]["enodes"] == p["enodes"] / p["layers"]
        assert p["saturate_plus_extract_s"] == p["timings_s"]["saturate"] + p["timings_s"]["extract"]
    assert result["bert"]["growth_exponent"]["enodes"] is not None
    chain = result["chain"]
    assert chain["optimum_cost_s"] > 0 and chain["tries"]
    assert "time_to_optimal_s" in chain and "ilp_proved_optimal" in chain


def test_cpu_speed_benchmark_measures_both_programs_interleaved(tmp_path):
    out = tmp_path / "cpu_speed.json"
    result = cpu_speed.main(["--models", "mlp2", "--budget", "0.05", "--out", str(out), "--no-readme"])
    row = result["models"][0]
    assert "error" not in row, row.get("traceback")
    assert row["reps"] >= 5 and row["original"]["median_s"] > 0 and row["optimized"]["median_s"] > 0
    assert row["speedup_measured"] == row["original"]["median_s"] / row["optimized"]["median_s"]
    assert row["hoisted"]["speedup_measured"] > 0 and row["hoisted"]["reps"] >= 5
    assert row["validation"] == "passed" and row["max_rel_error_example_inputs"] < 1e-4
    mlp2_flops = 2 * 32 * (128 * 256 + 256 * 10)  # x @ w1 and h @ w2: fusion changes neither
    assert row["gemm_flops"] == {"original": mlp2_flops, "optimized": mlp2_flops}
    peak = result["summary"]["peak_gemm_flops_per_s"]
    assert row["compute_ceiling"] == row["original"]["median_s"] * peak / row["gemm_flops"]["optimized"]
    client = result["summary"]["client_precompute"]  # the client ran the weight-only part once
    assert client["precompute_runs"] == 1 and client["max_rel_error"] < 1e-4 and client["reps"] >= 5
    assert json.loads(out.read_text())["hardware"] == "cpu-host"


def test_readme_tables_are_replaced_between_markers_and_new_pairs_added(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- bench:begin -->\nold\n<!-- bench:end -->\ntail\n")
    update_readme("new table", readme=readme)
    update_readme("scaling v1", "<!-- scaling:begin -->", "<!-- scaling:end -->", readme=readme)
    update_readme("scaling v2", "<!-- scaling:begin -->", "<!-- scaling:end -->", readme=readme)
    update_readme("speed table", "<!-- cpu_speed:begin -->", "<!-- cpu_speed:end -->", readme=readme)
    text = readme.read_text()
    assert "old" not in text and "new table" in text and "scaling v1" not in text
    assert text.index("<!-- bench:end -->") < text.index("scaling v2") < text.index("speed table")
    assert text.endswith("tail\n")
    assert geomean([1.0, 4.0]) == pytest.approx(2.0) and geomean([]) is None
