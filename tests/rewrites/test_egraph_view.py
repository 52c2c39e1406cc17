"""The view reads egglog's tables as egglog's own serialization describes the e-graph: every term
node under the same node id in the same class, and each class's shape, dtype and origins."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from rewrites.egraph_view import view_egraph
from rewrites.ingest import ingest
from rewrites.kernel_seeds import seed_kernels
from rewrites.schedule import FUSION_ONLY, SCHEDULES, Budget, saturate
from wire.capture import capture

pytestmark = pytest.mark.unit

F32 = jax.ShapeDtypeStruct


def _layer(x, w, v, b):
    h = jnp.tanh(x @ w + b) * 0.5
    return (h @ v) / h.sum(), jnp.concatenate([h, h], axis=0).T


def _serialized(egraph) -> dict:
    return json.loads(egraph._serialize(split_primitive_outputs=False).to_json())


@pytest.mark.parametrize("stage", ["algebra", "kernels"])
def test_every_term_node_is_read_under_its_serialized_id_and_class(stage):
    program = capture(_layer, F32((4, 8), jnp.float32), F32((8, 6), jnp.float32), F32((6, 3), jnp.float32),
                      F32((6,), jnp.float32))
    with ingest(program, role=stage) as loaded:
        if stage == "algebra":
            saturate(loaded.egraph, SCHEDULES["real"], Budget(iter_limit=4))
        else:
            saturate(loaded.egraph, FUSION_ONLY, Budget())
            seed_kernels(loaded, [([0, 1, 2], {program["eqns"][2]["out"][0]["name"]})])
        view, data = view_egraph(loaded.egraph), _serialized(loaded.egraph)
    serialized = {node_id: node["eclass"] for node_id, node in data["nodes"].items() if node["op"].startswith("Term.")}
    read = {node.id: node.eclass for cls in view.classes.values() for node in cls.nodes}
    assert read and read.items() <= serialized.items()
    # what the view leaves out is only the kernels of one op (their plain nodes stand for them)
    assert all(data["nodes"][n]["op"] == "Term.kernel" for n in serialized.keys() - read.keys())
    if stage == "kernels":
        assert {n.op for c in view.classes.values() for n in c.nodes} >= {"kernel", "kernel_tee", "tee_out"}
    assert all(data["class_data"][cid]["type"] == "rewrites.terms.Term" for cid in view.classes)
    avals = {(i, k): (tuple(out["shape"]), out["dtype"]) for i, eqn in enumerate(program["eqns"])
             for k, out in enumerate(eqn["out"])}
    named = [cls for cls in view.classes.values() if cls.original_values]
    assert len(named) >= len(program["eqns"]) - 1  # (a broadcast of the bias may be the bias's own class)
    assert all((cls.shape, cls.dtype) == avals[value] for cls in named for value in cls.original_values)
    lets = {cid: d["let"] for cid, d in data["class_data"].items() if "let" in d}
    assert {cid for cid, cls in view.classes.items() if cls.origins} == \
        {cid for cid, let in lets.items() if "$e" in let and cid in view.classes}
    assert view.roots == [c for c in view.roots if c in view.classes] and len(view.roots) == 2
