"""Greedy-DAG extraction over hand-made e-graph views: shared nodes are paid once, cycles avoided."""
from __future__ import annotations

from costmodel.egraph_view import EGraphView, ENode
from costmodel.extract import extract_greedy_dag


_view = EGraphView.from_nodes


def _cost(table):
    return lambda node: table[node.id]


def test_cheapest_node_per_class_is_chosen():
    view = _view([ENode("x", "var", "X", (0,), ()), ENode("a1", "unary", "A", (), ("X",)),
                  ENode("a2", "unary", "A", (), ("X",))], ["A"])
    result = extract_greedy_dag(view, _cost({"x": 0, "a1": 5, "a2": 3}))
    assert result.choice["A"].id == "a2" and result.cost == 3


def test_shared_child_is_paid_once():
    # R = f(S, S') where S' can reuse S's expensive child: DAG cost counts E once.
    nodes = [ENode("e", "var", "E", (0,), ()), ENode("s", "unary", "S", (), ("E",)),
             ENode("t", "unary", "T", (), ("E",)), ENode("r", "binary", "R", (), ("S", "T"))]
    result = extract_greedy_dag(_view(nodes, ["R"]), _cost({"e": 10, "s": 1, "t": 1, "r": 1}))
    assert result.cost == 13


def test_self_referential_node_is_never_chosen():
    nodes = [ENode("x", "var", "X", (0,), ()), ENode("tt", "transpose", "X", (), ("X",))]
    result = extract_greedy_dag(_view(nodes, ["X"]), _cost({"x": 1, "tt": 0}))
    assert result.choice["X"].id == "x"
