"""`lowering: "pallas"` on a profile that compiles Pallas: each fused kernel whose values are made
apart along its results' rows, or rows and columns (a GEMM with its epilogue, a norm, a softmax),
is returned as one `tiled` Pallas kernel (interpret mode on this CPU) that validates against the
original, for sizes no tile divides, one row and bf16; a kernel that mixes along every axis or
whose operands leave no room for a tile stays JAX ops with a note; where Pallas only interprets,
nothing changes."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.formulas import kernel_estimate, launch_time, memory_time
from costmodel.profile import load_profile, with_overrides
from lowering.kernels import Kernel
from lowering.pallas_tiles import CannotTile, _reading_more, row_axes, tiled_equation
from service.optimizer.pipeline import optimize
from wire.capture import capture
from wire.execute import jitted_program

GPU = load_profile("gpu-roofline")


def layer(x, w1, b1, w2, b2, g):
    """An MLP block and a norm and a softmax of its output: GEMMs with epilogues, row reductions."""
    y = jax.nn.gelu(x @ w1 + b1) @ w2 + b2
    mean = y.mean(-1, keepdims=True)
    var = ((y - mean) ** 2).mean(-1, keepdims=True)
    return (y - mean) / jnp.sqrt(var + 1e-5) * g, jax.nn.softmax(y, axis=-1)


def _program(rows: int, dtype=np.float32, hidden: int = 128):
    rng = np.random.default_rng(rows)
    shapes = [(rows, 32), (32, hidden), (hidden,), (hidden, 32), (32,), (32,)]
    args = [rng.normal(size=s).astype(dtype) for s in shapes]
    return capture(layer, *args, weight_argnums=(1, 2, 3, 4, 5)), args


def _tiled(response):
    return [e for e in response["program"]["eqns"] if e["op"] == "tiled"]


@pytest.mark.parametrize("rows", [300, 37])
def test_fused_kernels_come_back_as_tiled_pallas_kernels_that_validate(rows):
    program, args = _program(rows)
    response = optimize(program, GPU, {"lowering": "pallas"})
    tiled = _tiled(response)
    assert tiled and response["validation"]["status"] == "passed"
    assert any("(tiled)" in note for note in response["report"]["notes"])
    kernels = [k for k in response["kernels"] if k["ops"] == ["tiled"]]
    assert len(kernels) == len(tiled)
    # the estimate says which kernels run as chosen (the Pallas ones) and which are left to XLA
    assert all(k["runs_as"] == ("pallas" if k in kernels else "xla") for k in response["kernels"])
    counts = response["estimate"]["runs_as"]
    assert counts["pallas"] == len(kernels) and counts.get("xla", 0) == len(response["kernels"]) - len(kernels)
    grids = sorted(len(e["params"]["tile"]) for e in tiled)
    assert grids == [1, 2]  # the GEMM with its gelu: rows and columns; the one with the norm: rows
    for kernel in kernels:
        assert kernel["tiling"]["tile_rows"] * kernel["tiling"]["tiles"] >= rows
    got, want = jitted_program(response["program"])(*args), jitted_program(program)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_bfloat16_layers_come_back_blocked_and_validate():
    program, _ = _program(64, jnp.bfloat16)
    response = optimize(program, GPU, {"lowering": "pallas"})
    assert _tiled(response) and response["validation"]["status"] == "passed"


def test_one_row_is_tiled_along_its_columns_and_validates():
    program, args = _program(1)
    response = optimize(program, GPU, {"lowering": "pallas"})
    tiled = _tiled(response)
    assert tiled and all(e["params"]["out_axes"] == [[1]] * len(e["out"]) for e in tiled)
    assert response["validation"]["status"] == "passed"
    got, want = jitted_program(response["program"])(*args), jitted_program(program)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_weights_too_big_for_a_block_stay_ops_with_a_note():
    tiny = with_overrides(GPU, {"memory.block_bytes": 4096.0})  # less than w1 alone
    program, _ = _program(300)
    response = optimize(program, tiny, {"lowering": "pallas"})
    assert not _tiled(response) and response["validation"]["status"] in ("passed", "identical")
    assert any("does not fit" in note for note in response["report"]["notes"])


def test_where_pallas_only_interprets_the_program_stays_ops():
    program, _ = _program(300)
    response = optimize(program, "cpu-host", {"lowering": "pallas"})
    assert not _tiled(response)
    assert response["estimate"]["runs_as"] == {"xla": len(response["kernels"])}
    assert any("only interpreted" in note for note in response["report"]["notes"])


def test_on_hardware_that_runs_the_chosen_kernels_every_kernel_runs_as_chosen():
    program, _ = _program(300)
    response = optimize(program, "optu-v1", {"lowering": "pallas"})
    assert {k["runs_as"] for k in [*response["kernels"], *response["baseline_kernels"]]} == {"chosen"}
    assert response["estimate"]["runs_as"] == {"chosen": len(response["kernels"])}


def _kernel(fn, *shapes):
    program = capture(fn, *[np.ones(s, np.float32) for s in shapes])
    avals = {s["name"]: (tuple(s["shape"]), s["dtype"]) for s in program["inputs"]}
    for eqn in program["eqns"]:
        avals.update({o["name"]: (tuple(o["shape"]), o["dtype"]) for o in eqn["out"]})
    outputs = [o for e in program["eqns"] for o in e["out"] if o["name"] in program["outputs"]]
    return program["eqns"], outputs, avals


def test_a_sum_over_rows_is_blocked_along_the_columns():
    eqns, outputs, avals = _kernel(lambda x: x - x.sum(0, keepdims=True), (64, 8))
    assert tiled_equation(eqns, outputs, avals, GPU)["params"]["out_axes"] == [[1]]


def test_a_sum_over_everything_is_not_blocked():
    eqns, outputs, avals = _kernel(lambda x: x - x.sum(), (64, 8))
    with pytest.raises(CannotTile):
        tiled_equation(eqns, outputs, avals, GPU)


def test_positions_along_both_axes_are_not_blocked():
    eqns, outputs, avals = _kernel(
        lambda x: x * (jnp.arange(64, dtype=jnp.float32)[:, None] + jnp.arange(8, dtype=jnp.float32)[None, :]),
        (64, 8))
    with pytest.raises(CannotTile, match="iota"):
        tiled_equation(eqns, outputs, avals, GPU)


def test_positions_across_the_rows_are_computed_in_each_block():
    eqns, outputs, avals = _kernel(lambda x: x * jnp.arange(8, dtype=jnp.float32)[None, :], (64, 8))
    blocked = tiled_equation(eqns, outputs, avals, with_overrides(GPU, {"memory.block_bytes": 2048.0}))
    body = {e["op"]: e for e in blocked["params"]["body"]["program"]["eqns"]}
    assert blocked["params"]["tile"] == [16] and body["iota"]["out"][0]["shape"] == [8]
    assert body["broadcast_in_dim"]["params"]["shape"] == [1, 8] and body["mul"]["out"][0]["shape"] == [16, 8]


def test_a_gemms_weight_is_read_whole_and_its_rows_split():
    eqns, outputs, avals = _kernel(lambda x, w: jnp.tanh(x @ w), (64, 8), (8, 16))
    axes = row_axes(eqns, {o["name"]: 0 for o in outputs}, avals)
    x, w = (e for e in eqns[0]["in"])
    assert axes[x] == 0 and axes[w] is None


def test_a_transposed_product_splits_the_rows_of_the_operand_they_come_from():
    eqns, outputs, avals = _kernel(lambda x, w: w.T @ x.T, (8, 64), (64, 16))
    axes = row_axes(eqns, {o["name"]: 0 for o in outputs}, avals)
    inputs = {n: a for n, a in axes.items() if n.startswith("in")}
    assert inputs == {"in0": None, "in1": 1}  # the result's rows are w's columns; x is read whole


def norm_and_gate(x, g):
    """Elementwise work and row reductions alone, no GEMM: a fused kernel of the vector unit's."""
    centered = x - x.mean(-1, keepdims=True)
    return centered * jax.lax.rsqrt((centered ** 2).mean(-1, keepdims=True) + 1e-6) * jax.nn.sigmoid(x) * g


def test_a_fusion_without_a_gemm_comes_back_blocked_and_validates():
    rng = np.random.default_rng(3)
    args = [rng.normal(size=(203, 96)).astype(np.float32), rng.normal(size=(96,)).astype(np.float32)]
    program = capture(norm_and_gate, *args, weight_argnums=(1,))
    response = optimize(program, GPU, {"lowering": "pallas"})
    assert _tiled(response) and response["validation"]["status"] == "passed"


def test_a_chain_of_gemms_is_tiled_by_rows_of_x_and_columns_of_the_last_weight():
    eqns, outputs, avals = _kernel(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, (64, 8), (8, 16), (16, 4))
    blocked = tiled_equation(eqns, outputs, avals, with_overrides(GPU, {"memory.block_bytes": 4096.0}))
    assert blocked["params"]["in_axes"] == [[0, None], [None, None], [None, 1]]  # rows of x, columns of w2
    assert blocked["params"]["tile"] == [16, 4]
    args = [np.random.default_rng(4).normal(size=s).astype(np.float32) for s in [(64, 8), (8, 16), (16, 4)]]
    program = capture(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, *args)
    blocked_program = {**program, "eqns": [blocked]}
    np.testing.assert_allclose(np.asarray(jitted_program(blocked_program)(*args)[0]),
                               np.asarray(jitted_program(program)(*args)[0]), rtol=1e-5, atol=1e-5)


def test_what_tiles_read_again_is_priced_as_any_kernels_traffic_with_its_own_launch():
    profile = with_overrides(GPU, {"kernel.input_overhead_s": 2e-6})  # each input beyond the first costs its set-up
    busy, hbm = 1e-6, 4096.0
    kernel = Kernel(0, "fused", [0, 1], inputs=["a", "b", "c"], outputs=["d"],
                    estimate=kernel_estimate(profile, busy, 1e-9, 1e6, hbm, "vector", 3, 1))
    assert _reading_more(kernel, 0.0, profile) == kernel.estimate
    again = 64 * GPU.memory.hbm_bw_bytes_per_s * busy  # enough that the traffic binds
    more = _reading_more(kernel, again, profile)
    assert more == kernel_estimate(profile, busy, 1e-9, 1e6, hbm + again, "vector", 3, 1)
    assert more.bound == "memory" and more.time_s == pytest.approx(memory_time(profile, hbm + again)
                                                                    + launch_time(profile, 3, 1))
