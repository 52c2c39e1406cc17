"""Dataflow graphs of a kernel program: kernels as boxes coloured by their bound, program inputs and
outputs as ellipses, one edge per value crossing HBM labelled with its bytes; laid out in layers
(each node one layer below the deepest node it reads) and drawn as an inline SVG element."""
from __future__ import annotations

import graphlib
from collections import defaultdict
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from costmodel.op_cost import nbytes
from lowering.kernel_json import KernelJSON
from service.report.style import BOUND_COLORS, seconds, size

MAX_OPS_SHOWN = 4  # a fused kernel's label lists its first ops, then how many more
OUTPUTS = "outputs"
IO_FILL = "#eeeeee"
# Drawing sizes in px: Helvetica at 10 px averages under 6.2 px a character.
CHAR_W, LINE_H, PAD, GAP_X, GAP_Y, MARGIN, LANE = 6.2, 13, 8, 24, 60, 12, 10


@dataclass(frozen=True)
class Node:
    name: str  # k3 (a kernel), p0 (a weight-only kernel), in_x (a program input), outputs
    lines: tuple[str, ...]
    fill: str
    box: bool = True  # a kernel; else an input or the outputs (an ellipse)
    dashed: bool = False  # weight-only work, run once per weight set

    @property
    def width(self) -> float:
        return max(len(line) for line in self.lines) * CHAR_W + 2 * PAD + (0 if self.box else 2 * PAD)

    @property
    def height(self) -> float:
        return len(self.lines) * LINE_H + 2 * PAD


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    lines: tuple[str, ...]  # the value's name and its bytes


@dataclass(frozen=True)
class DataflowGraph:
    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


def kernel_node(kernel: KernelJSON, precompute: bool = False) -> str:
    """The graph's node name of a kernel (precompute kernels have their own id space)."""
    return f"{'p' if precompute else 'k'}{kernel['id']}"


def _kernel_node(kernel: KernelJSON, precompute: bool) -> Node:
    ops = kernel["ops"][:MAX_OPS_SHOWN] + ([f"+{len(kernel['ops']) - MAX_OPS_SHOWN} more"]
                                          if len(kernel["ops"]) > MAX_OPS_SHOWN else [])
    when = "once per weight set" if precompute else seconds(kernel["estimate"]["time_s"])
    return Node(kernel_node(kernel, precompute), (f"{kernel_node(kernel, precompute)} {kernel['kind']}",
                                                  " ".join(ops), when),
                _tint(BOUND_COLORS[kernel["estimate"]["bound"]]), dashed=precompute)


def _tint(colour: str, share: float = 1 / 3) -> str:
    """`colour` mixed with white, opaque: the label stays legible and no edge shows through a box."""
    channels = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(255 - (255 - c) * share):02x}" for c in channels)


def dataflow_graph(kernels: list[KernelJSON], precompute: list[KernelJSON] | None = None,
                   name: str = "dataflow") -> DataflowGraph:
    """The graph of `kernels` (per call, in execution order) and the weight-only `precompute`
    kernels that feed them (dashed). A value no kernel reads is drawn into the outputs node."""
    placed = [(k, True) for k in precompute or []] + [(k, False) for k in kernels]
    producer = {out: kernel_node(k, pre) for k, pre in placed for out in k["outputs"]}
    read = {value for k, _ in placed for value in k["inputs"]}
    value_bytes = {b["name"]: nbytes((tuple(b["shape"]), b["dtype"])) for k, _ in placed for b in k["buffers"]}
    sources = sorted(value for value in read if value not in producer)  # program inputs and weights
    nodes = [Node(f"in_{s}", (s,), IO_FILL, box=False) for s in sources] + [_kernel_node(k, p) for k, p in placed]
    edges = [Edge(producer.get(value, f"in_{value}"), kernel_node(k, pre), (value, size(value_bytes.get(value))))
             for k, pre in placed for value in k["inputs"]]
    finals = [Edge(kernel_node(k, pre), OUTPUTS, (out, size(value_bytes.get(out))))
              for k, pre in placed for out in k["outputs"] if out not in read]
    if finals:
        nodes.append(Node(OUTPUTS, (OUTPUTS,), IO_FILL, box=False))
    return DataflowGraph(name, tuple(nodes), tuple(edges + finals))


def _layers(graph: DataflowGraph) -> tuple[list[list[Node]], dict[str, int]]:
    """Nodes by layer, each one below the deepest node it reads, and each node's layer; within a
    layer, ordered by where the nodes they read sit (the barycenter rule), which keeps a chain's
    edges from crossing."""
    reads: dict[str, list[str]] = defaultdict(list)
    for edge in graph.edges:
        reads[edge.target].append(edge.source)
    depth: dict[str, int] = {}
    for name in graphlib.TopologicalSorter({n.name: reads[n.name] for n in graph.nodes}).static_order():
        depth[name] = 1 + max((depth[r] for r in reads[name]), default=-1)
    layers: list[list[Node]] = [[] for _ in range(1 + max(depth.values(), default=-1))]
    for node in graph.nodes:
        layers[depth[node.name]].append(node)
    position: dict[str, float] = {}
    for layer in layers:
        layer.sort(key=lambda n: sum(position[r] for r in reads[n.name]) / len(reads[n.name])
                   if reads[n.name] else 0.0)  # a stable sort: inputs keep their order
        position.update({n.name: i / max(1, len(layer) - 1) for i, n in enumerate(layer)})
    return layers, depth


def dataflow_svg(graph: DataflowGraph) -> str:
    """The graph laid out and drawn as an SVG element (no XML prologue: it goes inline); each node a
    `g.node` titled by its name, each edge a `g.edge`. An edge that skips layers runs down a lane
    beside the layers it passes, on the side nearer its ends, so it never crosses a box."""
    layers, depth = _layers(graph)
    inner = max((sum(n.width for n in layer) + GAP_X * (len(layer) - 1) for layer in layers), default=0)
    long = [e for e in graph.edges if depth[e.target] - depth[e.source] > 1]
    centre: dict[str, tuple[float, float, Node]] = {}
    top = MARGIN
    for layer in layers:
        row_height = max(n.height for n in layer)
        x = (inner - sum(n.width for n in layer) - GAP_X * (len(layer) - 1)) / 2
        for node in layer:
            centre[node.name] = (x + node.width / 2, top + row_height / 2, node)
            x += node.width + GAP_X
        top += row_height + GAP_Y
    side = {e: (centre[e.source][0] + centre[e.target][0]) / 2 < inner / 2 for e in long}  # True: the left
    lefts, rights = sum(side.values()), len(long) - sum(side.values())
    shift = MARGIN + LANE * lefts  # the left lanes' room
    width, height = inner + shift + LANE * rights + MARGIN, (top - GAP_Y if layers else top) + MARGIN
    lane, taken = {}, {True: 0, False: 0}
    for edge in long:
        taken[side[edge]] += 1
        lane[edge] = shift - LANE * taken[side[edge]] if side[edge] else shift + inner + LANE * taken[side[edge]]
    arrow = f"{graph.name}-arrow"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dataflow" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
             f'<defs><marker id="{arrow}" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" '
             'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555555"/></marker></defs>']
    for edge in graph.edges:
        (x1, y1, source), (x2, y2, target) = centre[edge.source], centre[edge.target]
        x1, x2, y1, y2 = x1 + shift, x2 + shift, y1 + source.height / 2, y2 - target.height / 2
        if edge in lane:  # down the lane from the gap below its source to the gap above its reader
            xl, ya, yb = lane[edge], y1 + GAP_Y / 2, y2 - GAP_Y / 2
            path = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{ya:.1f} {xl:.1f},{y1:.1f} {xl:.1f},{ya:.1f} L{xl:.1f},{yb:.1f} "
                    f"C{xl:.1f},{y2:.1f} {x2:.1f},{yb:.1f} {x2:.1f},{y2:.1f}")
            x1, y1 = xl, yb  # the label sits in the last gap, as a short edge's does
        else:
            bend = (y2 - y1) / 2
            path = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}"
        label = "".join(f'<tspan x="{(x1 + x2) / 2:.1f}" dy="{0 if i == 0 else 11}">{escape(line)}</tspan>'
                        for i, line in enumerate(edge.lines))
        parts.append(f'<g class="edge"><title>{escape(edge.source)}-&gt;{escape(edge.target)}</title>'
                     f'<path d="{path}" fill="none" stroke="#555555" marker-end="url(#{arrow})"/>'
                     f'<text y="{(y1 + y2) / 2 - 4:.1f}" font-size="9" text-anchor="middle" fill="#333333" '
                     f'stroke="#ffffff" stroke-width="3" paint-order="stroke">{label}</text></g>')
    for x, y, node in centre.values():
        x, w, h = x + shift, node.width, node.height
        outline = (f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6"'
                   if node.box else f'<ellipse cx="{x:.1f}" cy="{y:.1f}" rx="{w / 2:.1f}" ry="{h / 2:.1f}"')
        dash = ' stroke-dasharray="4 3"' if node.dashed else ""
        text = "".join(f'<text x="{x:.1f}" y="{y - h / 2 + PAD + LINE_H * (i + 0.75):.1f}" font-size="10" '
                       f'text-anchor="middle">{escape(line)}</text>' for i, line in enumerate(node.lines))
        parts.append(f'<g class="node"><title>{escape(node.name)}</title>{outline} fill={quoteattr(node.fill)} '
                     f'stroke="#333333"{dash}/>{text}</g>')
    parts.append("</svg>")
    return "".join(parts)
