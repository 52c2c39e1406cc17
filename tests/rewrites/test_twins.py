"""Twin programs: the same computation on two independent sets of inputs must stay two distinct
computations after saturation. A rule that binds a variable wrongly (or an e-graph engine bug:
egglog 13.2 merged two softmaxes of equal shape when a guard looked up shape(x)) shows up here as
the two copies' outputs landing in one e-class, which is never sound."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from bench.models.large import bert_encoder
from bench.models.zoo import ZOO
from rewrites.egraph_view import view_egraph
from rewrites.ingest import ingest
from rewrites.schedule import SCHEDULES, Budget, saturate
from rule_harness import VALIDATED
from service.optimizer.pipeline import optimize
from wire.capture import capture

pytestmark = pytest.mark.slow  # whole programs through the pipeline


def _twin(fn, args):
    """(fn(*args), fn(*other args)) with every input perturbed, so nothing is shared."""
    other = jax.tree_util.tree_map(lambda a: np.asarray(a) * 1.5 + 0.25 if np.issubdtype(np.asarray(a).dtype,
                                                                                          np.floating) else a, args)
    n = len(args)
    return capture(lambda *both: (fn(*both[:n]), fn(*both[n:])), *args, *other)


def _workloads():
    cases = {name: ZOO[name]() for name in sorted(ZOO) if name != "lstm_scan"}
    fn, args, _ = bert_encoder(1, hidden=32, heads=2, seq=8, batch=2)
    cases["bert_tiny"] = (fn, args)
    cases["softmax"] = (lambda x: jax.nn.softmax(x, axis=-1), (np.ones((2, 8), np.float32),))
    return cases


WORKLOADS = _workloads()


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("fp_mode", ["real", "exact"])
def test_twin_computations_stay_distinct_after_saturation(name, fp_mode):
    program = _twin(*WORKLOADS[name])
    loaded = ingest(program)
    saturate(loaded.egraph, SCHEDULES[fp_mode], Budget())
    roots = view_egraph(loaded.egraph).roots
    half = len(roots) // 2
    merged = [i for i in range(half) if roots[i] == roots[half + i]]
    assert not merged, f"outputs {merged} of the two copies were merged"


def test_two_layer_encoder_keeps_each_layers_weights():
    fn, args, weights = bert_encoder(2, hidden=32, heads=2, seq=8, batch=2)
    program = capture(fn, *args, weight_argnums=weights)
    response = optimize(program, "optu-v1")
    assert response["validation"]["status"] in VALIDATED
    used = {a for e in response["program"]["eqns"] for a in e["in"] if isinstance(a, str)}
    assert all(spec["name"] in used for spec in response["program"]["inputs"] if spec.get("role") == "weight")
