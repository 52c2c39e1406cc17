"""The kernel listing (POST /v1/optimize `listing`, `optu optimize --listing`) against golden
files. Regenerate after an intended change with OPTU_UPDATE_GOLDEN=1 and review the diff."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.optimizer.pipeline import optimize
from wire.capture import capture

GOLDEN = Path(__file__).parent / "golden"
HOW_IT_WORKS = Path(__file__).parents[2] / "docs" / "how-it-works.md"
MODELS = ["mlp2", "convnet", "matmul_chain", "rnn_unrolled"]


def listing(name: str) -> str:
    fn, args = ZOO[name]()
    program = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    # greedy extraction: deterministic, no solver time limit in the way
    return optimize(program, "optu-v1", {"validate": False, "extraction": "greedy"})["listing"]


@pytest.mark.parametrize("name", MODELS)
def test_listing_matches_its_golden_file(name):
    text, path = listing(name), GOLDEN / f"{name}.txt"
    if os.environ.get("OPTU_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_listing_is_stable_across_runs():
    assert listing("mlp2") == listing("mlp2")


def test_listing_shows_reads_computation_tiling_and_estimate_per_kernel():
    text = listing("mlp2")
    blocks = [b for b in text.split("\nkernel ")[1:]]
    assert blocks
    for block in blocks:
        assert "inputs" in block and "computes" in block and " us " in block and "bound=" in block
    assert "tiling" in text and "weight_loads=" in text and "k_splits=" in text


def test_the_manuals_example_listing_is_the_start_of_a_golden_file():
    example = HOW_IT_WORKS.read_text().split("$ optu optimize request.json --listing\n", 1)[1].split("...\n", 1)[0]
    assert example.count("\n") >= 5 and (GOLDEN / "mlp2.txt").read_text().startswith(example)
