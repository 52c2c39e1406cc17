"""Blocked attention kernels: where the scores would leave SRAM, a conventional compiler's fused
kernel runs over blocks of query rows, each with every key (row-blocked: exact, so the baseline and
exact mode have it); the key-blocked kernel (online softmax, real mode) may also split the keys, and
an attention written any way (scale, where-mask, additive bias, tanh softcap) is priced as one
blocked kernel, its blocks under the SRAM capacity, at its lower bound, never above the row-blocked
baseline; short attention, a kernel that writes its probabilities and a non-softmax mix keep the
plain kernel."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.formulas import dtype_bytes
from costmodel.profile import load_profile, with_overrides
from lowering.kernels import CONVENTIONAL, build_kernel_program
from service.optimizer.pipeline import optimize
from wire.capture import capture

HEADS, DEPTH = 12, 64
BLOCKED = ("key_blocked", "row_blocked")


def _scores(q, k):
    return jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125


def _mix(p, v):
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


def plain(q, k, v):
    return _mix(jax.nn.softmax(_scores(q, k), -1), v)


def causal(q, k, v):
    n = q.shape[2]
    keep = jnp.arange(n)[:, None] >= jnp.arange(n)[None, :]
    return _mix(jax.nn.softmax(jnp.where(keep, _scores(q, k), -1e9), -1), v)


def biased(q, k, v, bias):
    return _mix(jax.nn.softmax(_scores(q, k) + bias, -1), v)


def padded(q, k, v, mask):
    """A Hugging Face attention mask: additive, one row per sequence, broadcast over heads and queries."""
    return _mix(jax.nn.softmax(_scores(q, k) + mask, -1), v)


def sliding_window(q, k, v):
    n = q.shape[2]
    i, j = jnp.arange(n)[:, None], jnp.arange(n)[None, :]
    return _mix(jax.nn.softmax(jnp.where((j <= i) & (j > i - 256), _scores(q, k), -jnp.inf), -1), v)


def alibi(q, k, v):
    n = q.shape[2]
    slopes = 2.0 ** (-jnp.arange(1, HEADS + 1) * 8.0 / HEADS)
    distance = (jnp.arange(n)[None, :] - jnp.arange(n)[:, None]).astype(jnp.float32)
    return _mix(jax.nn.softmax(_scores(q, k) + slopes[:, None, None] * distance, -1), v)


def softcapped(q, k, v):
    return _mix(jax.nn.softmax(30.0 * jnp.tanh(_scores(q, k) / 30.0), -1), v)


def _program(fn, n, extra=()):
    spec = jax.ShapeDtypeStruct((1, HEADS, n, DEPTH), jnp.float32)
    return capture(fn, spec, spec, spec, *(jax.ShapeDtypeStruct(s, jnp.float32) for s in extra))


def _optimized(program, hardware="optu-v1", **options):
    return optimize(program, hardware, {"validate": False, **options})


def _working_set(tiling, size=4):
    """Bytes on chip per block: the queries' tile, running output and statistics, a key and a value
    tile, and two score tiles."""
    bq, bk = tiling["query_block"], tiling["key_block"]
    return size * (bq * (DEPTH + 2 * DEPTH + 2) + bk * 2 * DEPTH + 2 * bq * bk)


@pytest.mark.parametrize("fn,extra", [(plain, ()), (causal, ()), (biased, [(8192, 8192)]), (softcapped, ()),
                                     (padded, [(1, 1, 1, 8192)]), (sliding_window, ()), (alibi, ())],
                         ids=["plain", "causal", "bias", "softcap", "padding-mask", "sliding-window", "alibi"])
def test_long_attention_runs_blocked_at_its_bound_and_the_baseline_never_spills_its_scores(fn, extra):
    """N = 8192, 12 heads: 3.2 GB of scores would spill on optu-v1; the baseline's fused kernel runs
    over blocks of query rows with every key (a row of scores is 32 KB), the optimized one is
    blocked too (by keys where that is cheaper: ALiBi's is not), at its bound."""
    response = _optimized(_program(fn, 8192, extra))
    blocked = [k for k in response["kernels"] if k["kind"] in BLOCKED]
    assert len(blocked) == 1
    tiling = blocked[0]["tiling"]
    assert tiling["query_block"] * tiling["query_blocks"] >= 8192 <= tiling["key_block"] * tiling["key_blocks"]
    assert _working_set(tiling) <= load_profile("optu-v1").memory.sram_bytes
    [baseline] = [k for k in response["baseline_kernels"] if k["kind"] == "row_blocked"]
    assert (
        baseline["tiling"]["key_blocks"] == 1
        and _working_set(baseline["tiling"]) <= load_profile("optu-v1").memory.sram_bytes
    )
    assert not any(b["level"] == "spill" for k in response["baseline_kernels"] for b in k["buffers"])
    estimate = response["estimate"]
    assert estimate["speedup_vs_baseline"] >= 1.0
    assert estimate["optimized"]["time_s"] <= 1.05 * estimate["lower_bound"]["time_s"]


def test_splitting_the_keys_beats_the_row_blocked_baseline_where_one_query_block_cannot_hold_every_key():
    """All 8192 query rows in one block with half the keys at a time program each K and V tile once;
    the row-blocked baseline, holding every key, fits half the rows per block and programs them twice."""
    response = _optimized(_program(plain, 8192))
    [blocked] = [k["tiling"] for k in response["kernels"] if k["kind"] == "key_blocked"]
    [baseline] = [k["tiling"] for k in response["baseline_kernels"] if k["kind"] == "row_blocked"]
    assert (blocked["query_blocks"], blocked["key_blocks"]) == (1, 2) and baseline["query_blocks"] == 2
    assert response["estimate"]["speedup_vs_baseline"] > 1.0


def grouped(q, k, v):
    """GQA: 4 key/value heads, each serving 4 query heads."""
    return plain(q, jnp.repeat(k, 4, axis=1), jnp.repeat(v, 4, axis=1))


def matmul_form(q, kt, v):
    """jnp.matmul over a batch of one: its squeezes put views between the scores and the softmax."""
    return jax.nn.softmax((q @ kt) / 8.0, -1) @ v


@pytest.mark.parametrize("fn,shapes", [
    (grouped, [(1, 16, 8192, DEPTH), (1, 4, 8192, DEPTH), (1, 4, 8192, DEPTH)]),
    (plain, [(1, HEADS, 1024, DEPTH), (1, HEADS, 16384, DEPTH), (1, HEADS, 16384, DEPTH)]),
    (matmul_form, [(1, HEADS, 8192, DEPTH), (1, HEADS, DEPTH, 8192), (1, HEADS, 8192, DEPTH)]),
], ids=["gqa", "cross-attention", "matmul-form"])
def test_attention_written_other_ways_runs_key_blocked(fn, shapes):
    response = _optimized(capture(fn, *(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)))
    assert [k["kind"] for k in response["kernels"]] == ["key_blocked"]
    assert [k["kind"] for k in response["baseline_kernels"]] == ["row_blocked"]
    assert response["estimate"]["speedup_vs_baseline"] >= 1.0
    assert response["estimate"]["optimized"]["time_s"] <= 1.05 * response["estimate"]["lower_bound"]["time_s"]


def test_short_attention_keeps_the_plain_kernel():
    """N = 512: the scores fit in SRAM, so blocking only adds per-block work."""
    response = _optimized(_program(plain, 512))
    assert not any(k["kind"] == "key_blocked" for k in response["kernels"])
    assert response["estimate"]["speedup_vs_baseline"] == pytest.approx(1.0)


def test_exact_mode_never_blocks_keys():
    """The online softmax reorders sums: not an exact rewrite, so exact mode keeps every key of a row
    in one block, as the baseline does (blocking the rows reorders nothing)."""
    response = _optimized(_program(plain, 8192), fp_mode="exact")
    assert not any(k["kind"] == "key_blocked" for k in response["kernels"])
    assert [k["tiling"]["key_blocks"] for k in response["kernels"] if k["kind"] == "row_blocked"] == [1]
    assert response["estimate"]["speedup_vs_baseline"] == pytest.approx(1.0)
    excluded = _optimized(_program(plain, 8192), exclude_rules=["softmax-dot-of-concat"])
    assert not any(k["kind"] == "key_blocked" for k in excluded["kernels"])


def test_a_kernel_that_writes_its_probabilities_is_not_blocked():
    """Returning the softmax needs every score written: no block form avoids the N x N traffic."""
    def with_probabilities(q, k, v):
        p = jax.nn.softmax(_scores(q, k), -1)
        return _mix(p, v), p

    program = _program(with_probabilities, 4096)
    kernels = build_kernel_program(program, load_profile("optu-v1"), CONVENTIONAL, key_blocking=True).kernels
    assert not any(k.kind == "key_blocked" for k in kernels)


def test_a_mix_of_other_weights_than_a_softmax_is_not_blocked():
    """tanh(S) @ V has no running statistic to rescale by: the identity says nothing about it."""
    program = _program(lambda q, k, v: _mix(jnp.tanh(_scores(q, k)), v), 8192)
    kernels = build_kernel_program(program, load_profile("optu-v1"), CONVENTIONAL, key_blocking=True).kernels
    assert not any(k.kind == "key_blocked" for k in kernels)


@settings(max_examples=12, deadline=None)
@given(sram_mb=st.sampled_from([4, 16, 64, 256, 500]), n=st.sampled_from([1000, 2048, 8192]))
def test_blocks_fit_the_sram_and_never_cost_more_than_the_plain_kernel(sram_mb, n):
    """Whatever the SRAM, the chosen blocks' working set fits in it, they cover every query and key
    (N need not be a multiple of a block), and the blocked kernel costs no more than the plain one."""
    profile = with_overrides(load_profile("optu-v1"), {"memory.sram_bytes": sram_mb * 2**20})
    program = _program(plain, n)
    plain_kernels = build_kernel_program(program, profile, CONVENTIONAL)
    blocked_kernels = build_kernel_program(program, profile, CONVENTIONAL, key_blocking=True)
    assert blocked_kernels.total.time_s <= plain_kernels.total.time_s
    for kernel in blocked_kernels.kernels:
        if kernel.kind == "key_blocked":
            tiling = kernel.tiling
            assert _working_set(tiling, dtype_bytes("float32")) <= profile.memory.sram_bytes
            assert tiling["query_block"] * tiling["query_blocks"] >= n
            assert tiling["key_block"] * tiling["key_blocks"] >= n


@pytest.mark.parametrize("queries,keys,blocked", [(1, 37, False), (333, 3333, True), (1001, 1001, True)],
                         ids=["one-query", "keys-no-block-divides", "causal-no-block-divides"])
def test_attention_of_sizes_no_block_divides_still_optimizes_and_validates(queries, keys, blocked):
    """With an SRAM too small for the scores, blocks cover sizes they do not divide (a last, partial
    block), or a single query stays unblocked: the optimizer answers and its program validates."""
    profile = with_overrides(load_profile("optu-v1"), {"memory.sram_bytes": 256 * 2**10})
    shapes = [(1, 2, queries, 8), (1, 2, keys, 8), (1, 2, keys, 8)]
    program = capture(causal if queries == keys else plain, *(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes))
    response = optimize(program, profile, {})
    assert response["validation"]["status"] in ("passed", "identical")
    kernels = [k for k in response["kernels"] if k["kind"] == "key_blocked"]
    assert bool(kernels) == blocked
    for kernel in kernels:
        tiling = kernel["tiling"]
        assert (
            tiling["query_block"] * (tiling["query_blocks"] - 1)
            < queries
            <= tiling["query_block"] * tiling["query_blocks"]
        )
        assert tiling["key_block"] * (tiling["key_blocks"] - 1) < keys <= tiling["key_block"] * tiling["key_blocks"]
    assert response["estimate"]["speedup_vs_baseline"] >= 1.0
