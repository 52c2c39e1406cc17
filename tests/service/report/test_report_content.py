"""What the report is built from, checked against the response it reports: one timeline bar per
kernel as long as its estimate, roofline points and ceilings, dataflow graphs with every kernel and
each value's HBM bytes, and the summary's numbers. (The rendered page: test_report_html.py.)"""
from __future__ import annotations

import math
from xml.etree import ElementTree

import pytest
from report_example import HARDWARE

from costmodel.formulas import BOUNDS
from costmodel.profile import load_profile
from service.report.dataflow import dataflow_graph, dataflow_svg, kernel_node
from service.report.figures import roofline_points, roofline_spec, roofs, timeline_rows, timeline_spec
from service.report.style import BOUND_COLORS, BOUND_LABELS, seconds, size
from service.report.tables import estimate_rows, rewrite_rows, search_rows, validation_rows

SVG = "{http://www.w3.org/2000/svg}"


def test_the_example_has_what_a_report_must_show(response):
    # The other tests mean little on a program with one kernel and no rewrites.
    assert len(response["kernels"]) >= 3 and response["precompute_kernels"] and response["baseline_kernels"]
    assert sum(response["report"]["rewrites"].values()) > 0


def test_timeline_has_one_bar_per_kernel_back_to_back_each_as_long_as_its_estimate(response):
    kernels, dispatch_s = response["kernels"], response["estimate"]["dispatch_s"]
    assert dispatch_s == load_profile(HARDWARE).kernel.dispatch_overhead_s > 0
    dispatch, *rows = timeline_rows(kernels, dispatch_s)
    assert dispatch["kernel"] == "dispatch" and dispatch["end_us"] == pytest.approx(dispatch_s * 1e6)
    assert [row["kernel"] for row in rows] == [f"k{k['id']}" for k in kernels]
    for row, kernel in zip(rows, kernels):
        assert row["end_us"] - row["start_us"] == pytest.approx(kernel["estimate"]["time_s"] * 1e6)
        assert row["bound"] == BOUND_LABELS[kernel["estimate"]["bound"]]
    rows = [dispatch, *rows]
    assert rows[0]["start_us"] == 0 and all(a["end_us"] == b["start_us"] for a, b in zip(rows, rows[1:]))
    assert rows[-1]["end_us"] == pytest.approx(response["estimate"]["optimized"]["time_s"] * 1e6)
    spec = timeline_spec(kernels, dispatch_s)
    assert spec["mark"]["type"] == "bar" and spec["data"]["values"] == rows
    assert [row["kernel"] for row in timeline_rows(kernels)] == [f"k{k['id']}" for k in kernels]


def test_every_bound_has_its_own_colour_in_charts_and_graphs():
    assert set(BOUND_COLORS) == set(BOUNDS) == set(BOUND_LABELS)
    assert len(set(BOUND_COLORS.values())) == len(BOUNDS)


def test_roofline_points_are_each_kernels_intensity_and_throughput_under_the_profiles_roofs(response):
    kernels = response["kernels"]
    points = {p["kernel"]: p for p in roofline_points(kernels)}
    assert points, "no kernel on the roofline"
    for kernel in kernels:
        est = kernel["estimate"]
        if f"k{kernel['id']}" in points:
            point = points[f"k{kernel['id']}"]
            assert point["intensity"] == pytest.approx(est["flops"] / est["hbm_bytes"])
            assert point["gflops"] == pytest.approx(est["flops"] / est["time_s"] / 1e9)
    profile = load_profile(HARDWARE)
    ceilings = roofs(profile, 1e-3, 1e6)
    vector = [r for r in ceilings if r["roof"] == "vector peak"]
    assert vector[0]["gflops"] == pytest.approx(1e-3 * profile.memory.hbm_bw_bytes_per_s / 1e9)  # bandwidth-bound
    assert vector[-1]["gflops"] == pytest.approx(profile.vector.flops_per_s / 1e9)  # compute-bound
    # no kernel beats the highest ceiling
    top = max(r["gflops"] for r in ceilings)
    assert all(p["gflops"] <= top * (1 + 1e-9) for p in points.values())
    assert len(roofline_spec(kernels, profile)["layer"]) == 2
    assert len(roofline_spec(kernels, None)["layer"]) == 1  # a request's own profile: points only


def test_dataflow_graphs_draw_every_kernel_and_label_each_edge_with_its_hbm_bytes(response, program):
    kernels, precompute = response["kernels"], response["precompute_kernels"]
    graph = dataflow_graph(kernels, precompute)
    nodes = {n.name: n for n in graph.nodes}
    for kernel in kernels:
        assert nodes[kernel_node(kernel)].lines[0] == f"k{kernel['id']} {kernel['kind']}"
    for kernel in precompute:
        node = nodes[kernel_node(kernel, precompute=True)]
        assert node.dashed and node.lines[-1] == "once per weight set"
    outputs = [e for e in graph.edges if e.target == "outputs"]
    assert len(graph.edges) - len(outputs) == sum(len(k["inputs"]) for k in kernels + precompute)
    assert len(outputs) == len(program["outputs"])
    x = program["inputs"][0]  # the activation: 64 x 256 float32 read from HBM
    assert math.prod(x["shape"]) * 4 == 64 * 1024
    assert any(e.source == f"in_{x['name']}" and e.lines == (x["name"], "64 KiB") for e in graph.edges)
    before = dataflow_graph(response["baseline_kernels"])
    assert {f"k{k['id']}" for k in response["baseline_kernels"]} <= {n.name for n in before.nodes}


def _boxes(svg: str) -> dict[str, tuple[float, float, float, float]]:
    """Each node's (left, top, right, bottom) in the drawn SVG."""
    root, boxes = ElementTree.fromstring(svg), {}
    for group in root.iter(f"{SVG}g"):
        if group.get("class") == "node":
            shape = group.find(f"{SVG}rect")
            if shape is not None:
                x, y, w, h = (float(shape.get(a)) for a in ("x", "y", "width", "height"))
            else:
                shape = group.find(f"{SVG}ellipse")
                cx, cy, rx, ry = (float(shape.get(a)) for a in ("cx", "cy", "rx", "ry"))
                x, y, w, h = cx - rx, cy - ry, 2 * rx, 2 * ry
            boxes[group.find(f"{SVG}title").text] = (x, y, x + w, y + h)
    return boxes


def test_the_drawn_graph_has_no_overlapping_nodes_and_every_edge_runs_down_to_its_reader(response):
    graph = dataflow_graph(response["kernels"], response["precompute_kernels"])
    svg = dataflow_svg(graph)
    boxes = _boxes(svg)
    assert set(boxes) == {n.name for n in graph.nodes}
    width, height = (float(v) for v in ElementTree.fromstring(svg).get("viewBox").split()[2:])
    for name, (left, top, right, bottom) in boxes.items():
        assert 0 <= left < right <= width and 0 <= top < bottom <= height, name
        for other, (l2, t2, r2, b2) in boxes.items():
            assert other == name or right <= l2 or r2 <= left or bottom <= t2 or b2 <= top, (name, other)
    for edge in graph.edges:  # a value is read below where it is made
        assert boxes[edge.source][3] < boxes[edge.target][1], edge


def test_summary_rows_are_the_responses_numbers(response):
    est = response["estimate"]
    rows = {row["program"].split(":")[0]: row for row in estimate_rows(est)}
    assert list(rows) == ["naive", "baseline", "optimized", "precompute", "lower bound"]
    assert rows["baseline"]["time"] == seconds(est["baseline"]["time_s"])
    assert rows["baseline"]["vs_optimized"] == f"{est['speedup_vs_baseline']:.3f}x"
    assert rows["naive"]["vs_optimized"] == f"{est['speedup_vs_naive']:.3f}x"
    assert rows["optimized"]["hbm"] == size(est["optimized"]["hbm_bytes"])
    facts = dict(validation_rows(response["validation"]))
    assert facts["verdict"] == response["validation"]["status"]
    assert facts["draws compared"] == str(response["validation"]["trials"])
    search = dict(search_rows(response["report"]))
    assert search["stop reason"] == response["report"]["egraph"]["stop_reason"]
    assert search["e-nodes"] == str(response["report"]["egraph"]["enodes"])


def test_rewrites_are_listed_most_applied_first_and_only_those_that_fired():
    report = {"rewrites": {"add-comm": 3, "fold-scale": 9, "never": 0, "assoc": 3}}
    assert rewrite_rows(report) == [("fold-scale", 9), ("add-comm", 3), ("assoc", 3)]


@pytest.mark.parametrize("value, text", [(1.5e-6, "1.5 µs"), (2.0, "2 s"), (3.25e-3, "3.25 ms"), (0.0, "0 s"),
                                         (None, "n/a")])
def test_seconds_are_shown_in_a_readable_unit(value, text):
    assert seconds(value) == text


@pytest.mark.parametrize("value, text", [(100, "100 B"), (2048, "2 KiB"), (3 * 2**20, "3 MiB"), (5 * 2**30, "5 GiB")])
def test_sizes_are_shown_in_binary_units(value, text):
    assert size(value) == text


def test_the_summary_says_when_xla_groups_the_programs(response):
    """On a profile XLA compiles for, the baseline is XLA and both programs run in its kernels."""
    assert response["estimate"]["priced_as"] == ("xla" if load_profile(HARDWARE).kernel.fusion == "xla" else "chosen")
    as_xla = [row["program"] for row in estimate_rows({**response["estimate"], "priced_as": "xla"})]
    as_chosen = [row["program"] for row in estimate_rows({**response["estimate"], "priced_as": "chosen"})]
    assert as_xla[1:3] == ["baseline: XLA, in its own kernels", "optimized: in XLA's kernels"]
    assert as_chosen[1:3] == ["baseline: conventional compiler", "optimized"]
