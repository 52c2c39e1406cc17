"""64-bit programs over HTTP: models captured under x64 (float64 values, int64 indices) are
type-checked, optimized, run and validated in the types they declare, and come back in them."""
from __future__ import annotations

import httpx
import jax
import numpy as np
import pytest
from wire_examples import VALIDATED
from x64_models import capture_x64, x64_workloads

from wire.execute import jitted_program

WORKLOADS = x64_workloads()
# Written with a rewrite to find and 64-bit indices to carry through it: these must be rewritten and
# checked, by running them or (the decode step's merged projections, the chains' new order) by value numbering.
REWRITTEN = {"gpt_decode_step": "identical", "lstm": "passed", "gather_and_sort": "identical",
             "matmul_chain": "identical"}


def _signature(program: dict, names: list[str]) -> list[tuple[list[int], str]]:
    avals = {s["name"]: (s["shape"], s["dtype"]) for s in program["inputs"]}
    avals.update((o["name"], (o["shape"], o["dtype"])) for e in program["eqns"] for o in e["out"])
    return [avals[n] for n in names]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_a_64_bit_model_is_optimized_validated_and_returned_in_its_own_types(server_url, name):
    fn, args, _ = WORKLOADS[name]
    program = capture_x64(WORKLOADS[name])
    reply = httpx.post(f"{server_url}/v1/optimize", json={"program": program, "options": {"time_limit_s": 10}},
                       timeout=300)
    assert reply.status_code == 200, reply.text
    response = reply.json()
    assert response["validation"]["status"] in VALIDATED, response["validation"]
    if name in REWRITTEN:
        assert response["validation"]["status"] == REWRITTEN[name], response["validation"]
        assert response["estimate"]["speedup_vs_baseline"] > 1.0
    optimized = response["program"]
    assert [(s["shape"], s["dtype"]) for s in optimized["inputs"]] == [
        (s["shape"], s["dtype"]) for s in program["inputs"]
    ]
    assert _signature(optimized, optimized["outputs"]) == _signature(program, program["outputs"])

    got = jitted_program(optimized)(*jax.tree.leaves(args))
    with jax.enable_x64(True):
        want = jax.tree.leaves(jax.jit(fn)(*args))
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-12)
    assert not jax.config.jax_enable_x64
