"""Programs priced as XLA runs them: where a profile's programs are compiled by XLA (cpu-host,
gpu-roofline), each GEMM is a library call, an op reading a reduction's result starts a kernel,
and the response's estimates and kernels are of that grouping, the baseline's as well."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.kernel_cost import VIEW_OPS
from costmodel.profile import load_profile
from lowering.as_run import compiled_by_xla, kernels_as_run
from lowering.baseline import baseline_kernels
from lowering.kernels import REDUCTIONS, VERTICAL, build_kernel_program
from service.optimizer.pipeline import optimize
from wire.capture import capture

CPU, GPU = load_profile("cpu-host"), load_profile("gpu-roofline")


def _mlp(x, w, b):
    return jax.nn.gelu(x @ w + b)


def _layer_norm(y):
    mean = y.mean(-1, keepdims=True)
    return (y - mean) * jax.lax.rsqrt(((y - mean) ** 2).mean(-1, keepdims=True) + 1e-5)


def _mlp_args():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in ((64, 128), (128, 256), (256,))]


def test_xla_cpu_runs_each_gemm_as_a_kernel_of_its_own_as_cpu_host_says():
    """This machine's XLA:CPU, asked: the fusion holding the dot holds nothing else, so its bias and
    GELU run in another kernel, as cpu-host's `gemm_epilogue = false` prices it."""
    hlo = jax.jit(_mlp).lower(*_mlp_args()).compile().as_text()
    bodies = re.findall(r"\n(%\S+) \([^\n]*\{\n(.*?)\n\}", hlo, re.S)
    [dot_body] = [body for _, body in bodies if " dot(" in body]
    ops = {m.group(1) for m in re.finditer(r"= \S+ (\w[\w-]*)\(", dot_body)} - {"parameter"}
    assert ops == {"dot"}
    assert CPU.kernel.gemm_epilogue is False
    kernels = kernels_as_run(capture(_mlp, *_mlp_args()), CPU).kernels
    assert [k.ops for k in kernels][0] == ["dot_general"] and len(kernels) == 2


def test_a_gpu_gemm_takes_its_elementwise_epilogue_but_not_a_reduction():
    def projected_norm(x, w, b):
        return _layer_norm(x @ w + b)

    kernels = kernels_as_run(capture(projected_norm, *_mlp_args()), GPU).kernels
    first = [op for op in kernels[0].ops if op not in VIEW_OPS]
    assert first == ["dot_general", "add"] and REDUCTIONS & set(kernels[1].ops)
    on_cpu = kernels_as_run(capture(projected_norm, *_mlp_args()), CPU).kernels
    assert on_cpu[0].ops == ["dot_general"]


@pytest.mark.parametrize("fn", [lambda x: jax.nn.softmax(x, -1), _layer_norm,
                                lambda x: jax.nn.softmax(x @ x.T / 8.0, -1) @ x],
                         ids=["softmax", "layer_norm", "attention"])
@pytest.mark.parametrize("profile", [CPU, GPU], ids=["cpu-host", "gpu-roofline"])
def test_no_kernel_reads_a_reduction_it_computes(fn, profile):
    """One loop nest per kernel: a row is reduced before anything uses the result, in the next
    kernel; the grouping the search may choose (vertical fusion) keeps them together."""
    program = capture(fn, np.ones((128, 64), np.float32))
    eqns = program["eqns"]

    def reads_own_reduction(kernel_eqns):
        reduced = {o["name"] for i in kernel_eqns if eqns[i]["op"] in REDUCTIONS for o in eqns[i]["out"]}
        return any(a in reduced for i in kernel_eqns for a in eqns[i]["in"] if isinstance(a, str))

    assert not any(reads_own_reduction(k.eqns) for k in kernels_as_run(program, profile).kernels)
    chosen = build_kernel_program(program, profile, VERTICAL)
    assert any(reads_own_reduction(k.eqns) for k in chosen.kernels)


@pytest.mark.parametrize("name", ["cpu-host", "gpu-roofline"])
def test_the_response_prices_what_xla_runs_on_an_xla_profile(name):
    """Both estimates are of the programs as XLA groups them: the baseline's, and the returned
    program's, which the response's kernels list; optu-v1 runs the kernels it chooses."""
    profile = load_profile(name)
    rng = np.random.default_rng(1)
    x, *ws = (rng.standard_normal(s).astype(np.float32) / 8 for s in ((32, 64), (64, 64), (64, 64), (64, 64)))
    program = capture(lambda x, a, b, c: _layer_norm(jnp.tanh(x @ a) @ b + x @ c), x, *ws)
    response = optimize(program, name, {"validate": False})
    estimate = response["estimate"]
    assert compiled_by_xla(profile) and estimate["priced_as"] == "xla"
    run = kernels_as_run(response["program"], profile)
    assert estimate["optimized"]["time_s"] == pytest.approx(run.total.time_s, rel=1e-12)
    assert [k["ops"] for k in response["kernels"]] == [k.ops for k in run.kernels]
    assert estimate["baseline"]["time_s"] <= kernels_as_run(program, profile).total.time_s * (1 + 1e-12)
    assert estimate["baseline"]["time_s"] >= estimate["optimized"]["time_s"] * (1 - 1e-12)
    assert optimize(program, "optu-v1", {"validate": False})["estimate"]["priced_as"] == "chosen"


def test_an_xla_profile_baseline_is_xlas_grouping_not_the_cheapest_policy():
    """A conventional compiler on a CPU is XLA itself: its baseline is XLA's grouping, dearer here
    than the cheapest of the policies a compiler of its own could choose (GEMM and epilogue fused)."""
    program = capture(_mlp, *_mlp_args())
    assert baseline_kernels(program, CPU).total.time_s == kernels_as_run(program, CPU).total.time_s
    fused = build_kernel_program(program, CPU, VERTICAL)
    assert fused.total.time_s < baseline_kernels(program, CPU).total.time_s
