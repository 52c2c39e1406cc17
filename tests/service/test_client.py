"""The Python client end to end: `optimize` over real HTTP and in-process on every zoo model, and
the `jax.jit`-like `jit` wrapper (pytrees, static args, per-signature cache, fallback)."""
from __future__ import annotations

import json
import socket
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wire_examples import VALIDATED
from x64_models import x64_workloads

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.client import OptimizeError, jit, optimize
from wire.capture import capture

pytestmark = pytest.mark.integration  # a real server or subprocess

ESTIMATES = {"naive", "baseline", "optimized", "speedup_vs_baseline", "lower_bound"}


def assert_same_outputs(got, expected):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
        g, e = np.asarray(g), np.asarray(e)
        assert (g.shape, g.dtype) == (e.shape, e.dtype)
        if np.issubdtype(e.dtype, np.floating):
            # The optimizer may reassociate sums, so float32 agrees to rounding, not bits.
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, e)


@pytest.fixture(scope="module")
def http_results(server_url):
    results = {}
    for name, make in ZOO.items():
        fn, args = make()
        results[name] = optimize(fn, *args, server=server_url, weight_argnums=WEIGHT_ARGNUMS[name])
    return results


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_model_optimizes_over_http_and_matches_the_original(http_results, name):
    fn, args = ZOO[name]()
    res = http_results[name]
    assert res.validation["status"] in VALIDATED
    assert ESTIMATES <= set(res.estimate) and res.estimate["speedup_vs_baseline"] >= 1.0 - 1e-9
    assert res.kernels and res.report["egraph"]["enodes"] > 0
    assert res.program == res.response["program"]
    assert_same_outputs(res.fn(*args), fn(*args))


@pytest.mark.parametrize("name", sorted(ZOO))
def test_in_process_gives_the_same_program_and_estimate_as_http(http_results, name):
    fn, args = ZOO[name]()
    res = optimize(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    assert res.validation["status"] in VALIDATED
    assert res.program == http_results[name].program
    assert res.estimate == http_results[name].estimate
    assert res.response["id"] == http_results[name].response["id"]
    assert_same_outputs(res.fn(*args), fn(*args))


def test_http_errors_raise_optimize_error_with_status_and_detail(server_url):
    with pytest.raises(OptimizeError) as err:
        optimize(jnp.sin, np.ones(3, np.float32), server=server_url, hardware="nope")
    assert err.value.status == 404 and "'nope'" in err.value.detail
    with pytest.raises(OptimizeError) as err:
        optimize(jnp.sin, np.ones(3, np.float32), server=server_url, fp_mode="fast")
    assert err.value.status == 422 and err.value.detail[0]["loc"][-1] == "fp_mode"


def test_in_process_errors_use_the_same_statuses():
    with pytest.raises(OptimizeError) as err:
        optimize(jnp.sin, np.ones(3, np.float32), hardware="nope")
    assert err.value.status == 404
    with pytest.raises(OptimizeError) as err:
        optimize(jnp.sin, np.ones(3, np.float32), fp_mode="fast")
    assert err.value.status == 422


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_jit_takes_pytrees_and_static_args_and_optimizes_once_per_signature(server_url):
    traces = []

    @jit(server=server_url, static_argnums=(1,), weight_argnums=(2,))
    def f(inputs, power, w):
        traces.append(power)
        h = inputs["x"] @ w
        return h ** power, (inputs["y"] * 2).astype(jnp.int32).sum()

    x, y = np.ones((4, 8), np.float32), np.arange(6, dtype=np.float32)
    w = np.full((8, 3), 0.5, np.float32)
    expected = jax.jit(f.__wrapped__, static_argnums=1)({"x": x, "y": y}, 2, w)
    traces.clear()
    out = f({"x": x, "y": y}, 2, w)
    assert isinstance(out, tuple) and len(out) == 2
    assert_same_outputs(out, expected)
    first = f.last_result
    assert first.validation["status"] in VALIDATED and ESTIMATES <= set(first.estimate)
    assert [s["role"] for s in first.program["inputs"]] == ["activation", "activation", "weight"]

    f({"x": x + 1, "y": y}, 2, w)  # same signature: no new optimization
    assert traces == [2] and f.last_result is first
    f({"x": x, "y": y}, 3, w)  # new static value
    f({"x": np.ones((5, 8), np.float32), "y": y}, 2, w)  # new shape
    assert traces == [2, 3, 2] and f.last_result is not first
    f({"x": x, "y": y}, 2, w)
    assert f.last_result is first


def test_jit_runs_weight_only_work_once_per_weight_set():
    f = jit(lambda x, w1, w2: jnp.tanh(x @ (w1 @ w2)), weight_argnums=(1, 2))
    x, w1, w2 = jnp.ones((4, 16)), jnp.full((16, 16), 0.1), jnp.full((16, 16), 0.2)
    for _ in range(3):
        assert_same_outputs(f(x, w1, w2), jnp.tanh(x @ (w1 @ w2)))
    assert f.last_result.response["precompute_kernels"]  # optu-v1 prices w1 @ w2 once per weight set
    assert f.last_result.precomputed.precompute_runs == 1
    assert_same_outputs(f(x, w1, w2 * 2), jnp.tanh(x @ (w1 @ (w2 * 2))))
    assert f.last_result.precomputed.precompute_runs == 2


def test_jit_works_as_a_bare_decorator_in_process_with_static_argnames():
    @jit
    def scale(a, b):
        return a * 3 + b

    a = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(scale(a, a), a * 4)
    assert scale.__name__ == "scale" and scale.last_result.validation["status"] in VALIDATED

    g = jit(lambda a, *, mode: a.sum() if mode == "sum" else a.max(), static_argnames="mode")
    assert float(g(a, mode="sum")) == 6.0 and float(g(a, mode="max")) == 3.0


def test_jit_falls_back_with_a_warning_when_the_server_is_unreachable():
    f = jit(lambda a: jnp.tanh(a) * 2, server=_closed_port_url())
    a = np.linspace(-1, 1, 5, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="plain jax.jit"):
        out = f(a)
    np.testing.assert_allclose(out, np.tanh(a) * 2, rtol=1e-6)
    assert f.last_result is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the failure is cached per signature: warned once
        f(a)


def _chaotic_plus_chain(x, a, b, c):
    """A chain the optimizer reorders, added to 40 steps of the chaotic logistic map: no input draw
    can tell whether the reordered program is right, so its validation is inconclusive."""
    for _ in range(40):
        x = 3.99 * x * (1.0 - x)
    return x + ((a @ b) @ c)[0]


CHAOTIC_ARGS = (np.full((64,), 0.3, np.float32), np.ones((64, 256), np.float32), np.ones((256, 256), np.float32),
                np.ones((256, 64), np.float32))


def test_an_inconclusive_validation_keeps_the_original_by_default_and_is_used_only_when_accepted():
    kept = jit(_chaotic_plus_chain, weight_argnums=(2, 3))
    with pytest.warns(RuntimeWarning, match="inconclusive"):
        kept(*CHAOTIC_ARGS)
    assert kept.last_result is None  # plain jax.jit of the original
    with pytest.raises(OptimizeError, match="inconclusive"):
        jit(_chaotic_plus_chain, weight_argnums=(2, 3), on_error="raise")(*CHAOTIC_ARGS)
    accepted = jit(_chaotic_plus_chain, weight_argnums=(2, 3), on_error="accept")
    with pytest.warns(RuntimeWarning, match="inconclusive"):
        accepted(*CHAOTIC_ARGS)
    assert accepted.last_result.validation["status"] == "inconclusive"
    assert accepted.last_result.program != capture(_chaotic_plus_chain, *CHAOTIC_ARGS)  # the reordered chain


def test_jit_on_error_raise_raises():
    f = jit(lambda a: a + 1, server=_closed_port_url(), on_error="raise")
    with pytest.raises(OptimizeError, match="cannot reach"):
        f(np.ones(2, np.float32))
    with pytest.raises(OptimizeError) as err:
        jit(lambda a: a + 1, hardware="nope", on_error="raise")(np.ones(2, np.float32))
    assert err.value.status == 404


def test_cli_optimize_prints_a_summary_or_the_whole_response(tmp_path, capsys, server_url):
    import json

    from service.cli import main
    from wire.capture import capture

    fn, args = ZOO["matmul_chain"]()
    path = tmp_path / "program.json"
    path.write_text(json.dumps(capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS["matmul_chain"])))
    assert main(["optimize", str(path)]) == 0
    summary = capsys.readouterr().out
    assert "speedup" in summary and "validation    identical" in summary and "kernels" in summary
    assert main(["optimize", str(path), "--server", server_url, "--json"]) == 0
    shown = capsys.readouterr()
    assert json.loads(shown.out)["validation"]["status"] == "identical"
    assert shown.err == ""  # --json: machine-readable, no progress
    assert main(["optimize", str(path), "--hardware", "nope"]) == 2  # bad input
    assert "'nope'" in capsys.readouterr().err
    assert main(["optimize", str(path), "--server", server_url, "--listing"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("# kernel program on optu-v1") and "\nkernel 0 " in listing and "tiling" in listing


def test_cli_hardware_lists_profiles_locally_and_from_a_server(capsys, server_url):
    from service.cli import main

    assert main(["hardware"]) == 0
    local = capsys.readouterr().out
    assert main(["hardware", "--server", server_url]) == 0
    assert capsys.readouterr().out == local and "optu-v1" in local


def test_a_progress_callback_sends_a_job_and_sees_it_to_its_end(server_url, http_results):
    fn, args = ZOO["mlp2"]()
    seen: list[dict] = []
    res = optimize(fn, *args, server=server_url, weight_argnums=WEIGHT_ARGNUMS["mlp2"], progress=seen.append)
    assert seen and seen[-1]["state"] == "succeeded" and seen[-1]["id"] == res.response["id"]
    assert all(s["id"] == seen[0]["id"] for s in seen)
    assert res.program == http_results["mlp2"].program


def test_a_function_captured_under_x64_is_optimized_in_process_and_its_callable_keeps_float64():
    fn, args, weights = x64_workloads()["lstm"]
    with jax.enable_x64(True):
        result = optimize(fn, *args, weight_argnums=weights)
        expected = jax.jit(fn)(*args)
    assert result.validation["status"] == "passed"
    got = result.fn(*args)  # called with x64 off: the callable computes in the types the program declares
    assert not jax.config.jax_enable_x64
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert np.asarray(g).dtype == np.float64
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-9, atol=1e-12)


def test_cli_lowering_pallas_returns_the_attention_as_one_fused_kernel(tmp_path, capsys, server_url):
    """`--lowering pallas`, in-process and through the server: the key-blocked attention comes back
    as one flash_attention equation (an SRAM too small for the scores, so it blocks at test size)."""
    from costmodel.profile import load_profile, with_overrides
    from service.cli import main
    from wire.capture import capture

    def causal(q, k, v):
        n = q.shape[2]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), q @ k.transpose(0, 1, 3, 2), -jnp.inf)
        return jax.nn.softmax(s, -1) @ v

    spec = jax.ShapeDtypeStruct((1, 2, 300, 8), jnp.float32)
    hardware = with_overrides(load_profile("optu-v1"), {"memory.sram_bytes": 256 * 2**10}).model_dump()
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"program": capture(causal, spec, spec, spec), "hardware": hardware,
                                "options": {"validate": False}}))
    for server in ([], ["--server", server_url]):
        assert main(["optimize", str(path), "--lowering", "pallas", "--json", *server]) == 0
        ops = [e["op"] for e in json.loads(capsys.readouterr().out)["program"]["eqns"]]
        assert ops.count("flash_attention") == 1 and "dot_general" not in ops
    assert main(["optimize", str(path), "--json"]) == 0
    assert "flash_attention" not in capsys.readouterr().out
