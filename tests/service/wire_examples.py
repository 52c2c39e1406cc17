"""Small hand-written wire programs shared by the service tests, and a helper to respell them."""
from __future__ import annotations

import json

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
