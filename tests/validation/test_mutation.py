"""Validation tells wrong programs: single-point mutants of each zoo model's optimized program are
never passed unless random testing shows them to compute the original's function, and at least
95% of the rest fail (bench/mutation.py scores every bench model the same way)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from bench.models.registry import SMALL, capture_model
from bench.mutants import mutants, mutation_score, observably_equivalent
from service.client import optimize_program

pytestmark = pytest.mark.slow  # whole programs through the pipeline


@pytest.mark.parametrize("name", SMALL)
def test_no_wrong_mutant_passes_and_nearly_all_fail(name):
    program, _ = capture_model(name)
    score = mutation_score(program, optimize_program(program)["program"])
    assert score["mutants"] >= 1 and not score["wrongly_passed"], score["missed"]
    assert score["score"] >= 0.95, score["missed"]


def test_mutants_are_distinct_typed_single_point_changes():
    program, _ = capture_model("transformer_layer")
    found = mutants(program)
    assert len(found) == 20 and len({what for what, _ in found}) == 20
    kinds = {what.split(" at ")[0] for what, _ in found}
    assert {"swap_op", "swap_operands", "shift_slice", "drop_step", "transpose_weight", "rewire"} & kinds == kinds
    assert len(kinds) >= 4  # the kinds are taken in turn
    for _, mutant in found:
        changed = sum(a != b for a, b in zip(program["eqns"], mutant["eqns"])) + abs(
            len(program["eqns"]) - len(mutant["eqns"])
        )
        assert changed >= 1 and mutant != program


def test_equivalence_is_what_random_testing_shows():
    program, _ = capture_model("mlp2")
    assert observably_equivalent(program, copy.deepcopy(program))
    wrong = copy.deepcopy(program)
    wrong["eqns"][-1]["op"] = "sub"
    assert not observably_equivalent(program, wrong)
    assert np.isfinite(mutation_score(program, program)["raw_score"])
