"""The benchmark scripts run end to end on a quick subset and write what they promise.

Structure and validity only: timings vary with the machine and are never asserted."""
from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest

from bench import (assumptions, attention, ceiling, cpu_speed, decode, lower_bound, never_worse, run, speed,
                   time_limits)
from bench.models.heldout import HELDOUT
from bench.models.registry import LARGE, MODELS, RNN_AND_CHAINS, SMALL, build
from bench.models.variants import MODELS_WITH_ALTERNATIVES, alternatives
from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from bench.report import geomean, update_table
from costmodel.profile import load_profile
from costmodel.provenance import assumed
from service import cli
from wire.capture import capture
from wire.execute import program_to_callable, typecheck

pytestmark = pytest.mark.integration  # a real server or subprocess

QUICK = ["mlp2", "matmul_chain", "rnn_unrolled"]


def test_the_registry_holds_the_zoo_and_the_held_out_workloads():
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
    result = run.main(["--models", *QUICK, "--out", str(out), "--no-docs"])
    saved = json.loads(out.read_text())
    assert [r["model"] for r in saved["models"]] == QUICK
    assert {"python", "jax", "egglog", "processor", "commit"} <= set(saved["machine"])
    for row in result["models"]:
        assert "error" not in row, row.get("traceback")
        for point in ("naive", "baseline", "optimized"):
            assert row[point]["time_s"] > 0 and row[point]["energy_j"] > 0 and row[point]["hbm_bytes"] > 0
        # mlp2 is returned as written (nothing beats the baseline's kernels); the chain in a new order is one
        # chain of the same factors to value numbering; the unrolled rnn's hoisted projections are run to check
        if row["model"] in ("mlp2", "matmul_chain"):
            assert row["validation"]["status"] == "identical" and row["validation"]["trials"] == 0
        else:
            assert row["validation"]["status"] == "passed" and row["validation"]["tolerance"]["float32"] > 0
        assert row["speedup_vs_baseline"] >= 1.0  # by the optimizer's own estimate
        assert row["kernels_only_speedup"] >= 1.0 and row["optimized_over_bound"] >= 1.0
        assert row["optimized"]["kernels"] >= 1 and {"saturate", "extract", "validate"} <= set(row["timings_s"])
    summary = result["summary"]
    assert summary["errors"] == 0 and summary["geomean_speedup_vs_baseline"] >= 1.0
    table = run.table(result["models"], "optu-v1", saved["machine"], summary)
    assert all(f"| {name} |" in table for name in QUICK)


def test_a_failing_model_becomes_a_row_with_its_error():
    row = run.bench_safely("no_such_model", "optu-v1")
    assert "unknown model" in row["error"]
    assert "error:" in run.table([row], "optu-v1", run.machine(), run.summarize([row]))


def test_speed_benchmark_reports_each_family_its_growth_and_the_servers_memory(tmp_path):
    out = tmp_path / "speed.json"
    result = speed.main(["--tiny", "--out", str(out), "--no-docs"])
    groups = {r["group"] for r in result["rows"]}
    assert groups == {"encoder, 1 layer", "encoder, 12 layers", "chain 6", "chain 12", "hugging face"}
    assert {r["key"].split()[0] for r in result["rows"] if r["group"].startswith("encoder")} == {
        "plain", "plain-args", "flax", "equinox"}
    for row in result["rows"]:  # every stage, the client's own too, counted once: within the row's wall time
        assert {"capture", "client", "build"} <= set(row["timings_s"]), row["key"]
        assert sum(row["timings_s"].values()) <= row["wall_s"] + 1e-5, row["key"]
    assert all(0 < s["least_stages_share"] <= 1 + 1e-5 for s in result["summary"].values())
    assert all(r["estimate_s"] > 0 for r in result["rows"])
    # a chain in a new order, an encoder's merged projections and its scalings are the same computation to
    # value numbering in real arithmetic
    assert all(r["validation"] == "identical" for r in result["rows"] if r["group"].startswith("chain"))
    assert all(r["validation"] in ("passed", "identical") for r in result["rows"])
    assert result["growth_exponent"]["layers"] is not None and result["growth_exponent"]["chain_length"] is not None
    assert result["unlimited"]["worst_ratio"] >= 1.0 - 1e-9  # default settings never beat an unlimited search
    assert result["memory"]["status"] == 200 and result["memory"]["processes"] >= 2
    assert result["memory"]["peak_rss_bytes"] >= result["memory"]["largest_process_bytes"] > 0
    assert json.loads(out.read_text())["summary"]["chain 12"]["rows"] == 1


def test_time_limit_sweep_reports_each_limit_the_default_and_the_chains_ceiling(tmp_path):
    out = tmp_path / "time_limits.json"
    (chain,) = time_limits.main(["--models", "matmul_chain", "--limits", "0.1", "1", "--out", str(out), "--no-docs"])
    assert [p["time_limit_s"] for p in chain["points"]] == [0.1, 1.0, None]
    assert all(p["validation"] == "identical" and p["estimate_s"] > 0 for p in chain["points"])  # reordered chains
    assert chain["default_vs_best"] >= 1.0 and isinstance(chain["non_increasing"], bool)
    # the zoo chain is one chain: its ceiling is a program under the baseline's kernels, never above it
    baseline = chain["points"][-1]["estimate_s"] * chain["points"][-1]["speedup_vs_baseline"]
    assert 0 < chain["chain_ceiling_s"] <= baseline
    assert json.loads(out.read_text())["models"][0]["model"] == "matmul_chain"


def test_cpu_speed_benchmark_measures_both_programs_interleaved(tmp_path):
    out = tmp_path / "cpu_speed.json"
    result = cpu_speed.main(["--models", "mlp2", "--budget", "0.05", "--out", str(out), "--no-docs"])
    row = result["models"][0]
    assert "error" not in row, row.get("traceback")
    assert row["reps"] >= 5 and row["original"]["median_s"] > 0 and row["optimized"]["median_s"] > 0
    assert row["speedup_measured"] == row["original"]["median_s"] / row["optimized"]["median_s"]
    assert row["hoisted"]["speedup_measured"] > 0 and row["hoisted"]["reps"] >= 5
    assert row["validation"] == "identical" and row["max_rel_error_example_inputs"] < 1e-4  # mlp2: unchanged
    mlp2_flops = 2 * 32 * (128 * 256 + 256 * 10)  # x @ w1 and h @ w2: fusion changes neither
    assert row["gemm_flops"] == {"original": mlp2_flops, "optimized": mlp2_flops}
    peak = result["summary"]["peak_gemm_flops_per_s"]
    assert row["compute_ceiling"] == row["original"]["median_s"] * peak / row["gemm_flops"]["optimized"]
    client = result["summary"]["client_precompute"]  # the client ran the weight-only part once
    assert client["precompute_runs"] == 1 and client["max_rel_error"] < 1e-4 and client["reps"] >= 5
    assert json.loads(out.read_text())["hardware"] == "cpu-host"


def test_cpu_speed_sets_each_estimate_against_the_clock():
    rows = [{"model": name, "estimate": {"speedup": est}, "speedup_measured": measured, "same_program": same}
            for name, est, measured, same in [("a", 1.0, 1.01, True), ("b", 2.0, 1.5, False), ("c", 1.5, 1.7, False),
                                               ("d", 3.0, 2.6, False), ("e", 1.0, 0.97, True)]]
    check = cpu_speed.estimates_against_clock(rows)
    assert check["off_estimate"] == ["b"]  # 1.5 measured against 2.0 estimated: 25% off
    assert check["changed"] == 3 and check["spearman_changed"] == pytest.approx(0.5)  # c ranked above b
    assert check["spearman"] == pytest.approx(0.8720815992723809)  # a and e tie in estimate (scipy.stats.spearmanr)


@pytest.mark.parametrize("name", RNN_AND_CHAINS)
def test_every_hand_written_alternative_computes_what_the_model_does(name):
    fn, args, _ = build(name)
    alts = alternatives(name, fn, args)
    assert set(MODELS_WITH_ALTERNATIVES) == set(RNN_AND_CHAINS) and len(alts) >= 2
    reference = jax.jit(fn)
    errors = ceiling.alternative_errors({k: jax.jit(f) for k, f in alts.items()}, reference,
                                        [args, ceiling.fresh_draw(args)])
    assert errors["as_written"] == 0.0 and max(errors.values()) < 1e-4


def test_cpu_speed_ceiling_times_the_alternatives_with_the_optimized_program(tmp_path):
    out = tmp_path / "cpu_speed.json"
    result = cpu_speed.main(["--models", "rnn_unrolled", "--budget", "0.02", "--ceiling-runs", "2",
                             "--ceiling-reps", "1", "--out", str(out), "--no-docs"])
    row = result["models"][0]["ceiling"]
    assert "error" not in row, row.get("traceback")
    assert set(row["alternatives"]) == {"as_written", "hoisted", "concat"} and row["runs"] == 2 and row["reps"] >= 1
    assert max(row["alternative_errors"].values()) < 1e-4
    best = min(row["alternatives"], key=lambda k: row["alternatives"][k]["median_s"])
    assert row["ceiling"]["alternative"] == best
    assert row["of_ceiling"] == row["ceiling"]["median_s"] / row["optimized"]["median_s"]
    assert row["measured"] == row["original"]["median_s"] / row["optimized"]["median_s"]
    assert row["verdict"] in {"slower", "noise", "faster"}
    summary = json.loads(out.read_text())["summary"]["ceiling"]
    assert summary["models"] == ["rnn_unrolled"] and summary["target"] == 0.9 and not summary["errors"]


def test_a_wrong_hand_written_alternative_is_caught_before_it_sets_the_ceiling(monkeypatch):
    fn, args, weights = build("rnn_unrolled")
    args = (*args[:3], np.zeros_like(args[3]))  # a zero bias in the examples: the fresh draw must catch it
    right = alternatives("rnn_unrolled", fn, args)
    wrong = {**right, "hoisted": lambda xs, w_x, w_h, b: right["hoisted"](xs, w_x, w_h, 0 * b)}
    monkeypatch.setattr(ceiling, "alternatives", lambda *_: wrong)
    original = jax.jit(program_to_callable(capture(fn, *args, weight_argnums=weights)))
    flat = [jax.device_put(a) for a in args]
    row = ceiling.ceiling_safely("rnn_unrolled", fn, args, original, original, flat, 0.01,
                                 ceiling.CeilingSettings(2, 1))
    assert "differ from the original" in row["error"] and "hoisted" in row["error"]
    assert "error:" in ceiling.ceiling_table([row], ceiling.summarize_ceiling([row], ceiling.CeilingSettings()))


def test_benchmark_tables_are_replaced_between_markers_and_new_pairs_added(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# x\n<!-- bench:begin -->\nold\n<!-- bench:end -->\ntail\n")
    update_table("new table", page=page)
    update_table("speed v1", "<!-- speed:begin -->", "<!-- speed:end -->", page=page)
    update_table("speed v2", "<!-- speed:begin -->", "<!-- speed:end -->", page=page)
    update_table("speed table", "<!-- cpu_speed:begin -->", "<!-- cpu_speed:end -->", page=page)
    text = page.read_text()
    assert "old" not in text and "new table" in text and "speed v1" not in text
    assert text.index("<!-- bench:end -->") < text.index("speed v2") < text.index("speed table")
    assert text.endswith("tail\n")
    assert geomean([1.0, 4.0]) == pytest.approx(2.0) and geomean([]) is None


def test_never_worse_benchmark_reports_each_profile(tmp_path):
    out = tmp_path / "never_worse.json"
    (row,) = never_worse.main(["--models", "mlp2", "--profiles", "optu-v1", "cpu-host", "--out", str(out),
                               "--no-docs"])
    for profile in ("optu-v1", "cpu-host"):
        assert row[profile]["speedup_vs_baseline"] >= 1.0 and row[profile]["validation"] in ("passed", "identical")
    assert "below 1.00x anywhere: none" in never_worse.table([row], ["optu-v1", "cpu-host"], run.machine())


def test_attention_benchmark_reports_both_profiles_and_times_the_blocks_on_this_cpu(tmp_path):
    out = tmp_path / "attention.json"
    rows = attention.main(["--lengths", "64", "--layers", "1", "--budget", "0.2", "--out", str(out), "--no-docs"])
    assert [r["workload"] for r in rows] == ["encoder block", "decoder block (causal)", "BERT-base, 1 layer"]
    for row in rows:
        for profile in attention.PROFILES:
            assert row[profile]["speedup"] >= 1.0 and row[profile]["over_bound"] >= 1.0
    assert all(r["cpu"]["jit_s"] > 0 and r["cpu"]["returned_s"] > 0 and r["cpu"]["by_hand_s"] > 0 for r in rows[:2])
    q, k, v = attention.workloads(64, ())["decoder block (causal)"][1]
    np.testing.assert_allclose(
        attention.BY_HAND["decoder block (causal)"](q, k, v), attention._attention(True)(q, k, v), rtol=1e-5, atol=1e-6
    )  # the hand-written block computes the same
    assert json.loads(out.read_text())["rows"][0]["n"] == 64
    assert "| encoder block | 64 |" in attention.table(rows, run.machine())


def test_decode_benchmark_times_the_jax_and_the_torch_step_against_their_references(tmp_path):
    out = tmp_path / "decode.json"
    (row,) = decode.main(["--lengths", "32", "--budget-s", "0.2", "--out", str(out), "--no-docs"])["rows"]
    assert min(row["jax_jit_s"], row["optimized_s"], row["eager_s"], row["torch_optimized_s"]) > 0
    assert row["cpu_validation"] in ("passed", "identical") and row["torch_validation"] in ("passed", "identical")
    assert set(row["estimates"]) == set(decode.PROFILES)
    assert json.loads(out.read_text())["rows"][0]["length"] == 32
    assert "| 32 |" in decode.table([row], run.machine())


def test_lower_bound_benchmark_counts_the_programs_where_the_bound_held(tmp_path):
    out = tmp_path / "lower_bound.json"
    summaries = lower_bound.main(["--profiles", "gpu-roofline", "--examples", "1", "--out", str(out), "--no-docs"])
    summary = summaries["gpu-roofline"]
    assert summary["programs"] == summary["held"] == 6  # one of each family
    assert summary["geomean_optimized_over_bound"] >= 1.0
    assert "| gpu-roofline | 6 | 6 |" in lower_bound.table(summaries, run.machine())


def test_calibrate_checks_the_new_profile_on_the_kernels_of_given_programs(tmp_path, capsys):
    files = []
    for name in ("matmul_chain", "rnn_unrolled"):
        fn, args = ZOO[name]()
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])))
    # a test machine running other tests is loaded: measure whatever share of it this gets
    assert cli.main(["calibrate", "--seconds", "1", "--output", str(tmp_path / "cpu.toml"), "--min-cpu-share", "0",
                     "--check", *map(str, files), "--check-seconds", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for what in ("baseline kernels", "optimized kernels"):
        (line,) = [line for line in lines if line.startswith(what)]
        kernels, rho = re.match(rf"{what}\s+(\d+) of .*: Spearman (\S+),", line).groups()
        assert int(kernels) >= 3 and -1 <= float(rho) <= 1


def test_the_assumption_sweep_moves_every_assumed_time_number_and_reports_the_range(tmp_path):
    profile = load_profile("optu-v1")
    points = assumptions.sweep_points(profile)
    moved = {name for name, _, _ in points[1:]}
    assert moved == {n for n in assumed(profile) if not assumptions.not_swept(n)}
    assert {"kernel.max_gemms", "kernel.launch_overhead_s", "vector.op_weights.exp"} <= moved
    assert all(assumptions.not_swept(n) for n in set(assumed(profile)) - moved)  # each skip has its reason
    gemms = sorted(o["kernel.max_gemms"] for name, _, o in points if name == "kernel.max_gemms")
    assert gemms == [1, 4]  # and 16, as shipped
    out = tmp_path / "assumptions.json"
    result = assumptions.main(["--models", "mlp2", "matmul_chain", "--only", "kernel.max_gemms", "--workers", "1",
                               "--out", str(out), "--no-docs"])
    assert json.loads(out.read_text())["summary"] == result["summary"]
    summary, rows = result["summary"], result["points"]
    assert len(rows) == 3 and summary["low"] <= summary["as_shipped"] <= summary["high"]
    # One GEMM per kernel denies the baseline its chaining: the chain's reordering gains more.
    by_gemms = {r["overrides"].get("kernel.max_gemms", 16): r["speedups"]["matmul_chain"] for r in rows}
    assert by_gemms[1] > by_gemms[16]


def test_torch_zoo_benchmark_writes_every_number(tmp_path):
    from bench import torch_zoo

    out = tmp_path / "torch_zoo.json"
    result = torch_zoo.main(["--models", "residual_mlp", "--reps", "2", "--time-limit-s", "2", "--output", str(out),
                             "--no-docs"])
    row = json.loads(out.read_text())["rows"][0]
    assert row == result["rows"][0] and row["model"] == "residual_mlp"
    assert row["validation"] in ("passed", "identical", "inconclusive") and row["optimize_s"] > 0
    assert row["baseline_s"] > 0 and row["optimized_s"] <= row["baseline_s"]
    latency = row["cpu_latency_s"]
    assert all(latency[k] > 0 for k in ("optu_fn", "torch_eager", "exported_graph_module"))
    assert latency["torch_compile_inductor"] is not None or "inductor_error" in latency


@pytest.mark.slow
def test_hf_models_benchmark_writes_every_path_and_the_mutants_verdicts(tmp_path):
    from bench import hf_models

    out = tmp_path / "hf_models.json"
    status = hf_models.main(["--models", "distilbert", "--mutants", "3", "--time-limit-s", "3", "--no-http",
                             "--output", str(out), "--no-docs"])
    row = json.loads(out.read_text())["rows"][0]
    assert status == 0 and row["model"] == "distilbert" and "http" not in row
    for path in ("optimize", "torch_compile"):
        assert row[path]["validation"] in ("passed", "identical") and row[path]["rel_error_vs_eager"] <= 1e-4
    assert row["optimize"]["torch_validation"] in ("passed", "identical")
    mutation = row["mutation_vs_torch"]
    assert mutation["mutants"] == 3 and not mutation["wrongly_passed"]


def test_gpu_attention_script_prepares_fused_programs_that_run_where_they_are_timed(tmp_path):
    """`prepare` writes the original and the returned program (one fused kernel); `time` runs them
    (here in interpret mode, allowed for the test only) and reports how far apart they are."""
    from bench import attention_gpu

    attention_gpu.prepare([2048], tmp_path)
    rows = attention_gpu.time_programs(0.0, tmp_path, None, require_gpu=False)
    assert [(r["n"], r["dtype"]) for r in rows] == [(2048, "bfloat16"), (2048, "float32")]
    for row in rows:
        assert row["fused_kernels"] == 1 and row["estimated_speedup"] > 1.0
        assert row["max_abs_diff"] < (2e-2 if row["dtype"] == "bfloat16" else 1e-5)
        assert row["original_s"] > 0 and row["returned_s"] > 0 and row["library_s"] > 0
    with pytest.raises(SystemExit):  # off a GPU the timing step refuses
        attention_gpu.time_programs(0.0, tmp_path, None)


def test_cpu_speed_times_the_held_out_workloads_apart_from_the_bench(tmp_path):
    out = tmp_path / "heldout.json"
    result = cpu_speed.main(["--heldout", "--models", "chain_outer", "--budget", "0.05", "--out", str(out),
                             "--no-docs"])
    [row] = result["models"]
    assert row["model"] == "chain_outer" and "error" not in row and "ceiling" not in row
    assert row["speedup_measured"] > 0 and row["estimate"]["speedup"] >= 1.0
    assert out.exists()


@pytest.mark.parametrize("name", sorted(HELDOUT))
def test_every_held_out_workload_captures_to_a_program_that_type_checks(name):
    fn, args, weights = HELDOUT[name]()
    typecheck(capture(fn, *args, weight_argnums=weights))


def test_the_image_table_holds_the_image_to_its_target_above_the_base_and_names_each_dependency_use():
    from bench import image

    result = {"size_mb": 1200.0, "base_mb": 369.0, "runs": 2, "api_to_healthy_s": 3.0, "worker_to_healthy_s": 7.0,
              "build_s": 30.0, "largest": [("jaxlib", 365.0), ("mystery", 40.0), ("other", 80.0)]}
    text = image.table(result)
    assert "831 MB above" in text and "not met" in text  # 1200 - 369 = 831 > 830
    assert "| jaxlib | 365 | 44% | XLA:" in text and "| mystery | 40 | 5% |  |" in text
    assert "met)" in image.table({**result, "size_mb": 1199.0}) and "not met" not in image.table(
        {**result, "size_mb": 1199.0})
