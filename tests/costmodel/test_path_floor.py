"""The heaviest-path floor: under every acyclic program of the e-graph, cycles and sharing included."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from costmodel.path_floor import heaviest_path_floors
from rewrites.egraph_view import EGraphView, ENode
from tests.egraph_cases import egraphs, least_dag_cost


def heaviest_path_floor(view: EGraphView, cost: dict[str, float]) -> float:
    return heaviest_path_floors(view, [cost])[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(egraphs())
def test_the_heaviest_path_floor_is_under_every_acyclic_program(case):
    view, table = case
    assert heaviest_path_floor(view, table) <= least_dag_cost(view, table) + 1e-12


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(egraphs())
def test_floors_under_several_costs_at_once_are_each_cost_s_own(case):
    view, table = case
    doubled = {i: 2 * c for i, c in table.items()}
    assert heaviest_path_floors(view, [table, doubled]) == [heaviest_path_floor(view, table),
                                                            heaviest_path_floor(view, doubled)]


def test_a_chain_s_floor_is_its_whole_cost():
    nodes = [ENode("x", "var", "X", (0,), ()), ENode("a", "neg", "A", (), ("X",)),
             ENode("b", "exp", "B", (), ("A",)), ENode("c", "neg", "C", (), ("B",))]
    table = {"x": 0.0, "a": 1.0, "b": 2.0, "c": 3.0}
    assert heaviest_path_floor(EGraphView.from_nodes(nodes, ["C"]), table) == 6.0


def test_parallel_branches_count_the_heavier_only_and_the_cheaper_form_of_each_class():
    # R = X + Y; X by a (5) or a' (4); Y by b (3): the heaviest path of the least program is 4.
    nodes = [ENode("v", "var", "V", (0,), ()), ENode("a", "exp", "X", (), ("V",)),
             ENode("a2", "tanh", "X", (), ("V",)), ENode("b", "neg", "Y", (), ("V",)),
             ENode("r", "add", "R", (), ("X", "Y"))]
    table = {"v": 0.0, "a": 5.0, "a2": 4.0, "b": 3.0, "r": 0.5}
    assert heaviest_path_floor(EGraphView.from_nodes(nodes, ["R"]), table) == 4.5


def test_a_zero_cost_cycle_does_not_lower_the_floor():
    # X = var | t(Y), Y = t(X) | var, free transposes: choosing both transposes is a cycle, not a program.
    nodes = [ENode("x", "var", "X", (0,), ()), ENode("tx", "transpose", "X", (), ("Y",)),
             ENode("y", "var", "Y", (1,), ()), ENode("ty", "transpose", "Y", (), ("X",)),
             ENode("r", "add", "R", (), ("X", "Y"))]
    table = {"x": 1.0, "tx": 0.0, "y": 1.0, "ty": 0.0, "r": 0.0}
    assert heaviest_path_floor(EGraphView.from_nodes(nodes, ["R"]), table) == 1.0


def test_an_output_with_no_finite_term_is_refused():
    view = EGraphView.from_nodes([ENode("t", "transpose", "X", (), ("X",))], ["X"])
    with pytest.raises(ValueError, match="no finite-cost term"):
        heaviest_path_floor(view, {"t": 1.0})
