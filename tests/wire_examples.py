"""Small wire programs shared by the tests, and a helper to respell them."""
from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np

from wire.capture import capture

# Verdicts that let a result be used: checked and found equal, or the same computation (nothing run).
VALIDATED = ("passed", "identical")

# (a @ b) * 0.5, with b a weight: typical of what a build pipeline sends.
MATMUL_SCALE = {
    "format": "optu.jaxpr/v1",
    "inputs": [{"name": "a", "shape": [4, 8], "dtype": "float32", "role": "activation"},
               {"name": "b", "shape": [8, 16], "dtype": "float32", "role": "weight"}],
    "consts": [],
    "eqns": [
        {"op": "dot_general", "in": ["a", "b"],
         "out": [{"name": "d", "shape": [4, 16], "dtype": "float32"}],
         "params": {"dimension_numbers": [[[1], [0]], [[], []]], "precision": None,
                    "preferred_element_type": "float32"}},
        {"op": "mul", "in": [{"lit": 0.5, "dtype": "float32"}, "d"],
         "out": [{"name": "e", "shape": [4, 16], "dtype": "float32"}], "params": {}},
    ],
    "outputs": ["e"],
}

# -a: the smallest useful program (optional fields left out).
NEGATE = {
    "format": "optu.jaxpr/v1",
    "inputs": [{"name": "a", "shape": [4], "dtype": "float32"}],
    "eqns": [{"op": "neg", "in": ["a"], "out": [{"name": "b", "shape": [4], "dtype": "float32"}]}],
    "outputs": ["b"],
}


def renamed(program: dict, old: str, new: str) -> dict:
    """`program` with variable `old` spelled `new` everywhere."""
    return json.loads(json.dumps(program).replace(f'"{old}"', f'"{new}"'))


def sum_program(n: int, width: int) -> dict:
    """x0 + x1 + ... + x(n-1): associativity/commutativity give it many equal programs, slow to
    extract (with `extraction: "ilp"` the solver uses the whole time limit at n = 200), and a
    warm worker needs several seconds for it whatever the time limit (ingest and validation are
    not budgeted). `width` varies the shape so that no two requests share a cache entry."""
    spec = {"shape": [8, width], "dtype": "float32"}
    eqns, prev = [], "x0"
    for i in range(1, n):
        eqns.append({"op": "add", "in": [prev, f"x{i}"], "out": [{"name": f"s{i}", **spec}], "params": {}})
        prev = f"s{i}"
    return {"format": "optu.jaxpr/v1", "inputs": [{"name": f"x{i}", **spec} for i in range(n)],
            "consts": [], "eqns": eqns, "outputs": [prev]}


def two_regions(first: bool, second: bool) -> dict:
    """Two independent spots an optimizer may rewrite (a scale folded into a weight: `first`,
    `second`), then work both feed, unchanged: region checks see one region per rewritten spot."""
    x, w, v = np.ones((8, 16), np.float32), np.full((16, 16), 0.1, np.float32), np.linspace(0.5, 1.5, 16,
                                                                                           dtype=np.float32)

    def fn(x, w, u, v, w2):
        a = x @ (w * v) if first else (x @ w) * v
        b = x @ (u * 2.0) if second else (x @ u) * 2.0
        return jnp.tanh(jnp.tanh(a + jnp.tanh(b)) @ w2) @ w2
    return capture(fn, x, w, w, v, w)


def projections(merged: bool, combine, swapped: bool = False):
    """Three projections of one input (merged into one matmul and sliced when asked, at the highest
    precision: another computation to value numbering, so a region checked by running it; `swapped`
    slices k and v the wrong way round) fed to `combine(q, k, v)`, then unchanged work."""
    def fn(x, wq, wk, wv):
        if merged:
            both = jnp.matmul(x, jnp.concatenate([wq, wk, wv], axis=1), precision="highest")
            q, k, v = (both[:, 16 * i:16 * (i + 1)] for i in ((0, 2, 1) if swapped else (0, 1, 2)))
        else:
            q, k, v = x @ wq, x @ wk, x @ wv
        return jnp.tanh(jnp.tanh(jnp.tanh(combine(q, k, v)) @ wq) @ wk) @ wv

    rng = np.random.default_rng(1)
    return capture(fn, *(rng.normal(size=shape).astype(np.float32) for shape in [(8, 16)] + [(16, 16)] * 3))
