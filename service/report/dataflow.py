"""Dataflow graphs of a kernel program with Graphviz: kernels as boxes coloured by their bound,
program inputs and outputs as ellipses, one edge per value crossing HBM labelled with its bytes."""
from __future__ import annotations

from typing import Any

import graphviz

from costmodel.op_cost import nbytes
from service.report.style import BOUND_COLORS, seconds, size

MAX_OPS_SHOWN = 4  # a fused kernel's label lists its first ops, then how many more
OUTPUTS = "outputs"
NEWLINE = "\\n"  # Graphviz's own line break inside a label (the DOT text stays one line per statement)


def _kernel_label(kernel: dict[str, Any], precompute: bool) -> str:
    ops = kernel["ops"][:MAX_OPS_SHOWN] + ([f"+{len(kernel['ops']) - MAX_OPS_SHOWN} more"]
                                          if len(kernel["ops"]) > MAX_OPS_SHOWN else [])
    when = "once per weight set" if precompute else seconds(kernel["estimate"]["time_s"])
    return f"{kernel_node(kernel, precompute)} {kernel['kind']}{NEWLINE}{' '.join(ops)}{NEWLINE}{when}"


def kernel_node(kernel: dict[str, Any], precompute: bool = False) -> str:
    """The graph's node name of a kernel (precompute kernels have their own id space)."""
    return f"{'p' if precompute else 'k'}{kernel['id']}"


def _value_bytes(kernels: list[dict[str, Any]]) -> dict[str, int]:
    return {b["name"]: nbytes((tuple(b["shape"]), b["dtype"])) for k in kernels for b in k["buffers"]}


def dataflow_graph(kernels: list[dict[str, Any]], precompute: list[dict[str, Any]] | None = None,
                   name: str = "dataflow") -> graphviz.Digraph:
    """The graph of `kernels` (per call, in execution order) and the weight-only `precompute`
    kernels that feed them (dashed). A value no kernel reads is drawn into the outputs node."""
    precompute = precompute or []
    placed = [(k, True) for k in precompute] + [(k, False) for k in kernels]
    producer = {out: kernel_node(k, pre) for k, pre in placed for out in k["outputs"]}
    read = {value for k, _ in placed for value in k["inputs"]}
    value_bytes = _value_bytes(kernels + precompute)
    graph = graphviz.Digraph(name, graph_attr={"rankdir": "TB", "fontname": "Helvetica", "bgcolor": "transparent"},
                             node_attr={"fontname": "Helvetica", "fontsize": "10"},
                             edge_attr={"fontname": "Helvetica", "fontsize": "9", "color": "#555555"})
    for kernel, pre in placed:
        graph.node(kernel_node(kernel, pre), _kernel_label(kernel, pre), shape="box", style="filled,rounded"
                   + (",dashed" if pre else ""),
                   fillcolor=BOUND_COLORS[kernel["estimate"]["bound"]] + "55")  # a light tint: the label stays legible
    for source in sorted(value for value in read if value not in producer):  # program inputs and weights
        graph.node(f"in_{source}", source, shape="ellipse", style="filled", fillcolor="#eeeeee")
    for kernel, pre in placed:
        for value in kernel["inputs"]:
            graph.edge(producer.get(value, f"in_{value}"), kernel_node(kernel, pre),
                       label=f"{value}{NEWLINE}{size(value_bytes.get(value))}")
    finals = [(kernel_node(k, pre), out) for k, pre in placed for out in k["outputs"] if out not in read]
    if finals:
        graph.node(OUTPUTS, OUTPUTS, shape="ellipse", style="filled", fillcolor="#eeeeee")
    for node, value in finals:
        graph.edge(node, OUTPUTS, label=f"{value}{NEWLINE}{size(value_bytes.get(value))}")
    return graph


def dataflow_svg(graph: graphviz.Digraph) -> str | None:
    """The graph laid out by Graphviz's `dot` as an SVG element (no XML prologue: it goes inline);
    None where `dot` is not installed, so a report without graphs still renders."""
    try:
        svg = graph.pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        return None
    return svg[svg.index("<svg"):]
