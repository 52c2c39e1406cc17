"""The debugger's typed findings hold every key its API models document, required where they
require them: what the stages build and what clients read cannot drift apart."""
from __future__ import annotations

import pytest

from service.optimizer.debug import Bisection, DebugKernelSpec, DebugResponse, KernelDebug
from tests.typed_json import model_keys, undeclared
from validation import debug_json

# (typed, model, whether the model documents every key or only those a client reads first)
PAIRS = [(debug_json.KernelToCheck, DebugKernelSpec, True), (debug_json.BisectionJSON, Bisection, True),
         (debug_json.KernelFinding, KernelDebug, False), (debug_json.DebugJSON, DebugResponse, False)]


@pytest.mark.parametrize("typed, model, whole", PAIRS, ids=[m.__name__ for _, m, _ in PAIRS])
def test_each_typed_finding_holds_the_models_keys_required_alike(typed, model, whole):
    every, required = model_keys(model)
    declared = set(typed.__annotations__)
    assert declared == every if whole else every <= declared
    assert required <= set(typed.__required_keys__)  # a default the model fills in is always there after it


def test_the_check_names_a_finding_key_the_types_leave_out():
    finding = {"value": "b", "stands_for": "a", "max_rel_error": 0.0, "tolerance": 1e-5, "diverges": False,
               "why": "extra"}
    assert undeclared(finding, debug_json.OutputFinding) == ["value.why: not declared"]
