"""Greedy-DAG extraction over hand-made e-graph views: shared nodes are paid once, cycles avoided."""
from __future__ import annotations

from costmodel.extract import extract_greedy_dag
from rewrites.egraph_view import EGraphView, ENode

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


def test_a_class_that_gets_cheaper_after_its_parent_was_costed_costs_the_parent_again():
    # A is first reached through a1 (51), its parent P costed on that; then a2's longer chain
    # reaches A for 6, and P must be costed again on it.
    nodes = [ENode("b", "var", "B", (0,), ()), ENode("a1", "unary", "A", (), ("B",)),
             ENode("d", "var", "D", (1,), ()), ENode("k", "unary", "C", (), ("D",)),
             ENode("a2", "unary", "A", (), ("C",)), ENode("p", "unary", "P", (), ("A",))]
    result = extract_greedy_dag(_view(nodes, ["P"]), _cost({"b": 1, "a1": 50, "d": 2, "k": 2, "a2": 2, "p": 1}))
    assert result.choice["P"].id == "p" and result.choice["A"].id == "a2" and result.cost == 7


def test_a_node_waits_for_every_child_class_however_its_children_repeat():
    # r reads S twice and T once: it is costed once both have a cost, not before, not never.
    nodes = [ENode("e", "var", "E", (0,), ()), ENode("s", "unary", "S", (), ("E",)),
             ENode("t", "unary", "T", (), ("S",)), ENode("r", "ternary", "R", (), ("S", "T", "S"))]
    result = extract_greedy_dag(_view(nodes, ["R"]), _cost({"e": 1, "s": 1, "t": 1, "r": 1}))
    assert result.choice["R"].id == "r" and result.cost == 4


def test_a_ban_re_costs_every_class_whose_cheapest_set_used_the_banned_node_up_to_the_roots():
    # k1 and k2 both compute the GEMM g inside them (one exclusive group): greedy first takes
    # both (R = r: 3), bans them, and K1, K2 fall back to reading g (6 each, g shared). R must
    # then be costed again, where its own fused form r2 (8) now wins over r (9), and P above it.
    nodes = [ENode("x", "var", "X", (0,), ()), ENode("g", "dot_general", "G", (), ("X",)),
             ENode("k1", "kernel", "K1", (), ("X",)), ENode("k1p", "unary", "K1", (), ("G",)),
             ENode("k2", "kernel", "K2", (), ("X",)), ENode("k2p", "unary", "K2", (), ("G",)),
             ENode("r", "binary", "R", (), ("K1", "K2")), ENode("r2", "kernel", "R", (), ("X",)),
             ENode("p", "unary", "P", (), ("R",))]
    table = {"x": 0, "g": 4, "k1": 1, "k1p": 2, "k2": 1, "k2p": 2, "r": 1, "r2": 8, "p": 1}
    exclusive = [(frozenset({"g"}), frozenset({"k1", "k2"}))]
    result = extract_greedy_dag(_view(nodes, ["P"]), _cost(table), exclusive)
    assert result.choice["R"].id == "r2" and result.choice["P"].id == "p" and result.cost == 9
